"""The report's charts: each drawn once with matplotlib, saved as a PNG file and as SVG.

``draw_charts(results, out_dir)`` draws every chart in ``CHARTS`` that has
something to show, writes its PNG to ``out_dir`` (byte-identical for identical
results) and returns ``Chart``s holding the PNG and the SVG the page inlines,
whose text the browser draws. ``CAPTIONS`` says what each one shows, under it
in the page. Matplotlib (the ``eval`` extra) is imported only
when a chart is drawn.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwindow.eval.report.category_chart import recall_by_category
from ctxwindow.eval.report.figures import (
    MARKERS,
    chart_style,
    legend,
    new_axes,
    percent_axis,
    plain,
    style_context,
    tokens_axis,
)
from ctxwindow.eval.report.formats import budget_labels, tokens_label
from ctxwindow.eval.report.glyphs import MissingFontWarning, advice, missing_scripts
from ctxwindow.eval.report.labels import AROUND, Place, place_labels, thin_x_ticks
from ctxwindow.eval.report.runs import Run, by_strategy, read_runs, strategy_colors
from ctxwindow.eval.report.svg import inline_svg

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Chart:
    """One chart: its PNG file's name and bytes, the SVG for the page, and the scripts
    the PNG draws as boxes for want of a font."""

    name: str
    png: bytes
    svg: str = ""
    missing_scripts: tuple[str, ...] = ()

    @property
    def caption(self) -> str:
        return CAPTIONS.get(self.name, Path(self.name).stem.replace("_", " "))


def draw_charts(results: dict[str, Any], out_dir: Path) -> list[Chart]:
    """Draw the charts of ``results``, write their PNG files to ``out_dir``, return them.

    ``recall_vs_budget.png`` and ``recall_vs_tokens.png`` always (when there is
    something to draw), ``recall_by_category.png`` when runs break recall down by
    question category, ``cost_per_turn.png`` with ``--replay``. When no installed
    font covers a script of the charts' text (CJK names without a CJK font), a
    ``MissingFontWarning`` says which and how to fix it.

    Raises ImportError with an install hint when matplotlib is missing.
    """
    style = chart_style()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = read_runs(results)
    colors = strategy_colors(results)
    drawn = (
        _drawn(out_dir / name, partial(draw, results, runs, colors), style)
        for name, draw in CHARTS.items()
    )
    charts = [chart for chart in drawn if chart is not None]
    missing = sorted({script for chart in charts for script in chart.missing_scripts})
    if missing:
        warnings.warn(advice(missing), MissingFontWarning, stacklevel=2)
    return charts


def write_charts(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the charts of ``results`` as PNG files in ``out_dir``; return their paths."""
    return [out_dir / chart.name for chart in draw_charts(results, out_dir)]


def _drawn(path: Path, draw: Callable[[], Figure | None], style: Mapping[str, Any]) -> Chart | None:
    """Draw and save one chart, reading matplotlib's warnings of missing glyphs."""
    with style_context(style), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = draw()
        chart = None if figure is None else _saved(figure, path)
    return None if chart is None else replace(chart, missing_scripts=missing_scripts(caught))


def _saved(figure: Figure, path: Path) -> Chart:
    import matplotlib

    figure.savefig(path, format="png", metadata={"Software": None})
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": path.stem}):  # ids stable, and not shared
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    caption = CAPTIONS.get(path.name, path.stem)
    return Chart(path.name, path.read_bytes(), inline_svg(buffer.getvalue(), path.stem, caption))


def _recall_vs_budget(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall per budget: a line per budgeted strategy, dashed for unbounded."""
    budgets = sorted({run.budget for run in runs if run.budget is not None})
    if not budgets:
        return None
    figure, axes = new_axes(results, "Evidence recall vs context budget")
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
    tokens_axis(axes, budgets, "context budget (tokens, log scale)")
    axes.set_xlim(budgets[0] / 1.4, budgets[-1] * 1.4)
    percent_axis(axes, "evidence recall (% of questions)")
    legend(figure, handles, labels)
    thin_x_ticks(figure, axes)
    return figure


def _recall_vs_tokens(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Evidence recall against tokens paid: points per budget, a star per unbounded run."""
    if not runs:
        return None
    figure, axes = new_axes(results, "Evidence recall vs prompt tokens paid")
    handles, labels = [], []
    for i, (strategy, group) in enumerate(by_strategy(runs).items()):
        marker = MARKERS[i % len(MARKERS)]
        for handle, label in _plot_tokens(axes, group, colors[strategy], marker):
            handles.append(handle)
            labels.append(label)
    budget_labels = _label_budgets(axes, runs, colors)
    tokens = [max(run.tokens, 1.0) for run in runs]
    low, high = min(tokens) / 1.3, max(tokens) * 1.3
    tokens_axis(axes, _powers_of_two(low, high), "mean prompt tokens per question (log scale)")
    axes.set_xlim(low, high)
    percent_axis(axes, "evidence recall (% of questions)")
    legend(figure, handles, labels)
    thin_x_ticks(figure, axes)
    place_labels(figure, axes, budget_labels, _markers(runs))
    return figure


def _markers(runs: Sequence[Run]) -> list[tuple[float, float, float]]:
    """Where the tokens chart's points are, and their radius in points (stars are larger)."""
    return [(run.tokens, run.recall, 3.5 if run.budget is not None else 7.5) for run in runs]


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


def _label_budgets(
    axes: Axes, runs: Sequence[Run], colors: Mapping[str, str]
) -> list[tuple[Any, Sequence[Place]]]:
    """A budget label by each budgeted point, with the places it may go, best first.

    Recall rises with tokens, so up-left of a point is above its curve and
    down-right below it: at each budget the top point's label prefers above,
    the bottom one's below, the others the right.
    """
    by_budget: dict[int, list[Run]] = {}
    for run in runs:
        if run.budget is not None:
            by_budget.setdefault(run.budget, []).append(run)
    labels: list[tuple[Any, Sequence[Place]]] = []
    names = budget_labels(by_budget)
    for budget, group in by_budget.items():
        ranked = sorted(group, key=lambda run: -run.recall)
        for rank, run in enumerate(ranked):
            first = 0 if rank == 0 else 1 if rank == len(ranked) - 1 else 2
            places = (AROUND[first], *(p for i, p in enumerate(AROUND) if i != first))
            xy = (run.tokens, run.recall)
            labels.append((_annotate(axes, names[budget], xy, colors[run.strategy]), places))
    return labels


def _annotate(axes: Axes, text: str, xy: tuple[float, float], color: str) -> Any:
    """A small label by a point, on a white backing so crossing lines stay legible."""
    backing = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"}
    return axes.annotate(
        plain(text), xy, xytext=(0, 0), textcoords="offset points",
        fontsize=8, color=color, bbox=backing, zorder=2.5, annotation_clip=False,
    )  # fmt: skip


def _powers_of_two(low: float, high: float) -> list[int]:
    """Powers of two inside [low, high], thinned to at most eight ticks."""
    first, last = math.ceil(math.log2(low)), math.floor(math.log2(high))
    ticks = [2**power for power in range(first, last + 1)]
    step = max(1, math.ceil(len(ticks) / 8))
    return ticks[::step] or [2 ** round(math.log2(high))]


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
    figure, axes = new_axes(results, "Input cost of each turn, with the prompt cache")
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
    legend(figure, handles, labels)
    return figure


CHARTS: dict[
    str, Callable[[Mapping[str, Any], Sequence[Run], Mapping[str, str]], Figure | None]
] = {
    "recall_vs_budget.png": _recall_vs_budget,
    "recall_vs_tokens.png": _recall_vs_tokens,
    "recall_by_category.png": recall_by_category,
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
        "Evidence recall (percent) per question category, for every strategy (rows) at "
        "every budget (columns; ∞: no budget). Darker is more; grey: not measured."
    ),
}
