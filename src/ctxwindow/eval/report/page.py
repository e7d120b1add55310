"""The report's HTML page: summary, tables and the charts, in one self-contained file.

``render_html(results, charts)`` escapes every text taken from the results
and embeds the charts as data URIs, so the page loads nothing from anywhere.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from ctxwindow.eval.report.charts import CAPTIONS
from ctxwindow.eval.report.formats import count, ms, percent, score, usd
from ctxwindow.eval.report.runs import (
    UNBOUNDED,
    Run,
    by_strategy,
    category_counts,
    read_runs,
    strategy_colors,
    subject,
)


@dataclass(frozen=True)
class _Column:
    """A numeric column of the main table: header, metric key and format."""

    header: str
    key: str
    fmt: Callable[[float], str]


COLUMNS = (
    _Column("Evidence recall", "evidence_recall", percent),
    _Column("Turn recall", "turn_recall", percent),
    _Column("Mean tokens", "mean_tokens", count),
    _Column("Cost / question", "mean_cost_usd", usd),
    _Column("Total cost", "total_cost_usd", usd),
    _Column("Build p50 (ms)", "build_ms_p50", ms),
    _Column("Build p99 (ms)", "build_ms_p99", ms),
    _Column("Over budget", "over_budget_rate", percent),
    _Column("Questions", "n", count),
    _Column("N messages", "messages", count),
    _Column("Answer score", "answer_score", score),
)
HOW_TO_READ = (
    "<b>Evidence recall</b> is the share of questions whose evidence messages are "
    "<em>all</em> in the context the strategy built; <b>turn recall</b> is the mean share "
    "of evidence messages present. <b>Tokens</b> are exact prompt tokens for the model, "
    "and <b>cost</b> is those tokens at the model's input price ({price}). <b>Build "
    "p50/p99</b> are the median and 99th-percentile times to build one context. "
    "<b>Over budget</b> is the share of contexts larger than the budget. "
    "<span class=best-key>Highlighted</span>: the best evidence recall at that budget."
)
CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  "Noto Sans", sans-serif; max-width: 1120px; margin: 2rem auto; padding: 0 1rem;
  color: #1f2328; background: #fff; line-height: 1.5; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; }
h2 { font-size: 1.2rem; margin: 2.2rem 0 .6rem; padding-bottom: .25rem;
  border-bottom: 1px solid #d0d7de; }
.summary { color: #57606a; margin: 0 0 1rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .88rem; }
th, td { padding: .35rem .5rem; border-bottom: 1px solid #eaeef2; }
th { background: #f6f8fa; text-align: left; vertical-align: bottom; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num, td.name { white-space: nowrap; }
tbody tr:nth-child(even) { background: #f6f8fa; }
tbody + tbody { border-top: 2px solid #d0d7de; }
td.best, .best-key { background: #dafbe1; font-weight: 600; }
td.na { color: #8c959f; }
th small { font-weight: normal; color: #57606a; }
.swatch { display: inline-block; width: .75em; height: .75em; border-radius: 2px;
  margin-right: .45em; }
figure { margin: 2rem 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: .9rem; margin-top: .4rem; }
@media print {
  body { max-width: none; margin: 0; }
  figure, tr { break-inside: avoid; }
  h2 { break-after: avoid; }
  * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
}
"""


def render_html(results: dict[str, Any], charts: Mapping[str, bytes]) -> str:
    """One self-contained HTML page: summary, tables and ``charts`` (name → PNG bytes).

    Every text taken from ``results`` is escaped; charts are embedded as data URIs,
    so the page loads nothing from anywhere.
    """
    runs = read_runs(results)
    colors = strategy_colors(results)
    title = "ctxwindow evaluation"
    if subject(results):
        title += f": {subject(results)}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p class=summary>{escape(_summary(results))}</p>",
        f"<p>{HOW_TO_READ.format(price=escape(_price(results)))}</p>",
        "<h2>Results by strategy and budget</h2>",
        _main_table(runs, colors),
        _category_section(runs, colors),
        _replay_section(results, colors),
        _charts_section(charts),
    ]
    return _page(title, "\n".join(part for part in body if part))


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        '<meta name=viewport content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _summary(results: Mapping[str, Any]) -> str:
    parts = [
        f"model {results['model']}" if results.get("model") else "",
        f"dataset {results['dataset']}" if results.get("dataset") else "",
        f"{results['n_conversations']} conversations" if "n_conversations" in results else "",
        f"{results['n_questions']} questions" if "n_questions" in results else "",
        f"input price {_price(results)}" if "input_price_per_mtok" in results else "",
        "token counts estimated (no exact tokenizer)" if results.get("estimated_counts") else "",
    ]
    return " · ".join(part for part in parts if part)


def _price(results: Mapping[str, Any]) -> str:
    price = results.get("input_price_per_mtok")
    if price is None:
        return "price unknown"
    return f"{usd(float(price))} per million tokens"


def _main_table(runs: Sequence[Run], colors: Mapping[str, str]) -> str:
    columns = [column for column in COLUMNS if _shown(column, runs)]
    best = _best_recall(runs)
    head = "".join(f"<th class=num>{escape(column.header)}</th>" for column in columns)

    def cells(run: Run) -> str:
        return "".join(_metric_cell(run, column, run in best) for column in columns)

    return _table(runs, colors, head, cells)


def _table(
    runs: Sequence[Run], colors: Mapping[str, str], head: str, cells: Callable[[Run], str]
) -> str:
    """A table with a row per run, a ``<tbody>`` per strategy named on its first row."""
    groups = []
    for strategy, group in by_strategy(runs).items():
        name = _strategy_cell(strategy, colors[strategy])
        rows = [
            f"<tr>{name if i == 0 else '<td></td>'}<td>{_budget_text(run)}</td>{cells(run)}</tr>"
            for i, run in enumerate(group)
        ]
        groups.append("<tbody>" + "\n".join(rows) + "</tbody>")
    thead = f"<thead><tr><th>Strategy</th><th>Budget</th>{head}</tr></thead>"
    return f"<div class=scroll><table>{thead}\n" + "\n".join(groups) + "</table></div>"


def _shown(column: _Column, runs: Sequence[Run]) -> bool:
    """Optional columns appear when some run has them; ``n`` only when it varies."""
    values = [run.metrics.get(column.key) for run in runs]
    if column.key == "n":
        return len(set(values)) > 1
    return any(value is not None for value in values)


def _best_recall(runs: Sequence[Run]) -> list[Run]:
    """The runs with the best evidence recall among two or more at the same budget."""
    by_budget: dict[str, list[Run]] = {}
    for run in runs:
        by_budget.setdefault(run.budget_key, []).append(run)
    best = []
    for group in by_budget.values():
        top = max(run.recall for run in group)
        best += [run for run in group if len(group) > 1 and run.recall == top]
    return best


def _strategy_cell(strategy: str, color: str) -> str:
    swatch = f'<span class=swatch style="background:{color}"></span>'
    return f"<td class=name>{swatch}{escape(strategy)}</td>"


def _budget_text(run: Run) -> str:
    return UNBOUNDED if run.budget is None else f"{run.budget:,}"


def _metric_cell(run: Run, column: _Column, best: bool) -> str:
    value = run.metrics.get(column.key)
    if value is None:
        return "<td class='num na'>—</td>"
    highlight = " best" if best and column.key == "evidence_recall" else ""
    return f"<td class='num{highlight}'>{escape(column.fmt(float(value)))}</td>"


def _category_section(runs: Sequence[Run], colors: Mapping[str, str]) -> str:
    """Evidence recall per question category for every run that reports categories."""
    runs = [run for run in runs if run.metrics.get("by_category")]
    categories = category_counts(runs)
    if not categories:
        return ""
    head = "".join(
        f"<th class=num>{escape(name)}"
        + ("" if n is None else f"<br><small>n={n}</small>")
        + "</th>"
        for name, n in categories.items()
    )
    return "<h2>Evidence recall by question category</h2>\n" + _table(
        runs, colors, head, lambda run: "".join(_category_cell(run, c) for c in categories)
    )


def _category_cell(run: Run, category: str) -> str:
    value = run.metrics["by_category"].get(category, {}).get("evidence_recall")
    if value is None:
        return "<td class='num na'>—</td>"
    return f"<td class=num>{percent(float(value))}</td>"


def _replay_section(results: Mapping[str, Any], colors: Mapping[str, str]) -> str:
    """With ``--replay``: what the provider's prompt cache served, and each turn's cost."""
    rows = []
    for strategy, per_budget in results.get("results", {}).items():
        for budget, metrics in per_budget.items():
            replay = metrics.get("replay")
            if not isinstance(replay, Mapping):
                continue
            rows.append(
                "<tr>" + _strategy_cell(strategy, colors.get(strategy, "#444444"))
                + f"<td>{escape(str(budget))}</td><td>{replay['turns']:,}</td>"
                f"<td>{percent(replay['cached_share'])}</td>"
                f"<td>{escape(usd(replay['input_usd_per_turn']))}</td>"
                f"<td>{percent(metrics['evidence_recall'])}</td></tr>"
            )  # fmt: skip
    if not rows:
        return ""
    cached = results.get("cached_input_price_per_mtok")
    price = "no cached-input price known" if cached is None else f"${cached}/1M cached"
    head = (
        "<tr><th>strategy</th><th>budget</th><th>turns replayed</th><th>served from the"
        " cache</th><th>input $ per turn</th><th>evidence recall</th></tr>"
    )
    return (
        "<h2>Turn by turn, with the prompt cache</h2>\n"
        f"<p>Every user turn replayed as sent; cached tokens priced at {escape(price)}"
        f" ({escape(str(results.get('prompt_cache', 'prefix')))} cache).</p>\n"
        f"<div class=scroll><table>{head}\n" + "\n".join(rows) + "</table></div>"
    )


def _charts_section(charts: Mapping[str, bytes]) -> str:
    if not charts:
        return ""
    figures = [_figure(name, png) for name, png in charts.items()]
    return "<h2>Charts</h2>\n" + "\n".join(figures)


def _figure(name: str, png: bytes) -> str:
    caption = escape(CAPTIONS.get(name, Path(name).stem.replace("_", " ")))
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )
