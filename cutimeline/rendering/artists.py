"""Matplotlib collections built from whole numpy columns: no artist per row.

Boxes (work, idle shading, strip cells) and stacked per-pixel-column
bands (the overview) each become one ``PolyCollection``. They are drawn
without antialiasing: they already sit on pixel columns, and crisp edges
keep colours exact (the tests read them back from the pixels).
"""

from __future__ import annotations

import numpy as np

__all__ = ["HALF", "GAP_HALF", "boxes", "band"]

HALF = 0.38        # half-height of work boxes, in lanes
GAP_HALF = 0.46    # half-height of idle shading (and of the overview's bands)


def boxes(ax, x0, x1, y0, y1, colors, zorder) -> None:
    """Axis-aligned boxes [x0, x1] × [y0, y1] in data units, one colour each."""
    if len(x0) == 0:
        return
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.collections import PolyCollection
    y0 = np.broadcast_to(y0, np.shape(x0))
    y1 = np.broadcast_to(y1, np.shape(x0))
    verts = np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1),
                      np.stack([x1, y1], 1), np.stack([x1, y0], 1)], 1)
    ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none",
                                     linewidths=0, antialiaseds=False, zorder=zorder))


def band(edges: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The outline of the area between two step functions, as one polygon:
    column c spans x ∈ [edges[c], edges[c+1]] and y ∈ [lo[c], hi[c]]. Along
    ``hi`` left to right, then back along ``lo``; a column where lo == hi
    adds no area."""
    x = np.repeat(edges, 2)[1:-1]          # e0 e1 e1 e2 e2 ... e_w
    top = np.stack([x, np.repeat(hi, 2)], 1)
    bottom = np.stack([x[::-1], np.repeat(lo, 2)[::-1]], 1)
    return np.concatenate([top, bottom])
