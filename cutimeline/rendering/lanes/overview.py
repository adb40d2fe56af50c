"""The overview of a dense window: GPU lanes as per-pixel-column bands.

When a window holds more GPU rows than ``ROWS_PER_PX`` per pixel column
of the lanes, boxes of work merged at pixel resolution turn every lane
into one solid bar (a kernel of 2 µs widened to a whole column looks as
busy as 1 ms of work) and the idle shading between them vanishes. Such a
window is drawn as an overview instead: in each pixel column of a stream's
lane, from the bottom, a band as tall as the share of the column the
stream was busy (split by phase: forward, backward, ...), then a band per
idle cause as tall as that cause's share of the column (the causes
``Report.idle_amounts`` gives each gap's part in that column, as
the detailed figure shades them, side streams shaded for dependency only:
``scene.py``); the rest of the column, idle beside a busy stream of the
device or outside any gap, stays blank. The numbers are the report's
intervals and cause amounts binned into columns (``pixels.coverage``), not
new measures. Host lanes and spans keep their merged boxes, steps keep
their strip cells, and launch lines are thinned to one per few columns.
"""

from __future__ import annotations

import numpy as np

from ...analysis import CAUSES
from .. import pixels as px
from ..artists import GAP_HALF, band
from ..palette import CAUSE_COLORS, PHASE_COLORS, PHASES

__all__ = ["ROWS_PER_PX", "draw_overview", "column_shares"]

ROWS_PER_PX = 4  # above this many GPU rows per pixel column: the overview


def column_shares(scene, cols: px.Columns) -> tuple[np.ndarray, np.ndarray]:
    """(busy, idle): per stream lane (``scene.slot_y``), the share of each
    pixel column busy by phase, (lanes, phases, width), and idle by cause,
    (lanes, causes, width); side streams' causes but dependency are 0, and
    a lane of folded streams shows their busy share only."""
    ln, w = scene.lanes, cols.width
    n, p = len(scene.slot_y), len(PHASES)
    busy = px.coverage(scene.stream_slot[ln.streams.of_row] * p + scene.gpu_phase, ln.begin,
                       ln.end, n * p, cols).reshape(n, p, w)
    grp = ln.streams
    sel = np.flatnonzero((grp.ge > scene.w0) & (grp.gb < scene.w1) & ~scene.folded[grp.gg])
    b = np.maximum(grp.gb[sel], scene.w0)
    e = np.minimum(grp.ge[sel], scene.w1)
    c0 = np.clip(cols.floor(b), 0, w - 1)
    c1 = np.clip(cols.floor(e - 1), 0, w - 1)
    cnt = c1 - c0 + 1  # one piece of the gap per column it touches
    r = np.repeat(sel, cnt)
    col = np.repeat(c0 - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
    amounts, _ = scene.report.idle_amounts(r, cols.time(col), cols.time(col + 1))
    amounts = scene.unblamed(amounts, grp.gg[r])
    k = len(CAUSES)
    flat = (scene.stream_slot[grp.gg[r]][:, None] * k + np.arange(k)) * w + col[:, None]
    idle = np.bincount(flat.ravel(), weights=amounts.ravel().astype(np.float64),
                       minlength=n * k * w).reshape(n, k, w)
    width_ns = (cols.time(np.arange(1, w + 1)) - cols.time(np.arange(w))).astype(np.float64)
    return busy / width_ns, idle / width_ns


def draw_overview(scene, ax, cols: px.Columns, used: dict) -> None:
    """The GPU lanes of ``scene`` as stacked bands (see the module doc)."""
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.collections import PolyCollection

    busy, idle = column_shares(scene, cols)
    layers = np.concatenate([busy, idle], axis=1)  # (streams, layers, width)
    colors = list(PHASE_COLORS) + [CAUSE_COLORS[c] for c in CAUSES]
    top = np.minimum(np.cumsum(layers, axis=1), 1.0)  # rounding never overfills
    bottom = np.concatenate([np.zeros_like(top[:, :1]), top[:, :-1]], axis=1)
    edges = cols.ms(np.arange(cols.width + 1))
    polys, fills = [], []
    for k in range(len(scene.slot_y)):
        base = scene.slot_y[k] + GAP_HALF  # the lane's bottom (y grows down)
        for j in range(layers.shape[1]):
            if not (top[k, j] > bottom[k, j]).any():
                continue
            polys.append(band(edges, base - 2 * GAP_HALF * bottom[k, j],
                              base - 2 * GAP_HALF * top[k, j]))
            fills.append(colors[j])
            if j < len(PHASES):
                used["phases"].add(PHASES[j])
            else:
                used["causes"].add(CAUSES[j - len(PHASES)])
    if polys:
        ax.add_collection(PolyCollection(polys, facecolors=fills, edgecolors="none",
                                         linewidths=0, antialiaseds=False, zorder=2))
