"""Where the Axes of a figure go: placed in inches on an Agg canvas, so
that the lanes' pixel width is known before anything is drawn.

Top to bottom: the title block, the verdict strip (``strip``), the lanes
of each Timeline, the memory panel (``memory``: only where the Timeline
has readings), queue depth and CPU lead. The list of Axes returned keeps
the order ``figure.py`` documents whatever is shown: lanes (one per
Timeline), queue depth, CPU lead, then the strips (one per Timeline, each
just above its lanes), then the memory panel.
"""

from __future__ import annotations

import math

from ..errors import CutimelineError

__all__ = ["FONT", "LANE_IN", "LANES_MAX_IN", "PANEL_IN", "MEMORY_IN", "LEGEND_IN", "MIN_MAIN_IN",
           "STRIP_IN", "TITLE_IN", "layout", "px_width", "style"]

FONT = 8.5
LANE_IN = 0.42        # inches per lane
PANEL_IN = 1.0        # inches per lower panel
MEMORY_IN = 0.9       # inches of the memory panel
LEGEND_IN = 2.35      # right margin that holds the legends
MIN_MAIN_IN = 2.6     # the lanes' legend must fit beside the lanes
STRIP_IN = 0.3        # inches of the verdict strip
TITLE_IN = 0.95       # inches above the strip: three lines of title
# the lanes of one Timeline take at most this many inches (lanes thin
# beyond ~240 of them: a merge of many ranks); with layout.py's lane
# budget per rank, a figure stays some 10,000 px tall at most at dpi 100
LANES_MAX_IN = 100.0


def layout(lane_labels: list[list[str]], width: float, dpi: float, panels: bool,
           top: float = 0.72, strip: bool = False, memory: bool = False):
    """A Figure on the Agg canvas with the lanes' Axes (one per Timeline)
    over the queue-depth and CPU-lead panels; with ``strip`` a verdict
    strip's Axes above each Timeline's lanes, with ``memory`` the memory
    panel's under them (each added after the others: see the module doc)."""
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    chars = max((len(s) for labels in lane_labels for s in labels), default=10)
    left = 0.3 + 0.062 * chars
    bottom, gap, title_gap = 0.5, 0.14, 0.32
    n = len(lane_labels)
    mains = [max(min(LANE_IN * len(labels), LANES_MAX_IN), MIN_MAIN_IN / n, 0.8)
             for labels in lane_labels]
    heights = mains + ([PANEL_IN, PANEL_IN] if panels else [])
    # a later Timeline's title, then its strip, sit between it and the one above
    above = title_gap + (STRIP_IN + 0.06 if strip else 0)
    gaps = [above if i else 0 for i in range(n)] + ([0.3, gap] if panels else [])
    if memory:   # under the lanes, over the panels
        heights.insert(n, MEMORY_IN)
        gaps.insert(n, 0.3)
        gaps[n + 1] = gap
    if strip:
        top = TITLE_IN + STRIP_IN + 0.06
    height = top + bottom + sum(heights) + sum(gaps)
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    w = width - left - LEGEND_IN
    if w < 1:
        raise CutimelineError(f"width={width!r} inches leaves no room for the "
                              f"lanes beside their labels; use a width of at "
                              f"least {math.ceil(left + LEGEND_IN + 1)}.")
    boxes, y = [], height - top
    for h, g in zip(heights, gaps):
        y -= g + h
        boxes.append((y, h))
    if strip:   # just above each Timeline's lanes, the first under the title
        boxes += [(y + h + 0.06, STRIP_IN) for y, h in boxes[:n]]
    if memory:   # added last, so that fig.axes keeps its documented order
        boxes.append(boxes.pop(n))
    axes = []
    for y, h in boxes:
        axes.append(fig.add_axes([left / width, y / height, w / width, h / height],
                                 sharex=axes[0] if axes else None))
    bottom_ax = axes[n + 1] if panels else axes[n - 1]
    for ax in axes:
        if ax is not bottom_ax:
            ax.tick_params(labelbottom=False)
        style(ax)
    return fig, axes


def px_width(ax) -> int:
    return max(int(round(ax.bbox.width)), 1)


def style(ax) -> None:
    ax.tick_params(labelsize=FONT)
    ax.set_axisbelow(True)
