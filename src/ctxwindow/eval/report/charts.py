"""The report's charts: PNG files drawn with matplotlib, byte-identical for identical results.

``write_charts(results, out_dir)`` draws every chart in ``CHARTS`` that has
something to show; ``CAPTIONS`` says what each one shows, under it in the
page. Matplotlib (``pip install 'ctxwindow[eval]'``) is imported only when a
chart is drawn.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwindow.eval.report.formats import budget_label, tokens_label
from ctxwindow.eval.report.runs import (
    Run,
    by_strategy,
    category_counts,
    read_runs,
    strategy_colors,
    subject,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'ctxwindow[eval]'"
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


def write_charts(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the charts of ``results`` as PNG files in ``out_dir``; return their paths.

    ``recall_vs_budget.png`` and ``recall_vs_tokens.png`` always (when there is
    something to draw), ``recall_by_category.png`` when runs break recall down by
    question category. Identical results give byte-identical files.

    Raises ImportError with an install hint when matplotlib is missing.
    """
    style = _chart_style()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = read_runs(results)
    colors = strategy_colors(results)
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
    axes.set_title(_plain(subject(results)), wrap=True)
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
    axes.set_xticks(list(ticks), labels=[budget_label(tick) for tick in ticks])
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
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall per budget: a line per budgeted strategy, dashed for unbounded."""
    budgets = sorted({run.budget for run in runs if run.budget is not None})
    if not budgets:
        return None
    figure, axes = _new_axes(results, "Evidence recall vs context budget")
    handles, labels = [], []
    for i, (strategy, group) in enumerate(by_strategy(runs).items()):
        color = colors[strategy]
        for run in (run for run in group if run.budget is None):
            handles.append(axes.axhline(run.recall, color=color, linewidth=2, linestyle="--"))
            labels.append(f"{strategy} (unbounded, {tokens_label(run.tokens)} tokens)")
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
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall against tokens paid: points per budget, a star per unbounded run."""
    if not runs:
        return None
    figure, axes = _new_axes(results, "Evidence recall vs prompt tokens paid")
    handles, labels = [], []
    for i, (strategy, group) in enumerate(by_strategy(runs).items()):
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
    axes: Axes, group: Sequence[Run], color: str, marker: str
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


def _label_budgets(axes: Axes, runs: Sequence[Run], colors: Mapping[str, str]) -> None:
    """Label each budgeted point; at each budget the top label goes above, the bottom below."""
    by_budget: dict[int, list[Run]] = {}
    for run in runs:
        if run.budget is not None:
            by_budget.setdefault(run.budget, []).append(run)
    for budget, group in by_budget.items():
        ranked = sorted(group, key=lambda run: -run.recall)
        for rank, run in enumerate(ranked):
            place = _ABOVE if rank == 0 else _BELOW if rank == len(ranked) - 1 else _RIGHT
            xy = (run.tokens, run.recall)
            _annotate(axes, budget_label(budget), xy, place, colors[run.strategy])


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


def _category_runs(runs: Sequence[Run]) -> list[Run]:
    """Each strategy's largest budget, plus unbounded runs, where categories exist."""
    chosen = []
    for group in by_strategy(runs).values():
        budgeted = [run for run in group if run.budget is not None]
        chosen += budgeted[-1:] + [run for run in group if run.budget is None]
    return [run for run in chosen if run.metrics.get("by_category")]


def _run_label(run: Run) -> str:
    if run.budget is None:
        return f"{run.strategy} (unbounded)"
    return f"{run.strategy} @ {budget_label(run.budget)}"


def _recall_by_category(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Grouped bars: evidence recall per category, one bar per chosen run."""
    chosen = _category_runs(runs)
    categories = category_counts(chosen)
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


def _cost_per_turn(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """With ``--replay``: the mean input cost of turn i, a line per strategy and budget
    (a line style per budget), so steps and their cache misses show as spikes."""
    series = [
        (strategy, budget, metrics["replay"]["usd_by_turn"])
        for strategy, per_budget in results.get("results", {}).items()
        for budget, metrics in per_budget.items()
        if isinstance(metrics.get("replay"), Mapping) and metrics["replay"].get("usd_by_turn")
    ]
    if not series:
        return None
    figure, axes = _new_axes(results, "Input cost of each turn, with the prompt cache")
    styles = ("-", "--", ":", "-.")
    budgets = sorted({budget for _, budget, _ in series}, key=lambda b: (len(b), b))
    handles, labels = [], []
    for strategy, budget, costs in series:
        style = styles[budgets.index(budget) % len(styles)]
        cents = [usd * 100 for usd in costs]
        (line,) = axes.plot(
            range(1, len(cents) + 1), cents, color=colors.get(strategy, "#444444"),
            linestyle=style, linewidth=1.5,
        )  # fmt: skip
        handles.append(line)
        labels.append(f"{strategy} @ {budget}")
    axes.set_xlabel("user turn of the conversation")
    axes.set_ylabel("input cost of the turn (US cents, mean over conversations)")
    axes.set_ylim(bottom=0)
    _legend(figure, handles, labels)
    return figure


def _category_label(name: str, n: int | None) -> str:
    return name if n is None else f"{name}\n(n={n})"


CHARTS: dict[
    str, Callable[[Mapping[str, Any], Sequence[Run], Mapping[str, str]], Figure | None]
] = {
    "recall_vs_budget.png": _recall_vs_budget,
    "recall_vs_tokens.png": _recall_vs_tokens,
    "recall_by_category.png": _recall_by_category,
    "cost_per_turn.png": _cost_per_turn,
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
    "cost_per_turn.png": (
        "With --replay: the input cost of each user turn (mean over the conversations that "
        "have it), priced with the provider's prompt cache. A sliding window pays full "
        "price every turn; a window that evicts in steps pays it only at a step."
    ),
    "recall_by_category.png": (
        "Evidence recall per question category at each strategy's largest budget "
        "(hatched: unbounded strategies); bar labels are percent."
    ),
}
