"""Turn evaluation results into one self-contained HTML report with charts.

The results dict is what the evaluation harness writes to ``results.json``:
``results[strategy][budget]`` holds the metrics of one run, where ``budget`` is
a string of an int, or ``"unbounded"`` for a strategy without a budget::

    {"model": "gpt-4o", "dataset": "builtin:all", "input_price_per_mtok": 2.5,
     "strategies": ["token_window", "full"], "n_conversations": 8, "n_questions": 44,
     "results": {"token_window": {"1024": {"evidence_recall": 0.41, ...,
                                           "outcomes": "kkcl..."}},
                 "full": {"unbounded": {"evidence_recall": 0.98, ...}}},
     "questions": [{"conversation": "c1", "id": "q1", "category": "single-hop",
                    "question": "...", "answer": "...", "evidence": ["m1"]}, ...]}

``write_report(results, Path("eval-out"))`` writes ``results.json``, the
charts and ``report.html`` there, and returns the path of ``report.html``.

Charts need matplotlib (the ``eval`` extra), imported only when
they are drawn. The HTML needs nothing: charts are inlined as SVG.

One concern a module: ``runs`` reads the results (shared by both outputs),
``formats`` writes numbers, ``findings`` writes the sentences at the top,
``charts`` draws the charts (with ``figures``, ``category_chart``, ``labels``
for text that never collides, ``glyphs`` for fonts a PNG lacks, ``svg`` to
inline them), ``questions`` the per-question table, ``page`` the HTML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxwindow.eval.report.charts import Chart, draw_charts, write_charts
from ctxwindow.eval.report.findings import findings
from ctxwindow.eval.report.glyphs import MissingFontWarning
from ctxwindow.eval.report.page import render_html

__all__ = [
    "Chart",
    "MissingFontWarning",
    "draw_charts",
    "findings",
    "render_html",
    "results_json",
    "write_charts",
    "write_report",
]


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """Write ``results.json``, the PNG charts and ``report.html`` to ``out_dir``.

    Returns the path of ``report.html``. Raises ImportError with an install hint
    when matplotlib is missing; warns (``MissingFontWarning``) when the PNG
    charts lack a font for some of their text.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(results_json(results), encoding="utf-8")
    charts = draw_charts(results, out_dir)
    report = out_dir / "report.html"
    report.write_text(render_html(results, charts), encoding="utf-8")
    return report


def results_json(results: dict[str, Any]) -> str:
    """The text of ``results.json``: indented, names readable (not ``\\u`` escapes), and
    the top-level ``"questions"`` list one question a line, to keep long runs compact."""
    questions = results.get("questions")
    rest = {key: value for key, value in results.items() if key != "questions"}
    if not isinstance(questions, list) or not questions or not rest:
        return json.dumps(results, indent=2, ensure_ascii=False) + "\n"
    head = json.dumps(rest, indent=2, ensure_ascii=False).removesuffix("\n}")
    lines = ",\n".join("    " + json.dumps(q, ensure_ascii=False) for q in questions)
    return f'{head},\n  "questions": [\n{lines}\n  ]\n}}\n'
