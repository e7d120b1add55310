"""The report's HTML page, in one self-contained file.

In order: what was evaluated; the findings (``findings.py``); the results
table with the recall charts; recall by category (heat map and table); with
``--replay``, the cost of each turn with the prompt cache; the per-question
table with its filters (``questions.py``). ``render_html(results, charts)``
escapes every text taken from the results and inlines the charts as SVG (the
browser draws their text, CJK included) with their PNG as a download link, so
the page loads nothing from anywhere.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from ctxwindow.eval.report.charts import Chart
from ctxwindow.eval.report.findings import RECENT, findings
from ctxwindow.eval.report.formats import count, ms, percent, score, usd
from ctxwindow.eval.report.glyphs import advice
from ctxwindow.eval.report.questions import questions_section
from ctxwindow.eval.report.runs import (
    UNBOUNDED,
    Run,
    by_strategy,
    category_counts,
    read_runs,
    strategy_colors,
    strategy_order,
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
    _Column("Kept whole", "evidence_recall_whole", percent),
    _Column("Turn recall", "turn_recall", percent),
    _Column("Recent recall", "recent_recall", percent),
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
# The sections' anchors (their <h2> ids), as the links at the top of the page name them.
NAVIGATION = {
    "findings": "Findings",
    "strategies": "Strategies",
    "results": "Results",
    "categories": "By category",
    "replay": "With the prompt cache",
    "questions": "Question by question",
    "charts": "Charts",
}
# The charts a section shows; any other goes to the "Charts" section at the end.
PLACED_CHARTS = frozenset(
    {"recall_vs_budget.png", "recall_vs_tokens.png", "recall_by_category.png", "cost_per_turn.png"}
)
HOW_TO_READ = (
    "<b>Evidence recall</b> is the share of questions whose evidence messages are "
    "<em>all</em> in the context the strategy built (one sent compressed or summarized "
    "counts when the answer is in its compressed form); <b>kept whole</b> is the share "
    "whose evidence is all there uncompressed; <b>turn recall</b> is the mean share of "
    "evidence messages present. <b>Recent recall</b> is the mean share of the last "
    "{recent} messages before each question that its context has. <b>Tokens</b> are "
    "exact prompt tokens for the model, and <b>cost</b> is those tokens at the model's "
    "input price ({price}). <b>Build p50/p99</b> are the median and 99th-percentile "
    "times to build one context. <b>Over budget</b> is the share of contexts larger than "
    "the budget. <span class=best-key>Highlighted</span>: the best evidence recall at "
    "that budget."
)
CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  "Noto Sans", sans-serif; max-width: 1120px; margin: 2rem auto; padding: 0 1rem;
  color: #1f2328; background: #fff; line-height: 1.5; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; }
nav { font-size: .9rem; margin: 0 0 1rem; }
nav a { margin-right: 1rem; }
.findings { background: #f6f8fa; border-left: 4px solid #0969da;
  padding: .6rem 1rem .6rem 2rem; margin: 0 0 1rem; }
.findings li { margin: .25rem 0; }
.strategies dt { font-weight: 600; margin-top: .5rem; }
.strategies dd { margin: .1rem 0 0 1.2em; color: #24292f; }
.note { background: #fff8c5; border-left: 4px solid #bf8700; padding: .5rem .8rem; }
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
figure img, figure svg { display: block; width: 100%; max-width: 100%; height: auto;
  border: 1px solid #eaeef2; }
figure svg * { stroke-linejoin: round; stroke-linecap: butt; }
figure svg text { font-family: "DejaVu Sans", "Bitstream Vera Sans", Verdana,
  "Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "PingFang SC",
  "Hiragino Sans", "Microsoft YaHei", "WenQuanYi Zen Hei", sans-serif; }
figcaption { color: #57606a; font-size: .9rem; margin-top: .4rem; }
details { margin: 1rem 0; }
summary { cursor: pointer; color: #0969da; }
.filters { display: flex; flex-wrap: wrap; gap: .4rem .6rem; align-items: center;
  margin: .8rem 0; font-size: .9rem; }
.filters label { font-weight: 600; }
.filters span { white-space: nowrap; }
.filters input, .filters select, .filters button { font: inherit; padding: .2rem .35rem; }
.filters output { color: #57606a; margin-left: auto; }
:focus-visible { outline: 2px solid #0969da; outline-offset: 2px; }
.questions { max-height: 80vh; overflow: auto; border: 1px solid #eaeef2; }
.questions thead th { position: sticky; top: 0; z-index: 1; }
.questions thead tr + tr th { top: 2.1rem; }
.questions td { vertical-align: top; }
.qid { color: #57606a; font-size: .8rem; }
th.budget { text-align: center; font-weight: normal; font-size: .8rem; }
.answer { color: #57606a; font-size: .8rem; }
.answer::before { content: "answer: "; }
th.run-group { text-align: center; border-left: 2px solid #d0d7de; white-space: nowrap; }
.o { text-align: center; font-weight: 600; min-width: 1.5rem; padding: .35rem .15rem; }
.o.k { background: #dafbe1; color: #116329; }
.o.c { background: #ddf4ff; color: #0550ae; }
.o.p { background: #fff1e5; color: #953800; }
.o.l { background: #ffebe9; color: #a40e26; }
span.o { display: inline-block; padding: 0 .3rem; border-radius: 3px; }
@media print {
  body { max-width: none; margin: 0; }
  figure, tr { break-inside: avoid; }
  h2 { break-after: avoid; }
  * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
}
"""


def render_html(results: dict[str, Any], charts: Sequence[Chart] = ()) -> str:
    """One self-contained HTML page of ``results`` and their ``charts``.

    Every text taken from ``results`` is escaped; charts are inlined (SVG, or the
    PNG as a data URI when a chart has no SVG), so the page loads nothing from
    anywhere.
    """
    runs = read_runs(results)
    colors = strategy_colors(results)
    drawn = {chart.name: chart for chart in charts}
    title = "ctxwindow evaluation"
    if subject(results):
        title += f": {subject(results)}"
    sections = {
        "findings": _findings_section(results),
        "strategies": _strategies_section(results, colors),
        "results": _results_section(results, runs, colors, drawn),
        "categories": _category_section(runs, colors, drawn),
        "replay": _replay_section(results, colors, drawn),
        "questions": questions_section(results, runs, colors),
        "charts": _charts_section([c for c in charts if c.name not in PLACED_CHARTS]),
    }
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p class=summary>{escape(_summary(results))}</p>",
        _nav([anchor for anchor, section in sections.items() if section]),
        *sections.values(),
    ]
    return _page(title, "\n".join(part for part in body if part))


def _nav(anchors: Sequence[str]) -> str:
    """Links to the page's sections (each has its ``<h2 id=ANCHOR>``)."""
    if len(anchors) < 2:
        return ""
    links = "".join(f"<a href='#{anchor}'>{NAVIGATION[anchor]}</a>" for anchor in anchors)
    return f"<nav aria-label='Sections'>{links}</nav>"


def _findings_section(results: Mapping[str, Any]) -> str:
    sentences = findings(results)
    if not sentences:
        return ""
    names = _strategy_names(results)
    items = "".join(f"<li>{_bold_names(sentence, names)}</li>" for sentence in sentences)
    return f"<h2 id=findings>Findings</h2>\n<ul class=findings>{items}</ul>"


def _strategies_section(results: Mapping[str, Any], colors: Mapping[str, str]) -> str:
    """What each measured strategy keeps, as the run described it (``strategy_descriptions``:
    the first paragraph of each strategy class's docstring)."""
    described = results.get("strategy_descriptions") or {}
    rows = [
        f"<dt>{_swatch(colors.get(name, 'transparent'))}{escape(name)}</dt>"
        f"<dd>{escape(described[name])}</dd>"
        for name in strategy_order(results)
        if described.get(name)
    ]
    if not rows:
        return ""
    return "<h2 id=strategies>What each strategy keeps</h2>\n<dl class=strategies>" + (
        "".join(rows) + "</dl>"
    )


def _strategy_names(results: Mapping[str, Any]) -> re.Pattern[str]:
    """Matches the strategies' names as whole words (the longest first)."""
    names = sorted(strategy_order(results), key=len, reverse=True)
    return re.compile(r"(?<!\w)(" + "|".join(re.escape(name) for name in names) + r")(?!\w)")


def _bold_names(sentence: str, names: re.Pattern[str]) -> str:
    """``sentence`` escaped, with the strategies' names in bold."""
    parts = names.split(sentence)  # the names caught are at the odd places
    return "".join(f"<b>{escape(p)}</b>" if i % 2 else escape(p) for i, p in enumerate(parts))


def _results_section(
    results: Mapping[str, Any],
    runs: Sequence[Run],
    colors: Mapping[str, str],
    drawn: Mapping[str, Chart],
) -> str:
    return "\n".join([
        "<h2 id=results>Results by strategy and budget</h2>",
        f"<p>{HOW_TO_READ.format(price=escape(_price(results)), recent=RECENT)}</p>",
        _main_table(runs, colors),
        _font_note(list(drawn.values())),
        _figures(drawn, "recall_vs_budget.png", "recall_vs_tokens.png"),
    ])  # fmt: skip


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
    return f"<td class=name>{_swatch(color)}{escape(strategy)}</td>"


def _swatch(color: str) -> str:
    return f'<span class=swatch style="background:{color}"></span>'


def _budget_text(run: Run) -> str:
    return UNBOUNDED if run.budget is None else f"{run.budget:,}"


def _metric_cell(run: Run, column: _Column, best: bool) -> str:
    value = run.metrics.get(column.key)
    if value is None:
        return "<td class='num na'>—</td>"
    highlight = " best" if best and column.key == "evidence_recall" else ""
    return f"<td class='num{highlight}'>{escape(column.fmt(float(value)))}</td>"


def _category_section(
    runs: Sequence[Run], colors: Mapping[str, str], drawn: Mapping[str, Chart]
) -> str:
    """Evidence recall per question category: the heat map, and a table of every run."""
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
    table = _table(
        runs, colors, head, lambda run: "".join(_category_cell(run, c) for c in categories)
    )
    return (
        "<h2 id=categories>Evidence recall by question category</h2>\n"
        + _figures(drawn, "recall_by_category.png")
        + f"\n<details open><summary>The numbers</summary>\n{table}\n</details>"
    )


def _category_cell(run: Run, category: str) -> str:
    value = run.metrics["by_category"].get(category, {}).get("evidence_recall")
    if value is None:
        return "<td class='num na'>—</td>"
    return f"<td class=num>{percent(float(value))}</td>"


def _replay_section(
    results: Mapping[str, Any], colors: Mapping[str, str], drawn: Mapping[str, Chart]
) -> str:
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
        "<h2 id=replay>Turn by turn, with the prompt cache</h2>\n"
        f"<p>Every user turn replayed as sent; cached tokens priced at {escape(price)}"
        f" ({escape(str(results.get('prompt_cache', 'prefix')))} cache).</p>\n"
        f"<div class=scroll><table>{head}\n"
        + "\n".join(rows)
        + "</table></div>\n"
        + _figures(drawn, "cost_per_turn.png")
    )


def _figures(drawn: Mapping[str, Chart], *names: str) -> str:
    """The named charts, those that were drawn (each is in ``PLACED_CHARTS``)."""
    return "\n".join(_figure(drawn[name]) for name in names if name in drawn)


def _charts_section(charts: Sequence[Chart]) -> str:
    """Charts no section of the page shows (a chart of one's own)."""
    if not charts:
        return ""
    return "<h2 id=charts>Charts</h2>\n" + "\n".join(_figure(chart) for chart in charts)


def _figure(chart: Chart) -> str:
    caption = escape(chart.caption)
    data = base64.b64encode(chart.png).decode("ascii")
    png = f"data:image/png;base64,{data}"
    if not chart.svg:
        image = f'<img src="{png}" alt="{caption}">'
        return f"<figure>{image}<figcaption>{caption}</figcaption></figure>"
    download = f' <a href="{png}" download="{escape(chart.name)}">PNG</a>'
    return f"<figure>{chart.svg}<figcaption>{caption}{download}</figcaption></figure>"


def _font_note(charts: Sequence[Chart]) -> str:
    """When the PNG files draw a script as boxes for want of a font: say so, and the fix."""
    missing = sorted({script for chart in charts for script in chart.missing_scripts})
    if not missing:
        return ""
    return f"<p class=note role=note>{escape(advice(missing))}</p>"
