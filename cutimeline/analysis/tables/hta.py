"""HolisticTraceAnalysis-compatible measures, computed the way HTA 0.5.0 does,
so a user can set cutimeline's numbers beside HTA's on the same trace.

Each function says the rule HTA applies (read from its source, none
copied): its window (``hta_window``), its rounding (``hta_times``), the
temporal breakdown, the idle breakdown and the queue length. HTA's
quirks are reproduced, not fixed: its µs rounding moves the idle share
of real traces by a fraction of a point.

Beside cutimeline's own causes (``gaps.py``): HTA's host wait is our host
time (data + sync + launch + host) without the split, and it counts a
whole gap, where we count the part before launch + λ; its kernel wait
and other idle are our dependency time, split at a fixed threshold. Our
queue depth counts work until it finishes (running work included) and
is weighted by time; HTA's counts work until it starts, per change
point. How close the measures come to HTA's own on the shared traces:
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric import intervals as iv
from ...numeric.ids import dense_ids
from ...numeric.ordering import group_order, sort_order
from ...timeline.schema import NONE, GpuKind, SpanKind
from ...timeline.timeline import Timeline
from ..idle.queues import SAMPLE_FIELDS, sample_stats

__all__ = ["hta_window", "window_name", "temporal_breakdown", "idle_breakdown", "queue_length",
           "hta_times", "measures", "KERNEL_DELAY_NS"]

#: HTA's ``consecutive_kernel_delay`` default (30, compared with its µs
#: timestamps): a stream's gap shorter than this after queued work is
#: *kernel wait*, a longer one *other*
KERNEL_DELAY_NS = 30_000


def hta_window(tl: Timeline) -> np.ndarray:
    """Boolean mask of the gpu rows HTA analyses.

    With two steps or more, HTA keeps the CPU events that begin before the
    start of the last ``ProfilerStep`` and the GPU work correlated with
    them (through the launch call), so the last, often partial, step is
    left out; with one step or none it warns and keeps everything. Here:
    gpu rows whose ``launch_ns`` precedes the last STEP span's begin (rows
    without a launch time drop out, as uncorrelated kernels do in HTA),
    or every row."""
    s = tl.spans
    steps = s.begin_ns[s.kind == SpanKind.STEP]
    launch = tl.gpu.launch_ns
    if len(steps) < 2:
        return np.ones(len(launch), bool)
    return (launch != NONE) & (launch < steps.max())


def window_name(tl: Timeline) -> str:
    """What ``hta_window`` keeps, in words."""
    n = int((tl.spans.kind == SpanKind.STEP).sum())
    return "steps before the last" if n >= 2 else \
        "the whole trace: HTA keeps every step when there are fewer than two"


def hta_times(tl: Timeline, round_us: bool | None = None):
    """(mask, begin, end, launch) of the gpu rows in HTA's window, rounded
    to whole µs as HTA rounds them when ``round_us`` (None: for Kineto):
    on traces with fractional-µs timestamps HTA rounds each event's begin
    up and end down."""
    if round_us is None:
        round_us = tl.meta.get("source") == "kineto"
    g = tl.gpu
    keep = hta_window(tl)
    every = bool(keep.all())
    b, e, la = (np.asarray(g[c] if every else g[c][keep], np.int64)
                for c in ("begin_ns", "end_ns", "launch_ns"))
    if round_us:
        b = -((-b) // 1000) * 1000
        e = (e // 1000) * 1000
        la = np.where(la != NONE, -((-la) // 1000) * 1000, NONE)
    return keep, b, e, la


def _is_compute(tl: Timeline, keep: np.ndarray) -> np.ndarray:
    g = tl.gpu
    names, kind = (g["name"], g.kind) if keep.all() else (g["name"][keep], g.kind[keep])
    ids = np.unique(names)
    labels = tl.decode(ids)
    other = np.array([n.startswith("nccl") or "gloo:" in n or "Memcpy" in n
                      or "Memset" in n for n in labels], bool)
    not_compute = np.isin(names, ids[other]) if other.any() else np.zeros(len(names), bool)
    not_compute |= np.isin(kind, [GpuKind.COLLECTIVE, GpuKind.MEMCPY, GpuKind.MEMSET])
    return ~not_compute


@njit(cache=True)
def _unions_nb(b, e, order, compute):
    """(span, busy, compute busy) of rows taken in begin order; merged as
    HTA merges (an interval ends at the largest end in it)."""
    first = last = 0
    busy = comp = 0
    top = ctop = 0
    open_ = copen = False
    cb = 0
    for k in range(len(order)):
        r = order[k]
        if not open_:
            first, top, open_, ib = b[r], e[r], True, b[r]
        elif b[r] > top:
            busy += top - ib
            ib, top = b[r], e[r]
        else:
            top = max(top, e[r])
        if compute[r]:
            if not copen:
                cb, ctop, copen = b[r], e[r], True
            elif b[r] > ctop:
                comp += ctop - cb
                cb, ctop = b[r], e[r]
            else:
                ctop = max(ctop, e[r])
    if open_:
        busy += top - ib
        last = top
    if copen:
        comp += ctop - cb
    return last - first, busy, comp


def _unions_np(b, e, order, compute):
    ub, ue = iv.union(b, e, "numpy")
    cb, ce = iv.union(b[compute], e[compute], "numpy")
    if len(ub) == 0:
        return 0, 0, 0
    return int(ue[-1] - ub[0]), int((ue - ub).sum()), int((ce - cb).sum())


def _temporal_from(rows: int, span: int, busy: int, compute: int) -> dict:
    idle = span - busy
    out = {"rows": rows, "span_ns": span, "idle_ns": idle, "compute_ns": compute,
           "non_compute_ns": span - compute - idle, "idle_pct": 0.0,
           "compute_pct": 0.0, "non_compute_pct": 0.0}
    if span > 0:
        for k in ("idle", "compute", "non_compute"):
            out[f"{k}_pct"] = round(100.0 * out[f"{k}_ns"] / span, 2)
    return out


def _temporal(tl, keep, b, e, engine) -> dict:
    if len(b) == 0:
        return _temporal_from(0, 0, 0, 0)
    comp = _is_compute(tl, keep)
    if engine == "numba":
        order = sort_order(b, engine)
        order = np.arange(len(b)) if order is None else order
        span, busy, compute = _unions_nb(b, e, order, comp)
    else:
        span, busy, compute = _unions_np(b, e, None, comp)
    return _temporal_from(int(len(b)), int(span), int(busy), int(compute))


def temporal_breakdown(tl: Timeline, round_us: bool | None = None,
                       engine: str = "numba") -> dict:
    """HTA's temporal breakdown: idle, compute and non-compute time (ns)
    and percentages of the GPU span, over HTA's window.

    span = end of the last − begin of the first merged interval of all
    GPU work; idle = span − union; compute = union of the computation
    kernels (not communication: name starts with "nccl" or contains
    "gloo:", or kind COLLECTIVE; not memory: name contains "Memcpy" or
    "Memset", or kind MEMCPY/MEMSET); non-compute = span − compute − idle."""
    keep, b, e, _ = hta_times(tl, round_us)
    return _temporal(tl, keep, b, e, engine)


def _streams(tl: Timeline, keep: np.ndarray, engine: str):
    g = tl.gpu
    every = keep.all()
    dev = np.asarray(g.device if every else g.device[keep], np.int64)
    st = np.asarray(g.stream if every else g.stream[keep], np.int64)
    sid, s_keys = dense_ids(st, engine)
    pair, keys = dense_ids(dev * max(len(s_keys), 1) + sid, engine)
    n_s = max(len(s_keys), 1)
    return pair, keys // n_s, s_keys[keys % n_s] if len(keys) else keys


@njit(cache=True)
def _idle_nb(begin, end, launch, order, starts, delay):
    out = np.zeros((len(starts) - 1, 3), np.int64)
    for g in range(len(starts) - 1):
        for j in range(starts[g] + 1, starts[g + 1]):
            r, p = order[j], order[j - 1]
            gap = begin[r] - end[p]
            if launch[r] != NONE and launch[r] > end[p]:
                out[g, 0] += gap
            elif gap < delay:
                out[g, 1] += gap
            else:
                out[g, 2] += gap
    return out


def _idle_np(begin, end, launch, order, starts, delay):
    n_g = len(starts) - 1
    out = np.zeros((n_g, 3), np.int64)
    grp = np.repeat(np.arange(n_g), np.diff(starts))
    r, p = order[1:], order[:-1]
    same = grp[1:] == grp[:-1]
    r, p, grp = r[same], p[same], grp[1:][same]
    gap = begin[r] - end[p]
    host = (launch[r] != NONE) & (launch[r] > end[p])
    cat = np.where(host, 0, np.where(gap < delay, 1, 2))
    np.add.at(out, (grp, cat), gap)
    return out


def _idle(b, e, la, pair, dev, st, order, starts, delay, engine) -> dict:
    f = _idle_nb if engine == "numba" else _idle_np
    sums = f(b, e, la, order, starts, np.int64(delay))
    total = sums.sum(axis=1, keepdims=True)
    share = np.divide(sums, total, out=np.zeros(sums.shape), where=total != 0)
    return {"device": dev, "stream": st, "host_wait_ns": sums[:, 0],
            "kernel_wait_ns": sums[:, 1], "other_ns": sums[:, 2],
            "host_wait_share": share[:, 0], "kernel_wait_share": share[:, 1],
            "other_share": share[:, 2]}


def _queue(b, la, pair, dev, st, engine) -> dict:
    known = la != NONE
    every = bool(known.all())
    kb, kl, kp = (b, la, pair) if every else (b[known], la[known], pair[known])
    order, starts = group_order(kp, kb, len(dev), engine)
    stats = sample_stats(kl, kb, order, starts, engine)
    return {"device": dev, "stream": st,
            **{f: stats[:, k] for k, f in enumerate(SAMPLE_FIELDS)}}


def idle_breakdown(tl: Timeline, consecutive_kernel_delay_ns: int = KERNEL_DELAY_NS,
                   round_us: bool | None = None, engine: str = "numba") -> dict:
    """HTA's idle time breakdown per stream: host wait, kernel wait and
    other idle (ns), and their shares of each stream's idle time.

    Kernels sorted by begin; each one's interval = begin − end of the
    previous one (negative where they overlap); *host wait* if its launch
    came after the previous one ended, else *kernel wait* if the interval
    is under ``consecutive_kernel_delay_ns``, else *other*."""
    keep, b, e, la = hta_times(tl, round_us)
    pair, dev, st = _streams(tl, keep, engine)
    order, starts = group_order(pair, b, len(dev), engine)
    return _idle(b, e, la, pair, dev, st, order, starts,
                 consecutive_kernel_delay_ns, engine)


def queue_length(tl: Timeline, round_us: bool | None = None,
                 engine: str = "numba") -> dict:
    """HTA's queue length statistics per stream, over the change points of
    launched-but-not-started work (+1 at each launch call, −1 when its
    kernel begins, sorted by time; not weighted by time): count, mean,
    std, min, 25%, 50%, 75%, max (as pandas ``describe``; std with
    ddof=1)."""
    keep, b, e, la = hta_times(tl, round_us)
    pair, dev, st = _streams(tl, keep, engine)
    return _queue(b, la, pair, dev, st, engine)


def measures(tl: Timeline, round_us: bool | None = None,
             consecutive_kernel_delay_ns: int = KERNEL_DELAY_NS, engine: str = "numba",
             ln=None) -> dict:
    """All three at once, sharing the window, rounding and grouping; with
    ``ln`` (the Timeline's ``lanes.Lanes``) its stream grouping is reused
    when HTA's window keeps every row unrounded."""
    keep, b, e, la = hta_times(tl, round_us)
    same = ln is not None and len(b) == len(ln.begin) and np.array_equal(b, ln.begin) \
        and bool((e >= b).all())
    if same:  # recorder timelines: HTA sees what lanes grouped already
        st_grp = ln.streams
        pair, order, starts = st_grp.of_row, st_grp.order, st_grp.starts
        dev, st = ln.stream_keys[:, 0], ln.stream_keys[:, 1]
    else:
        pair, dev, st = _streams(tl, keep, engine)
        order, starts = group_order(pair, b, len(dev), engine)
    temporal = None
    if same and ln.devices.n == 1 and len(b):
        comp = _is_compute(tl, keep)
        if comp.all():  # one device, all compute: its lane is the union
            d = ln.devices
            span, busy = int(d.ie[-1] - d.ib[0]), int((d.ie - d.ib).sum())
            temporal = _temporal_from(len(b), span, busy, busy)
    if temporal is None:
        temporal = _temporal(tl, keep, b, e, engine)
    return {"window": window_name(tl), "temporal_breakdown": temporal,
            "idle_breakdown": _idle(b, e, la, pair, dev, st, order, starts,
                                    consecutive_kernel_delay_ns, engine),
            "queue_length": _queue(b, la, pair, dev, st, engine)}
