"""The op table: per op name (optionally per shape signature), how often it
ran, what it cost the host and the GPU, and how long its work waited.

Columns (times in ns): ``count``; ``cpu_total_ns`` / ``cpu_mean_ns`` (host
time inside the op, ``host_end − host_begin``, nested ops included);
``cpu_self_ns`` (the total less the ops nested inside, ``nesting.py``: the
same as ``cpu_total_ns`` on recorded Timelines, whose ops do not nest, and
the figure to add up on torch.profiler traces, whose do); ``gpu_rows``
(gpu rows linked to these ops); ``gpu_total_ns`` / ``gpu_mean_ns`` (their
summed duration, and that per op call); ``delay_p50_ns`` / ``delay_p95_ns``
(launch delay = GPU begin − host launch, over the linked rows; NaN where no
row has a launch time). GPU rows not linked to an op (``gpu.op == NONE``)
are left out. Rows are sorted by GPU time, then host time, largest first.
When the Timeline has a ``flops`` table (and only then, so the table of a
Timeline without one keeps its columns), two more: ``flops`` (their FLOPs)
and ``tflop_per_s`` (achieved: FLOPs over ``gpu_total_ns``, NaN without GPU
time; ``flops.py``).
"""

from __future__ import annotations

import numpy as np

from ...numeric.ids import dense_ids
from ...numeric.quantiles import group_quantiles
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline
from .flops import op_flops
from .nesting import nested, self_ns

__all__ = ["op_table", "OP_TABLE_DTYPE", "FLOP_COLUMNS"]

OP_TABLE_DTYPE = [("name", object), ("shapes", object), ("count", np.int64),
                  ("cpu_total_ns", np.int64), ("cpu_mean_ns", np.float64),
                  ("cpu_self_ns", np.int64), ("gpu_rows", np.int64), ("gpu_total_ns", np.int64),
                  ("gpu_mean_ns", np.float64), ("delay_p50_ns", np.float64),
                  ("delay_p95_ns", np.float64)]
FLOP_COLUMNS = [("flops", np.float64), ("tflop_per_s", np.float64)]


def op_table(tl: Timeline, *, shapes: bool = False, engine: str = "numba",
             window: tuple[int, int] | None = None,
             own: np.ndarray | None = None) -> np.ndarray:
    """The op table of ``tl`` as a numpy structured array (see the module
    doc); ``shapes=True`` keeps one row per (name, shape signature);
    ``window`` (host ns) keeps the ops that begin inside it; ``own``: each
    op's self time if known (default ``nesting.self_ns``)."""
    o, g = tl.ops, tl.gpu
    keep = np.ones(len(o), bool) if window is None else \
        (o.host_begin_ns >= window[0]) & (o.host_begin_ns < window[1])
    name = np.asarray(o["name"], np.int64)
    if shapes:
        sh = np.asarray(o.shapes, np.int64)
        key = name * (len(tl.strings) + 1) + (sh + 1)
    else:
        key = name
    grp, uniq = dense_ids(key[keep], engine)
    n = len(uniq)
    rows = np.flatnonzero(keep)
    group_of_op = np.full(len(o), NONE, np.int64)
    group_of_op[rows] = grp
    cpu = (o.host_end_ns - o.host_begin_ns)[rows]
    count = np.bincount(grp, minlength=n)
    cpu_total = np.bincount(grp, weights=cpu, minlength=n)
    if not nested(tl):  # recorded, mostly: no op nests in another
        cpu_self = cpu_total
    else:
        if own is None:
            own = self_ns(tl)
        cpu_self = np.bincount(grp, weights=own[rows], minlength=n)
    linked = g.op != NONE
    gg = np.full(len(g), NONE, np.int64)   # a trace may hold GPU rows but no ops
    gg[linked] = group_of_op[g.op[linked]]
    ok = gg != NONE
    dur = np.maximum(g.end_ns - g.begin_ns, 0)[ok] if tl.aligned else \
        np.zeros(int(ok.sum()))
    gpu_rows = np.bincount(gg[ok], minlength=n)
    gpu_total = np.bincount(gg[ok], weights=dur, minlength=n)
    has_launch = ok & (g.launch_ns != NONE)
    q = np.full((n, 2), np.nan)
    if tl.aligned and has_launch.any():
        delay = (g.begin_ns - g.launch_ns)[has_launch]
        q = group_quantiles(delay, gg[has_launch], n, [0.5, 0.95], engine)
    has_flops = len(tl.flops) > 0
    out = np.zeros(n, OP_TABLE_DTYPE + FLOP_COLUMNS * has_flops)
    if shapes:
        name_ids = uniq // (len(tl.strings) + 1)
        out["shapes"] = tl.decode(uniq % (len(tl.strings) + 1) - 1)
    else:
        name_ids = uniq
        out["shapes"] = ""
    out["name"] = tl.decode(name_ids)
    out["count"] = count
    out["cpu_total_ns"] = cpu_total.round()
    out["cpu_mean_ns"] = np.divide(cpu_total, count, out=np.zeros(n), where=count > 0)
    out["cpu_self_ns"] = cpu_self.round()
    out["gpu_rows"] = gpu_rows
    out["gpu_total_ns"] = gpu_total.round()
    out["gpu_mean_ns"] = np.divide(gpu_total, count, out=np.zeros(n), where=count > 0)
    out["delay_p50_ns"], out["delay_p95_ns"] = q[:, 0], q[:, 1]
    if has_flops:
        fl = np.bincount(grp, weights=op_flops(tl)[rows], minlength=n)
        out["flops"] = fl
        out["tflop_per_s"] = np.divide(fl, gpu_total * 1e3, out=np.full(n, np.nan),
                                       where=gpu_total > 0)
    order = np.lexsort((-out["cpu_total_ns"], -out["gpu_total_ns"]))
    return out[order]
