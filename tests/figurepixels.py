"""Reading figures by their pixels, for the rendering tests: a hand-built
Timeline whose idle gaps have known causes (``known_gaps``), the rendered
image (``render``), and where a lane, a time and a colour lie in it."""

from __future__ import annotations

import numpy as np

from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.timeline import Timeline

T0 = 10**12


def known_gaps(t0: int = T0, **meta) -> Timeline:
    """100 ms, two CPU threads, two streams. Expected idle causes:
    stream 0 — launch [0, 0.51), data [20, 30) and [35, 40) (stream 1
    runs [30, 35): no cause there), launch [40, 41.01), sync [60, 71.01)
    (the gap begins inside the sync op C, no fetch follows); stream 1 —
    launch [0, 0.51), none [0.51, 20) (stream 0 runs), dependency [20, 30)
    (its work was launched at 1 ms but started at 30)."""
    def ns(ms: float) -> int:
        return t0 + int(round(ms * 1e6))

    L = int(OpFlag.LAUNCH)
    #        name thread begin  end  flags         stream
    ops = [("A", 0, 0.0, 0.5, L, 0), ("A2", 0, 0.5, 1.0, L, 1),
           ("B", 0, 40.0, 41.0, L, 0), ("C", 0, 41.0, 62.0, int(OpFlag.SYNC), 0),
           ("F", 1, 49.0, 50.0, L, 1), ("D", 0, 70.0, 71.0, L, 0),
           ("Z", 0, 99.0, 100.0, 0, NONE)]
    strings = ["A", "A2", "B", "C", "F", "D", "Z", "step", "fetch", "item"]
    op_cols = {"seq": np.arange(len(ops)), "name": [strings.index(o[0]) for o in ops],
               "thread": [o[1] for o in ops], "host_begin_ns": [ns(o[2]) for o in ops],
               "host_end_ns": [ns(o[3]) for o in ops], "flags": [o[4] for o in ops],
               "stream": [o[5] for o in ops],
               "device": [0 if o[5] != NONE else NONE for o in ops]}
    #       op stream launch begin end
    gpu = [(0, 0, 0.5, 0.51, 20.0), (1, 1, 1.0, 30.0, 35.0), (2, 0, 41.0, 41.01, 60.0),
           (4, 1, 50.0, 50.01, 55.0), (5, 0, 71.0, 71.01, 90.0)]
    gpu_cols = {"op": [g[0] for g in gpu], "device": np.zeros(len(gpu)),
                "stream": [g[1] for g in gpu], "name": [g[0] for g in gpu],
                "kind": np.full(len(gpu), int(GpuKind.KERNEL)),
                "launch_ns": [ns(g[2]) for g in gpu], "begin_ns": [ns(g[3]) for g in gpu],
                "end_ns": [ns(g[4]) for g in gpu]}
    spans = {"kind": [SpanKind.STEP, SpanKind.STEP, SpanKind.DATA],
             "name": [7, 7, 8], "thread": [0, 0, 0], "depth": [0, 0, 1],
             "number": [0, 1, NONE], "begin_ns": [ns(0), ns(50), ns(20)],
             "end_ns": [ns(50), ns(100), ns(40)]}
    syncs = {"op": [3], "kind": [9], "device": [0], "stream": [0],
             "host_begin_ns": [ns(41)], "host_end_ns": [ns(62)]}
    return Timeline({"ops": op_cols, "gpu": gpu_cols, "spans": spans, "syncs": syncs},
                    strings, {"source": "test", "aligned": True,
                              "threads": ["MainThread", "worker"], **meta})


def render(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])


def lane_row(fig, ax, label: str) -> int:
    """Image row of the centre of the lane labelled ``label``."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    y = ax.get_yticks()[labels.index(label)]
    return int(round(fig.canvas.get_width_height()[1] - ax.transData.transform((0, y))[1]))


def column(ax, ms: float) -> int:
    return int(ax.transData.transform((ms, 0))[0])


def colour_columns(img, row: int, color: str) -> np.ndarray:
    """Columns of image row ``row`` painted exactly ``color``."""
    return np.flatnonzero(np.all(img[row] == rgb(color), axis=1))
