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
"""

from __future__ import annotations

import base64
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["render_html", "write_charts", "write_report"]

UNBOUNDED = "unbounded"
INSTALL_HINT = "pip install 'ctxwindow[eval]'"

# Matplotlib's tab10: one color per strategy, the same in every chart and table.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">")
FALLBACK_FONTS = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "Noto Sans",
)
CHART_STYLE: dict[str, Any] = {
    "figure.figsize": (8.0, 5.0),
    "figure.dpi": 130,
    "savefig.dpi": 130,
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.titlecolor": "#57606a",
    "figure.titlesize": 13,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
}


@dataclass(frozen=True)
class _Run:
    """One strategy at one budget (``budget`` is None for an unbounded strategy)."""

    strategy: str
    budget: int | None
    metrics: Mapping[str, Any]

    @property
    def budget_key(self) -> str:
        return UNBOUNDED if self.budget is None else str(self.budget)

    @property
    def recall(self) -> float:
        return float(self.metrics["evidence_recall"])

    @property
    def tokens(self) -> float:
        return float(self.metrics["mean_tokens"])


# --- reading the results --------------------------------------------------------------


def _strategies(results: Mapping[str, Any]) -> list[str]:
    """Strategy names in the declared order, then any others the results hold."""
    runs = results.get("results", {})
    declared = [name for name in results.get("strategies", []) if name in runs]
    return declared + [name for name in runs if name not in declared]


def _budget_of(key: str) -> int | None:
    return None if key == UNBOUNDED else int(key)


def _budget_order(key: str) -> tuple[bool, int]:
    budget = _budget_of(key)
    return budget is None, budget or 0


def _runs(results: Mapping[str, Any]) -> list[_Run]:
    """Every strategy × budget: strategies in order, budgets ascending, unbounded last."""
    runs = []
    for strategy in _strategies(results):
        by_budget = results["results"][strategy]
        for key in sorted(by_budget, key=_budget_order):
            runs.append(_Run(strategy, _budget_of(key), by_budget[key]))
    return runs


def _by_strategy(runs: Sequence[_Run]) -> dict[str, list[_Run]]:
    groups: dict[str, list[_Run]] = {}
    for run in runs:
        groups.setdefault(run.strategy, []).append(run)
    return groups


def _colors(results: Mapping[str, Any]) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(_strategies(results))}


def _subject(results: Mapping[str, Any]) -> str:
    """``"gpt-4o · builtin:all"``: what was evaluated, for titles."""
    parts = [str(results[key]) for key in ("model", "dataset") if results.get(key)]
    return " · ".join(parts)


# --- number formats -------------------------------------------------------------------


def _budget_label(tokens: int) -> str:
    """A short budget label: 1024 → ``1k``, 131072 → ``128k``, 3000 → ``3k``."""
    for size, unit in ((1 << 20, "M"), (1 << 10, "k"), (10**6, "M"), (10**3, "k")):
        if tokens >= size and tokens % size == 0:
            return f"{tokens // size}{unit}"
    return f"{tokens:,}"


def _tokens_label(tokens: float) -> str:
    """A short token count: 23412.5 → ``23.4k``, 812 → ``812``."""
    if tokens >= 10**6:
        return f"{tokens / 10**6:.1f}M"
    if tokens >= 10**3:
        return f"{tokens / 10**3:.1f}k"
    return f"{tokens:.0f}"


def _percent(value: float) -> str:
    return f"{value * 100:.1f}%"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _usd(value: float) -> str:
    """Dollars with three significant digits below $1: ``$0.00250``, ``$0.110``, ``$12.40``."""
    if value == 0 or abs(value) >= 1:
        return f"${value:,.2f}"
    decimals = 2 - math.floor(math.log10(abs(value)))
    return f"${value:.{max(decimals, 2)}f}"


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:,.1f}"


def _score(value: float) -> str:
    return f"{value:.2f}"


# --- charts ---------------------------------------------------------------------------


def write_charts(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the charts of ``results`` as PNG files in ``out_dir``; return their paths.

    ``recall_vs_budget.png`` and ``recall_vs_tokens.png`` always (when there is
    something to draw), ``recall_by_category.png`` when runs break recall down by
    question category. Identical results give byte-identical files.

    Raises ImportError with an install hint when matplotlib is missing.
    """
    style = _chart_style()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = _runs(results)
    colors = _colors(results)
    paths = []
    for name, draw in CHARTS.items():
        with _style_context(style):
            figure = draw(results, runs, colors)
            if figure is not None:
                _save(figure, out_dir / name)
                paths.append(out_dir / name)
    return paths


def _chart_style() -> dict[str, Any]:
    """The fixed chart style, with fallback fonts for CJK names where installed."""
    try:
        from matplotlib import font_manager
    except ImportError as exc:
        raise ImportError(f"charts need matplotlib: {INSTALL_HINT}") from exc
    installed = {font.name for font in font_manager.fontManager.ttflist}
    fonts = ["DejaVu Sans", *(name for name in FALLBACK_FONTS if name in installed)]
    return {**CHART_STYLE, "font.family": fonts}


def _style_context(style: Mapping[str, Any]) -> Any:
    """Matplotlib defaults plus ``style``, whatever the user's matplotlibrc says."""
    import matplotlib.style

    return matplotlib.style.context(["default", dict(style)])


def _save(figure: Figure, path: Path) -> None:
    with warnings.catch_warnings():
        # A name in a script no installed font covers is drawn as boxes; the HTML
        # tables still show it, and the warning gives the reader nothing to do.
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        figure.savefig(path, format="png", metadata={"Software": None})


def _new_axes(results: Mapping[str, Any], title: str) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(layout="constrained")
    axes = figure.subplots()
    figure.suptitle(_plain(title))
    axes.set_title(_plain(_subject(results)), wrap=True)
    return figure, axes


def _plain(text: str) -> str:
    """Chart text with ``$`` escaped so matplotlib never reads user names as math."""
    return text.replace("$", r"\$")


def _percent_axis(axes: Axes, label: str) -> None:
    from matplotlib.ticker import PercentFormatter

    axes.set_ylim(0, 1.05)
    axes.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    axes.set_ylabel(label)


def _tokens_axis(axes: Axes, ticks: Sequence[int], label: str) -> None:
    """A log2 token axis ticked at ``ticks`` with short labels (1k, 2k, 4k)."""
    from matplotlib.ticker import NullLocator

    axes.set_xscale("log", base=2)
    axes.set_xticks(list(ticks), labels=[_budget_label(tick) for tick in ticks])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xlabel(label)


def _legend(figure: Figure, handles: list[Any], labels: list[str]) -> None:
    """A legend below the axes, never over the data; labels are taken verbatim."""
    figure.legend(
        handles,
        [_plain(label) for label in labels],
        loc="outside lower center",
        ncols=_legend_columns(labels),
    )


def _legend_columns(labels: Sequence[str]) -> int:
    """One row when the labels fit the figure width, else as many columns as fit."""
    # At 10 pt and 130 dpi a character is at most ~10 px; a handle and gap ~60 px.
    widths = [len(label) * 10 + 60 for label in labels]
    if sum(widths) <= 900:
        return len(labels)
    return max(1, 900 // max(widths))


def _recall_vs_budget(
    results: Mapping[str, Any], runs: Sequence[_Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall per budget: a line per budgeted strategy, dashed for unbounded."""
    budgets = sorted({run.budget for run in runs if run.budget is not None})
    if not budgets:
        return None
    figure, axes = _new_axes(results, "Evidence recall vs context budget")
    handles, labels = [], []
    for i, (strategy, group) in enumerate(_by_strategy(runs).items()):
        color = colors[strategy]
        for run in (run for run in group if run.budget is None):
            handles.append(axes.axhline(run.recall, color=color, linewidth=2, linestyle="--"))
            labels.append(f"{strategy} (unbounded, {_tokens_label(run.tokens)} tokens)")
        points = [(run.budget, run.recall) for run in group if run.budget is not None]
        if points:
            x, y = zip(*points, strict=True)
            marker = MARKERS[i % len(MARKERS)]
            (line,) = axes.plot(x, y, color=color, linewidth=2, marker=marker)
            handles.append(line)
            labels.append(strategy)
    _tokens_axis(axes, budgets, "context budget (tokens, log scale)")
    axes.set_xlim(budgets[0] / 1.4, budgets[-1] * 1.4)
    _percent_axis(axes, "evidence recall (% of questions)")
    _legend(figure, handles, labels)
    return figure


def _recall_vs_tokens(
    results: Mapping[str, Any], runs: Sequence[_Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall against tokens paid: points per budget, a star per unbounded run."""
    if not runs:
        return None
    figure, axes = _new_axes(results, "Evidence recall vs prompt tokens paid")
    handles, labels = [], []
    for i, (strategy, group) in enumerate(_by_strategy(runs).items()):
        marker = MARKERS[i % len(MARKERS)]
        for handle, label in _plot_tokens(axes, group, colors[strategy], marker):
            handles.append(handle)
            labels.append(label)
    _label_budgets(axes, runs, colors)
    tokens = [max(run.tokens, 1.0) for run in runs]
    low, high = min(tokens) / 1.3, max(tokens) * 1.3
    _tokens_axis(axes, _powers_of_two(low, high), "mean prompt tokens per question (log scale)")
    axes.set_xlim(low, high)
    _percent_axis(axes, "evidence recall (% of questions)")
    _legend(figure, handles, labels)
    return figure


def _plot_tokens(
    axes: Axes, group: Sequence[_Run], color: str, marker: str
) -> list[tuple[Any, str]]:
    """Plot one strategy on the tokens chart; return its legend entries."""
    entries: list[tuple[Any, str]] = []
    points = [(run.tokens, run.recall) for run in group if run.budget is not None]
    if points:
        x, y = zip(*points, strict=True)
        (line,) = axes.plot(x, y, color=color, linewidth=2, marker=marker)
        # The markers again, above the budget labels, so a label never hides a point.
        axes.plot(x, y, color=color, linestyle="none", marker=marker, zorder=3)
        entries.append((line, group[0].strategy))
    for run in (run for run in group if run.budget is None):
        star = axes.scatter([run.tokens], [run.recall], marker="*", s=220, color=color, zorder=3)
        # No label by the star: the legend names it, and a budgeted point that
        # keeps everything lands on the same spot with its own label.
        entries.append((star, f"{run.strategy} (unbounded)"))
    return entries


# Where a label sits relative to its point. Recall rises with tokens, so up-left
# of a point is above its curve, down-right below it, and right between curves.
_ABOVE = ((-7, 6), "right")
_RIGHT = ((9, -3), "left")
_BELOW = ((7, -13), "left")


def _label_budgets(axes: Axes, runs: Sequence[_Run], colors: Mapping[str, str]) -> None:
    """Label each budgeted point; at each budget the top label goes above, the bottom below."""
    by_budget: dict[int, list[_Run]] = {}
    for run in runs:
        if run.budget is not None:
            by_budget.setdefault(run.budget, []).append(run)
    for budget, group in by_budget.items():
        ranked = sorted(group, key=lambda run: -run.recall)
        for rank, run in enumerate(ranked):
            place = _ABOVE if rank == 0 else _BELOW if rank == len(ranked) - 1 else _RIGHT
            xy = (run.tokens, run.recall)
            _annotate(axes, _budget_label(budget), xy, place, colors[run.strategy])


def _annotate(
    axes: Axes,
    text: str,
    xy: tuple[float, float],
    place: tuple[tuple[int, int], str],
    color: str,
) -> None:
    """A small label by a point, on a white backing so crossing lines stay legible."""
    offset, align = place
    backing = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"}
    axes.annotate(
        _plain(text), xy, xytext=offset, textcoords="offset points",
        fontsize=8, color=color, ha=align, bbox=backing, zorder=2.5,
    )  # fmt: skip


def _powers_of_two(low: float, high: float) -> list[int]:
    """Powers of two inside [low, high], thinned to at most eight ticks."""
    first, last = math.ceil(math.log2(low)), math.floor(math.log2(high))
    ticks = [2**power for power in range(first, last + 1)]
    step = max(1, math.ceil(len(ticks) / 8))
    return ticks[::step] or [2 ** round(math.log2(high))]


def _category_runs(runs: Sequence[_Run]) -> list[_Run]:
    """Each strategy's largest budget, plus unbounded runs, where categories exist."""
    chosen = []
    for group in _by_strategy(runs).values():
        budgeted = [run for run in group if run.budget is not None]
        chosen += budgeted[-1:] + [run for run in group if run.budget is None]
    return [run for run in chosen if run.metrics.get("by_category")]


def _categories(runs: Sequence[_Run]) -> dict[str, int | None]:
    """Category names in first-seen order, each with its question count if runs agree."""
    counts: dict[str, set[int | None]] = {}
    for run in runs:
        for name, metrics in run.metrics.get("by_category", {}).items():
            counts.setdefault(name, set()).add(metrics.get("n"))
    return {name: n.pop() if len(n) == 1 else None for name, n in counts.items()}


def _run_label(run: _Run) -> str:
    if run.budget is None:
        return f"{run.strategy} (unbounded)"
    return f"{run.strategy} @ {_budget_label(run.budget)}"


def _recall_by_category(
    results: Mapping[str, Any], runs: Sequence[_Run], colors: Mapping[str, str]
) -> Figure | None:
    """Grouped bars: evidence recall per category, one bar per chosen run."""
    chosen = _category_runs(runs)
    categories = _categories(chosen)
    if not categories:
        return None
    figure, axes = _new_axes(results, "Evidence recall by question category")
    width = 0.8 / len(chosen)
    handles = []
    for i, run in enumerate(chosen):
        by_category = run.metrics["by_category"]
        values = [by_category.get(name, {}).get("evidence_recall", math.nan) for name in categories]
        offsets = [c - 0.4 + width * (i + 0.5) for c in range(len(categories))]
        hatch = "//" if run.budget is None else None
        bars = axes.bar(offsets, values, width, color=colors[run.strategy], hatch=hatch)
        if len(chosen) * len(categories) <= 24:
            texts = ["" if math.isnan(v) else f"{v * 100:.0f}" for v in values]
            axes.bar_label(bars, texts, padding=2, fontsize=7)
        handles.append(bars)
    names = [_category_label(name, n) for name, n in categories.items()]
    axes.set_xticks(range(len(categories)), labels=[_plain(name) for name in names])
    if len(categories) > 5:  # long rows of names would run into each other
        for tick in axes.get_xticklabels():
            tick.set(rotation=30, horizontalalignment="right", rotation_mode="anchor")
    axes.grid(False, axis="x")
    axes.set_xlabel("question category (n = questions)")
    _percent_axis(axes, "evidence recall (% of questions)")
    _legend(figure, handles, [_run_label(run) for run in chosen])
    return figure


def _category_label(name: str, n: int | None) -> str:
    return name if n is None else f"{name}\n(n={n})"


CHARTS: dict[
    str, Callable[[Mapping[str, Any], Sequence[_Run], Mapping[str, str]], Figure | None]
] = {
    "recall_vs_budget.png": _recall_vs_budget,
    "recall_vs_tokens.png": _recall_vs_tokens,
    "recall_by_category.png": _recall_by_category,
}
CAPTIONS = {
    "recall_vs_budget.png": (
        "Evidence recall at each context budget, one line per strategy. Dashed lines are "
        "strategies without a budget, labelled with the tokens they send."
    ),
    "recall_vs_tokens.png": (
        "Evidence recall against the prompt tokens actually paid for; point labels are "
        "budgets, stars are unbounded strategies. Up and to the left is better."
    ),
    "recall_by_category.png": (
        "Evidence recall per question category at each strategy's largest budget "
        "(hatched: unbounded strategies); bar labels are percent."
    ),
}


# --- HTML -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    """A numeric column of the main table: header, metric key and format."""

    header: str
    key: str
    fmt: Callable[[float], str]


COLUMNS = (
    _Column("Evidence recall", "evidence_recall", _percent),
    _Column("Turn recall", "turn_recall", _percent),
    _Column("Mean tokens", "mean_tokens", _count),
    _Column("Cost / question", "mean_cost_usd", _usd),
    _Column("Total cost", "total_cost_usd", _usd),
    _Column("Build p50 (ms)", "build_ms_p50", _ms),
    _Column("Build p99 (ms)", "build_ms_p99", _ms),
    _Column("Over budget", "over_budget_rate", _percent),
    _Column("Questions", "n", _count),
    _Column("N messages", "messages", _count),
    _Column("Answer score", "answer_score", _score),
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
    runs = _runs(results)
    colors = _colors(results)
    title = "ctxwindow evaluation"
    if _subject(results):
        title += f": {_subject(results)}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p class=summary>{escape(_summary(results))}</p>",
        f"<p>{HOW_TO_READ.format(price=escape(_price(results)))}</p>",
        "<h2>Results by strategy and budget</h2>",
        _main_table(runs, colors),
        _category_section(runs, colors),
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
    ]
    return " · ".join(part for part in parts if part)


def _price(results: Mapping[str, Any]) -> str:
    price = results.get("input_price_per_mtok")
    if price is None:
        return "price unknown"
    return f"{_usd(float(price))} per million tokens"


def _main_table(runs: Sequence[_Run], colors: Mapping[str, str]) -> str:
    columns = [column for column in COLUMNS if _shown(column, runs)]
    best = _best_recall(runs)
    head = "".join(f"<th class=num>{escape(column.header)}</th>" for column in columns)

    def cells(run: _Run) -> str:
        return "".join(_metric_cell(run, column, run in best) for column in columns)

    return _table(runs, colors, head, cells)


def _table(
    runs: Sequence[_Run], colors: Mapping[str, str], head: str, cells: Callable[[_Run], str]
) -> str:
    """A table with a row per run, a ``<tbody>`` per strategy named on its first row."""
    groups = []
    for strategy, group in _by_strategy(runs).items():
        name = _strategy_cell(strategy, colors[strategy])
        rows = [
            f"<tr>{name if i == 0 else '<td></td>'}<td>{_budget_text(run)}</td>{cells(run)}</tr>"
            for i, run in enumerate(group)
        ]
        groups.append("<tbody>" + "\n".join(rows) + "</tbody>")
    thead = f"<thead><tr><th>Strategy</th><th>Budget</th>{head}</tr></thead>"
    return f"<div class=scroll><table>{thead}\n" + "\n".join(groups) + "</table></div>"


def _shown(column: _Column, runs: Sequence[_Run]) -> bool:
    """Optional columns appear when some run has them; ``n`` only when it varies."""
    values = [run.metrics.get(column.key) for run in runs]
    if column.key == "n":
        return len(set(values)) > 1
    return any(value is not None for value in values)


def _best_recall(runs: Sequence[_Run]) -> list[_Run]:
    """The runs with the best evidence recall among two or more at the same budget."""
    by_budget: dict[str, list[_Run]] = {}
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


def _budget_text(run: _Run) -> str:
    return UNBOUNDED if run.budget is None else f"{run.budget:,}"


def _metric_cell(run: _Run, column: _Column, best: bool) -> str:
    value = run.metrics.get(column.key)
    if value is None:
        return "<td class='num na'>—</td>"
    highlight = " best" if best and column.key == "evidence_recall" else ""
    return f"<td class='num{highlight}'>{escape(column.fmt(float(value)))}</td>"


def _category_section(runs: Sequence[_Run], colors: Mapping[str, str]) -> str:
    """Evidence recall per question category for every run that reports categories."""
    runs = [run for run in runs if run.metrics.get("by_category")]
    categories = _categories(runs)
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


def _category_cell(run: _Run, category: str) -> str:
    value = run.metrics["by_category"].get(category, {}).get("evidence_recall")
    if value is None:
        return "<td class='num na'>—</td>"
    return f"<td class=num>{_percent(float(value))}</td>"


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


# --- files ----------------------------------------------------------------------------


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
