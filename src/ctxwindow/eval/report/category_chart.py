"""The category chart: a heat map of evidence recall per category, strategy and budget.

One small panel per question category (at most three to a row, so many
categories stay readable), each a grid of strategies (rows) by budgets (columns, the
unbounded ones last as ∞) with the recall printed in every cell.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxwindow.eval.report.figures import new_figure, plain
from ctxwindow.eval.report.formats import budget_labels
from ctxwindow.eval.report.labels import MARGIN, laid_out, x_ticks_collide
from ctxwindow.eval.report.runs import UNBOUNDED, Run, budget_order, category_counts, subject

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PANELS_PER_ROW = 3
COLORMAP = "YlGnBu"
DARK = 0.55  # cells above this recall are dark enough for white figures
CELL_FONT_SIZES = (8, 7, 6)  # tried in turn until every cell's figure fits its cell


def recall_by_category(
    results: Mapping[str, Any], runs: Sequence[Run], colors: Mapping[str, str]
) -> Figure | None:
    """Heat maps of evidence recall per category; None when no run has categories."""
    runs = [run for run in runs if run.metrics.get("by_category")]
    categories = category_counts(runs)
    if not categories:
        return None
    strategies = list(dict.fromkeys(run.strategy for run in runs))
    budgets = sorted({run.budget_key for run in runs}, key=budget_order)
    rows = math.ceil(len(categories) / PANELS_PER_ROW)
    columns = math.ceil(len(categories) / rows)  # 4 categories: 2 × 2, not 3 + 1
    height = 1.4 + rows * (0.26 * len(strategies) + 0.9)
    figure = new_figure(_title(results), figsize=(8.0, max(height, 3.5)))
    panels = list(figure.subplots(rows, columns, squeeze=False).flat)
    recall = {(run.strategy, run.budget_key): run.metrics["by_category"] for run in runs}
    cells = []
    for i, (category, n) in enumerate(categories.items()):
        values = [[_recall(recall, s, b, category) for b in budgets] for s in strategies]
        cells += _panel(panels[i], values, _panel_title(category, n, columns))
        _panel_ticks(panels[i], strategies, budgets, first_column=i % columns == 0)
    for axes in panels[len(categories) :]:
        axes.set_visible(False)
    figure.supxlabel("context budget (tokens; ∞: no budget)", fontsize=10)
    _fit_budget_labels(figure, panels)
    _fit_cell_text(figure, cells)
    return figure


def _title(results: Mapping[str, Any]) -> str:
    about = subject(results)
    title = "Evidence recall by question category, at every budget"
    return f"{title}\n{about}" if about else title


def _recall(
    recall: Mapping[tuple[str, str], Mapping[str, Any]], strategy: str, budget: str, category: str
) -> float:
    value = recall.get((strategy, budget), {}).get(category, {}).get("evidence_recall")
    return math.nan if value is None else float(value)


def _panel(axes: Axes, values: list[list[float]], title: str) -> list[tuple[Any, int, int]]:
    """One category's grid; returns its cell texts with their row and column."""
    axes.imshow(values, cmap=COLORMAP, vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_facecolor("#eaeef2")  # unmeasured cells (NaN) show the background
    axes.set_title(plain(title), fontsize=10, color="#1f2328")
    axes.grid(False)
    _cell_borders(axes, len(values[0]), len(values))
    axes.tick_params(which="both", length=0, labelsize=8)
    for spine in axes.spines.values():
        spine.set_visible(False)
    cells = []
    for row, line in enumerate(values):
        for column, value in enumerate(line):
            if math.isnan(value):
                continue
            color = "white" if value > DARK else "#1f2328"
            text = axes.text(column, row, f"{value * 100:.0f}", ha="center", va="center",
                             color=color, fontsize=CELL_FONT_SIZES[0])  # fmt: skip
            cells.append((text, row, column))
    return cells


def _panel_ticks(
    axes: Axes, strategies: Sequence[str], budgets: Sequence[str], *, first_column: bool
) -> None:
    """Strategies down the side of the first panel of a row, budgets under every panel."""
    axes.set_yticks(range(len(strategies)), labels=[plain(s) for s in strategies])
    if not first_column:
        axes.tick_params(labelleft=False)
    axes.set_xticks(range(len(budgets)), labels=_budget_texts(budgets))


def _cell_borders(axes: Axes, columns: int, rows: int) -> None:
    """White lines between the cells, so each reads as its own."""
    axes.set_xticks([c - 0.5 for c in range(1, columns)], minor=True)
    axes.set_yticks([r - 0.5 for r in range(1, rows)], minor=True)
    axes.grid(which="minor", color="white", linewidth=2)


def _panel_title(category: str, n: int | None, columns: int) -> str:
    """The category and its question count, wrapped to the panel's width."""
    title = category if n is None else f"{category} (n={n})"
    width = 60 // columns  # characters of 10 pt text across a panel
    if any(ord(char) > 0x2E80 for char in title):
        width //= 2  # CJK characters are twice as wide
    return "\n".join(textwrap.wrap(title, width, break_long_words=True)) or title


def _budget_texts(keys: Sequence[str]) -> list[str]:
    labels = budget_labels(int(key) for key in keys if key != UNBOUNDED)
    return ["∞" if key == UNBOUNDED else labels[int(key)] for key in keys]


def _fit_budget_labels(figure: Figure, panels: Sequence[Axes]) -> None:
    """Smaller, then slanted, budget labels when they would touch (many budgets, or
    budgets written in full: 1,000 beside 1,024)."""
    if not x_ticks_collide(figure, panels[0]):
        return
    for axes in panels:
        axes.tick_params(axis="x", labelsize=6.5)
    if not x_ticks_collide(figure, panels[0]):
        return
    for axes in panels:
        for label in axes.get_xticklabels():  # 45°, not 90°: ∞ on its side reads as 8
            label.set(rotation=45, horizontalalignment="right", rotation_mode="anchor")


def _fit_cell_text(figure: Figure, cells: Sequence[tuple[Any, int, int]]) -> None:
    """Shrink the cells' figures until each fits its cell; hide them if none fits."""
    for size in CELL_FONT_SIZES:
        for text, _, _ in cells:
            text.set_fontsize(size)
        if _all_fit(figure, cells):
            return
    for text, _, _ in cells:
        text.set_visible(False)


def _all_fit(figure: Figure, cells: Sequence[tuple[Any, int, int]]) -> bool:
    renderer = laid_out(figure)
    for text, row, column in cells:
        axes = text.axes
        left, bottom = axes.transData.transform((column - 0.5, row + 0.5))
        right, top = axes.transData.transform((column + 0.5, row - 0.5))
        box = text.get_window_extent(renderer).padded(MARGIN / 2)
        if box.x0 < left or box.x1 > right or box.y0 < bottom or box.y1 > top:
            return False
    return True
