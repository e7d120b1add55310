"""What every chart shares: the style (fonts with CJK fallbacks), titled figures, axes, legends.

Matplotlib is imported only inside these functions, when a chart is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxwindow.eval.report.formats import budget_labels
from ctxwindow.eval.report.runs import subject
from ctxwindow.extras import install_hint

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL_HINT = install_hint("eval")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">")
# Fonts tried, in order, for characters DejaVu Sans lacks (CJK first): those installed are used.
FALLBACK_FONTS = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "PingFang SC",
    "Hiragino Sans",
    "Microsoft YaHei",
    "Yu Gothic",
    "Malgun Gothic",
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
    "svg.fonttype": "none",  # real <text> in the SVG: the browser draws it with its fonts
}


def chart_style() -> dict[str, Any]:
    """The fixed chart style, with fallback fonts for CJK names where installed."""
    try:
        from matplotlib import font_manager
    except ImportError as exc:
        raise ImportError(f"charts need matplotlib: {INSTALL_HINT}") from exc
    installed = {font.name for font in font_manager.fontManager.ttflist}
    fonts = ["DejaVu Sans", *(name for name in FALLBACK_FONTS if name in installed)]
    return {**CHART_STYLE, "font.family": fonts}


def style_context(style: Mapping[str, Any]) -> Any:
    """Matplotlib defaults plus ``style``, whatever the user's matplotlibrc says."""
    import matplotlib.style

    return matplotlib.style.context(["default", dict(style)])


def new_figure(title: str, **options: Any) -> Figure:
    """A figure titled ``title`` over what was evaluated, laid out so no text collides."""
    from matplotlib.figure import Figure

    figure = Figure(layout="constrained", **options)
    figure.suptitle(plain(title))
    return figure


def new_axes(results: Mapping[str, Any], title: str) -> tuple[Figure, Axes]:
    figure = new_figure(title)
    axes = figure.subplots()
    axes.set_title(plain(subject(results)), wrap=True)
    return figure, axes


def plain(text: str) -> str:
    """Chart text with ``$`` escaped so matplotlib never reads user names as math."""
    return text.replace("$", r"\$")


def percent_axis(axes: Axes, label: str) -> None:
    from matplotlib.ticker import PercentFormatter

    axes.set_ylim(0, 1.05)
    axes.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    axes.set_ylabel(label)


def tokens_axis(axes: Axes, ticks: Sequence[int], label: str) -> None:
    """A log2 token axis ticked at ``ticks`` with short labels (1k, 2k, 4k)."""
    from matplotlib.ticker import NullLocator

    axes.set_xscale("log", base=2)
    labels = budget_labels(ticks)
    axes.set_xticks(list(ticks), labels=[labels[tick] for tick in ticks])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xlabel(label)


def legend(figure: Figure, handles: list[Any], labels: list[str]) -> None:
    """A legend below the axes, never over the data; labels are taken verbatim."""
    figure.legend(
        handles,
        [plain(label) for label in labels],
        loc="outside lower center",
        ncols=legend_columns(labels),
    )


def legend_columns(labels: Sequence[str]) -> int:
    """One row when the labels fit the figure width, else as many columns as fit."""
    # At 10 pt and 130 dpi a character is at most ~10 px (CJK ~18); a handle and gap ~60 px.
    widths = [sum(18 if ord(c) > 0x2E80 else 10 for c in label) + 60 for label in labels]
    if sum(widths) <= 900:
        return len(labels)
    return max(1, 900 // max(widths))
