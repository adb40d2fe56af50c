"""Names of ops and kernels inside the GPU bars wide enough to hold them.

A zoomed window (``plot(tl, window=3)``) should read without a legend
hunt: each piece of GPU work at least ``MIN_PX`` pixels wide is labelled
with the name of its row (the launching aten op for recorded Timelines,
the kernel for imported traces), clipped to its bar so a long kernel
name never spills onto its neighbours. The ``MOST`` widest are labelled,
no more: each label is an artist of its own.
"""

from __future__ import annotations

import numpy as np

from ...text import figure_text
from ..artists import HALF
from ..palette import PHASE_COLORS, text_color

__all__ = ["MIN_PX", "MOST", "short_name", "draw_names"]

MIN_PX = 30     # narrower bars get no name: two or three letters say nothing
MOST = 150      # labels per figure at most, the widest bars first
FONT = 6.5



def short_name(name: str) -> str:
    """A name as a bar can show it: an aten op without its namespace
    ("aten::addmm" -> "addmm"); a kernel without "void", the namespaces of
    its own name and its argument list ("void at::native::kern<4, F>(int,
    F)" -> "kern<4, F>"): what is left first is what tells kernels apart."""
    full = name
    for prefix in ("aten::", "void "):
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix):]
    depth = 0
    for i, ch in enumerate(name):  # the argument list: "(" outside <...>
        depth += (ch == "<") - (ch == ">")
        # "Memcpy HtoD (Pageable -> Device)": words, not an argument list
        if ch == "(" and depth == 0 and i > 0 and name[i - 1] != " ":
            name = name[:i]
            break
    head, lt, rest = name.partition("<")
    return (head.rsplit("::", 1)[-1] + lt + rest) or full


def draw_names(scene, ax, cols) -> int:
    """Label the wide GPU bars of ``scene`` in ``ax``; returns how many."""
    ln, g = scene.lanes, scene.tl.gpu
    b = np.maximum(ln.begin, scene.w0)
    e = np.minimum(ln.end, scene.w1)
    px_wide = (e - b) * (cols.width / max(scene.w1 - scene.w0, 1))
    rows = np.flatnonzero((px_wide >= MIN_PX) & (g["name"] >= 0)
                          & ~scene.folded[ln.streams.of_row])  # a shared lane: no names
    if len(rows) == 0:
        return 0
    if len(rows) > MOST:
        rows = rows[np.argsort(-px_wide[rows], kind="stable")[:MOST]]
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.transforms import Bbox, TransformedBbox
    x0, x1 = (b[rows] - scene.w0) / 1e6, (e[rows] - scene.w0) / 1e6
    y = scene.stream_y[ln.streams.of_row[rows]]
    texts = scene.tl.decode(g["name"][rows])
    pad = 3 * scene.span_ms / cols.width  # 3 px, in ms
    for i in range(len(rows)):
        color = text_color(PHASE_COLORS[scene.gpu_phase[rows[i]]])
        t = ax.text(x0[i] + pad, y[i], figure_text(short_name(str(texts[i]))), ha="left",
                    va="center", fontsize=FONT, color=color, zorder=3)
        # clipped to its own bar, not to the Axes
        t.set_clip_box(TransformedBbox(Bbox([[x0[i], y[i] - HALF], [x1[i], y[i] + HALF]]),
                                       ax.transData))
        t.set_clip_on(True)
    return len(rows)
