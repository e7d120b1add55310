"""Turn evaluation results into one self-contained HTML report with charts.

The results dict is what the evaluation harness writes to ``results.json``:
``results[strategy][budget]`` holds the metrics of one run, where ``budget`` is
a string of an int, or ``"unbounded"`` for a strategy without a budget::

    {"model": "gpt-4o", "dataset": "builtin:all", "input_price_per_mtok": 2.5,
     "strategies": ["token_window", "full"], "n_conversations": 8, "n_questions": 44,
     "results": {"token_window": {"1024": {"evidence_recall": 0.41, ...}},
                 "full": {"unbounded": {"evidence_recall": 0.98, ...}}}}

``write_report(results, Path("eval-out"))`` writes ``results.json``, the
charts and ``report.html`` there, and returns the path of ``report.html``.

Charts need matplotlib (``pip install 'ctxwindow[eval]'``), imported only when
they are drawn. The HTML needs nothing: charts are embedded as data URIs.

One concern a module: ``runs`` reads the results (shared by both outputs),
``formats`` writes numbers, ``charts`` draws the PNG files, ``page`` renders
the HTML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxwindow.eval.report.charts import write_charts
from ctxwindow.eval.report.page import render_html

__all__ = ["render_html", "write_charts", "write_report"]


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """Write ``results.json``, the PNG charts and ``report.html`` to ``out_dir``.

    Returns the path of ``report.html``. Raises ImportError with an install hint
    when matplotlib is missing.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    data = json.dumps(results, indent=2, sort_keys=False, ensure_ascii=False)
    (out_dir / "results.json").write_text(data + "\n", encoding="utf-8")
    charts = {path.name: path.read_bytes() for path in write_charts(results, out_dir)}
    report = out_dir / "report.html"
    report.write_text(render_html(results, charts), encoding="utf-8")
    return report
