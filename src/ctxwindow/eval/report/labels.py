"""Chart text that never collides: point labels placed where they fit, crowded ticks
thinned, and the check the tests run on every chart.

Everything works on the laid-out figure, in display units, with the extents
matplotlib's renderer gives each text. The browser draws the SVG's text with
the same fonts where it has them; ``MARGIN`` covers small differences.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation, Text
    from matplotlib.transforms import Bbox

MARGIN = 3.0  # display units (pixels) kept free around a placed label or tick label
# Where a label may go around its point: offset in points, horizontal and vertical alignment.
Place = tuple[
    tuple[float, float],
    Literal["left", "center", "right"],
    Literal["bottom", "baseline", "center", "center_baseline", "top"],
]
ABOVE_LEFT: Place = ((-6, 6), "right", "bottom")
ABOVE_RIGHT: Place = ((6, 6), "left", "bottom")
BELOW_LEFT: Place = ((-6, -6), "right", "top")
BELOW_RIGHT: Place = ((6, -6), "left", "top")
RIGHT: Place = ((8, 0), "left", "center_baseline")
LEFT: Place = ((-8, 0), "right", "center_baseline")
ABOVE: Place = ((0, 8), "center", "bottom")
BELOW: Place = ((0, -8), "center", "top")
AROUND = (ABOVE_LEFT, BELOW_RIGHT, RIGHT, LEFT, ABOVE, BELOW, ABOVE_RIGHT, BELOW_LEFT)


def laid_out(figure: Figure) -> Any:
    """Run the figure's layout; return the renderer its text extents are measured with."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas: Any = FigureCanvasAgg(figure)
    figure.draw_without_rendering()
    return canvas.get_renderer()


def place_labels(
    figure: Figure,
    axes: Axes,
    labels: Sequence[tuple[Annotation, Sequence[Place]]],
    markers: Sequence[tuple[float, float, float]] = (),
) -> None:
    """Put each label at the first of its places inside ``axes`` clear of the ``markers``
    (data x, y and radius in points) and of the labels placed before it; a label with no
    such place is hidden rather than drawn over another text or a point."""
    renderer = laid_out(figure)
    room = axes.get_window_extent(renderer)
    taken = [_marker_box(axes, marker, figure.dpi) for marker in markers]
    for label, places in labels:
        label.set_in_layout(False)  # placing it must not move the axes it is placed in
        box = _first_fit(label, places, renderer, room, taken)
        if box is None:
            label.set_visible(False)
        else:
            taken.append(box)


def _marker_box(axes: Axes, marker: tuple[float, float, float], dpi: float) -> Bbox:
    from matplotlib.transforms import Bbox

    x, y = axes.transData.transform(marker[:2])
    radius = marker[2] * dpi / 72
    return Bbox.from_extents(x - radius, y - radius, x + radius, y + radius)


def _first_fit(
    label: Annotation, places: Sequence[Place], renderer: Any, room: Bbox, taken: list[Bbox]
) -> Bbox | None:
    for offset, horizontal, vertical in places:
        label.xyann = offset
        label.set_horizontalalignment(horizontal)
        label.set_verticalalignment(vertical)
        box = label.get_window_extent(renderer).padded(MARGIN)
        if _inside(box, room) and not any(box.overlaps(other) for other in taken):
            return box
    return None


def _inside(box: Bbox, room: Bbox) -> bool:
    return bool(room.x0 <= box.x0 and box.x1 <= room.x1 and room.y0 <= box.y0 <= box.y1 <= room.y1)


def thin_x_ticks(figure: Figure, axes: Axes) -> None:
    """Drop x ticks whose labels would touch the previous one kept (1,000 next to 1,024)."""
    renderer = laid_out(figure)
    kept: list[tuple[float, str, Bbox]] = []
    for location, label in zip(axes.get_xticks(), axes.get_xticklabels(), strict=True):
        box = label.get_window_extent(renderer).padded(MARGIN)
        if not kept or not box.overlaps(kept[-1][2]):
            kept.append((location, label.get_text(), box))
    if len(kept) < len(axes.get_xticks()):
        axes.set_xticks([k[0] for k in kept], labels=[k[1] for k in kept])


def x_ticks_collide(figure: Figure, axes: Axes) -> bool:
    """Whether two neighbouring x tick labels of ``axes`` would touch."""
    renderer = laid_out(figure)
    labels = [label for label in axes.get_xticklabels() if label.get_text()]
    boxes = [label.get_window_extent(renderer).padded(MARGIN / 2) for label in labels]
    return any(a.overlaps(b) for a, b in pairwise(boxes))


def drawn_texts(figure: Figure) -> list[Text]:
    """Every text the figure draws (a tick label out of view is not drawn), in draw order."""
    renderer = laid_out(figure)
    drawn: dict[int, Text] = {}
    draw_text = renderer.draw_text

    def record(
        gc: Any, x: float, y: float, s: str, prop: Any, angle: float,
        ismath: Any = False, mtext: Text | None = None,
    ) -> Any:  # fmt: skip
        if mtext is not None and s.strip():
            drawn.setdefault(id(mtext), mtext)
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = record
    try:
        figure.draw(renderer)
    finally:
        del renderer.draw_text
    return list(drawn.values())


def overlapping_texts(figure: Figure, tolerance: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose extents overlap by more than ``tolerance`` display units."""
    renderer = laid_out(figure)
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in drawn_texts(figure)]
    return [
        (first, second)
        for i, (first, a) in enumerate(boxes)
        for second, b in boxes[i + 1 :]
        if min(a.x1, b.x1) - max(a.x0, b.x0) > tolerance
        and min(a.y1, b.y1) - max(a.y0, b.y0) > tolerance
    ]
