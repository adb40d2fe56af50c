"""The lower panels under the lanes: queue depth and CPU lead per stream.

Both are measures from ``analyze`` (``Report.queue_depth``, ``Lanes.lead``)
reduced to the pixel columns they are drawn in (``pixels.py``).
"""

from __future__ import annotations

import numpy as np

from ..timeline.schema import NONE
from . import pixels as px
from .palette import STREAM_COLORS

__all__ = ["draw_queue", "draw_lead"]


def draw_queue(scene, ax, cols, *, prefix: str = "", ls: str = "-") -> list:
    """Queue depth of each stream (the largest in each pixel column)."""
    ln, handles = scene.lanes, []
    if ln is None:
        return handles
    edges = cols.ms(np.arange(cols.width + 1))
    for j, k in enumerate(scene.stream_order):
        device, stream = scene.keys[k]
        t, d = scene.report.queue_depth(int(device), int(stream))
        v = px.step_max(t, d, cols)
        # a steps-post line, not ax.stairs: a Patch of ``width`` steps
        # costs a slow bounding-box update
        h, = ax.plot(edges, np.append(v, v[-1]), drawstyle="steps-post",
                     color=STREAM_COLORS[j % len(STREAM_COLORS)], lw=1.0,
                     ls=ls, label=prefix + scene.stream_label(k))
        handles.append(h)
    return handles


def draw_lead(scene, ax, cols, *, ls: str = "-") -> None:
    """CPU lead (GPU begin − launch, ms) of each stream's work at its GPU
    begin: per pixel column a bar over the range and a dot at its top (no
    lines join columns: a line would invent values between sparse points)."""
    ln = scene.lanes
    if ln is None:
        return
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.collections import LineCollection
    grp = ln.streams
    for j, k in enumerate(scene.stream_order):
        rows = grp.order[grp.starts[k]:grp.starts[k + 1]]
        rows = rows[ln.lead[rows] != NONE]
        c, lo, hi = px.envelope(ln.begin[rows], ln.lead[rows], cols)
        if len(c) == 0:
            continue
        x = cols.ms(c + 0.5)
        color = STREAM_COLORS[j % len(STREAM_COLORS)]
        bar = np.stack([np.stack([x, lo / 1e6], 1), np.stack([x, hi / 1e6], 1)], 1)
        ax.add_collection(LineCollection(bar, colors=color, linewidths=1.0,
                                         linestyles=ls))
        ax.scatter(x, hi / 1e6, s=4, color=color, lw=0,
                   marker="o" if ls == "-" else "^")
    ax.autoscale_view()
