"""The memory panel: device bytes in use over time, one line per device.

Drawn from the ``memory`` table as it is (``in_use`` after each reading
at ``host_ns``, held until the device's next reading; nothing before its
first), reduced to pixel columns as queue depth is: the largest value in
each column (``pixels.step_max``), so a spike narrower than a pixel
still shows and 10^6 readings draw as ``width`` steps per device. Each
device's peak in the window is marked ("peak 3.2 GiB"); the y axis is in
GiB, or MiB when every peak is under 1 GiB. Nothing here measures.
"""

from __future__ import annotations

import numpy as np

from ..text import fmt_bytes
from ..timeline.timeline import Timeline
from . import pixels as px
from .palette import STREAM_COLORS

__all__ = ["MEMORY_LABEL", "has_memory", "draw_memory"]

MEMORY_LABEL = "GPU memory"
FONT = 8.5
GIB, MIB = 2**30, 2**20


def has_memory(tl: Timeline) -> bool:
    """Whether ``tl`` holds memory readings to draw."""
    return len(tl.memory) > 0


def draw_memory(scene, ax, cols: px.Columns) -> list[str]:
    """Bytes in use per device into ``ax`` (sharing the lanes' x axis);
    returns the peak labels drawn, top device first."""
    m = scene.tl.memory
    devices = np.unique(m.device).tolist()
    series = []
    for d in devices:
        rows = np.flatnonzero(m.device == d)
        rows = rows[np.argsort(m.host_ns[rows], kind="stable")]
        t, v = m.host_ns[rows], m.in_use[rows]
        col = px.step_max(t, v, cols).astype(np.float64)
        col[cols.time(np.arange(cols.width) + 1) <= t[0]] = np.nan   # before any reading
        series.append((d, t, v, col))
    tops = [np.nanmax(c) for *_, c in series if not np.isnan(c).all()]
    scale, unit = (GIB, "GiB") if any(p >= GIB for p in tops) else (MIB, "MiB")
    ax.set_ylabel(f"{MEMORY_LABEL} ({unit})", fontsize=FONT)
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    edges = cols.ms(np.arange(cols.width + 1))
    labels = []
    for j, (d, t, v, col) in enumerate(series):
        if np.isnan(col).all():
            continue
        color = STREAM_COLORS[j % len(STREAM_COLORS)]
        # a steps-post line, as the queue-depth panel draws (panels.py)
        ax.plot(edges, np.append(col, col[-1]) / scale, drawstyle="steps-post",
                color=color, lw=1.0, label=f"GPU{d}")
        x, peak = _peak(scene, t, v)
        text = ("" if len(series) == 1 else f"GPU{d} ") + f"peak {fmt_bytes(peak)}"
        ax.scatter([x], [peak / scale], s=12, color=color, zorder=3, lw=0)
        right = x > 0.7 * scene.span_ms
        ax.annotate(text, (x, peak / scale), xytext=(-4 if right else 4, 2),
                    textcoords="offset points", ha="right" if right else "left",
                    va="bottom", fontsize=FONT - 1, color=color)
        labels.append(text)
    if not labels:
        ax.text(0.5, 0.5, "no memory readings in this window", transform=ax.transAxes,
                ha="center", va="center", fontsize=FONT, color="#666666")
    ax.set_ylim(0, max(tops, default=scale) / scale * 1.3)   # room for the labels
    return labels


def _peak(scene, t: np.ndarray, v: np.ndarray) -> tuple[float, int]:
    """(ms from the window's start, bytes) of the largest value the step
    function takes in the window: a reading inside it, or the value held
    from before its start (placed at 0)."""
    inside = np.flatnonzero((t >= scene.w0) & (t < scene.w1))
    before = np.searchsorted(t, scene.w0, side="right") - 1
    best_x, best = 0.0, int(v[before]) if before >= 0 else -1
    if len(inside):
        i = inside[np.argmax(v[inside])]
        if v[i] > best:
            best_x, best = (int(t[i]) - scene.w0) / 1e6, int(v[i])
    return best_x, best
