"""HolisticTraceAnalysis-compatible measures, computed the way HTA 0.5.0 does,
so a user can set cutimeline's numbers beside HTA's on the same trace.

What HTA does (read from its source, none copied):

* **Window.** HTA keeps the CPU events that begin before the start of the
  last ``ProfilerStep`` and the GPU work correlated with them (through the
  launch call), so the last, often partial, step is left out. Without
  steps it keeps everything. Here: gpu rows whose ``launch_ns`` precedes
  the last STEP span's begin (rows without a launch time drop out, as
  uncorrelated kernels do in HTA).
* **Rounding.** On traces with fractional-µs timestamps HTA rounds each
  event's begin up and end down to whole µs (``round_us``; by default only
  for imported Kineto traces). On nccl_data this moves the idle share by
  0.55 percentage points, so it is reproduced, not fixed.
* **Temporal breakdown.** span = end of the last − begin of the first
  merged interval of all GPU work; idle = span − union; compute = union of
  the computation kernels (not communication: name starts with "nccl" or
  contains "gloo:", or kind COLLECTIVE; not memory: name contains "Memcpy"
  or "Memset", or kind MEMCPY/MEMSET); non-compute = span − compute − idle.
* **Idle time breakdown**, per stream: kernels sorted by begin; each one's
  interval = begin − end of the previous one (negative where they overlap);
  *host wait* if its launch came after the previous one ended, else
  *kernel wait* if the interval is under ``consecutive_kernel_delay``
  (HTA's default 30, compared with µs timestamps: 30 µs), else *other*.
* **Queue length**, per stream: +1 at each launch call, −1 when its kernel
  begins (launched but not started), sorted by time; the statistics are
  over those change points (pandas ``describe``), not weighted by time.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from . import intervals as iv
from .timeline import NONE, GpuKind, SpanKind, Timeline

__all__ = ["hta_window", "temporal_breakdown", "idle_breakdown", "queue_length",
           "hta_times"]


def hta_window(tl: Timeline) -> np.ndarray:
    """Boolean mask of the gpu rows HTA analyses."""
    s = tl.spans
    steps = s.begin_ns[s.kind == SpanKind.STEP]
    launch = tl.gpu.launch_ns
    if len(steps) == 0:
        return np.ones(len(launch), bool)
    return (launch != NONE) & (launch < steps.max())


def hta_times(tl: Timeline, round_us: bool | None = None):
    """(mask, begin, end, launch) of the gpu rows in HTA's window, rounded
    to whole µs as HTA rounds them when ``round_us`` (None: for Kineto)."""
    if round_us is None:
        round_us = tl.meta.get("source") == "kineto"
    g = tl.gpu
    keep = hta_window(tl)
    b, e, la = (np.asarray(g[c][keep], np.int64)
                for c in ("begin_ns", "end_ns", "launch_ns"))
    if round_us:
        b = -((-b) // 1000) * 1000
        e = (e // 1000) * 1000
        la = np.where(la != NONE, -((-la) // 1000) * 1000, NONE)
    return keep, b, e, la


def _is_compute(tl: Timeline, keep: np.ndarray) -> np.ndarray:
    g = tl.gpu
    ids = np.unique(g["name"][keep])
    names = tl.decode(ids)
    other = np.array([n.startswith("nccl") or "gloo:" in n or "Memcpy" in n
                      or "Memset" in n for n in names], bool)
    not_compute = np.isin(g["name"][keep], ids[other])
    kind = g.kind[keep]
    not_compute |= np.isin(kind, [GpuKind.COLLECTIVE, GpuKind.MEMCPY,
                                  GpuKind.MEMSET])
    return ~not_compute


def temporal_breakdown(tl: Timeline, round_us: bool | None = None,
                       engine: str = "numba") -> dict:
    """HTA's temporal breakdown: idle, compute and non-compute time (ns)
    and percentages of the GPU span, over HTA's window."""
    keep, b, e, _ = hta_times(tl, round_us)
    out = {"rows": int(len(b)), "span_ns": 0, "idle_ns": 0, "compute_ns": 0,
           "non_compute_ns": 0, "idle_pct": 0.0, "compute_pct": 0.0,
           "non_compute_pct": 0.0}
    if len(b) == 0:
        return out
    ub, ue = iv.union(b, e, engine)
    span = int(ue[-1] - ub[0])
    busy = int((ue - ub).sum())
    comp = _is_compute(tl, keep)
    cb, ce = iv.union(b[comp], e[comp], engine)
    compute = int((ce - cb).sum())
    idle = span - busy
    out.update(span_ns=span, idle_ns=idle, compute_ns=compute,
               non_compute_ns=span - compute - idle)
    if span > 0:
        for k in ("idle", "compute", "non_compute"):
            out[f"{k}_pct"] = round(100.0 * out[f"{k}_ns"] / span, 2)
    return out


def _streams(tl: Timeline, keep: np.ndarray, engine: str):
    g = tl.gpu
    dev = np.asarray(g.device[keep], np.int64)
    st = np.asarray(g.stream[keep], np.int64)
    sid, s_keys = iv.dense_ids(st, engine)
    pair, keys = iv.dense_ids(dev * max(len(s_keys), 1) + sid, engine)
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


def idle_breakdown(tl: Timeline, consecutive_kernel_delay_ns: int = 30_000,
                   round_us: bool | None = None, engine: str = "numba") -> dict:
    """HTA's idle time breakdown per stream: host wait, kernel wait and
    other idle (ns), and their shares of each stream's idle time."""
    keep, b, e, la = hta_times(tl, round_us)
    pair, dev, st = _streams(tl, keep, engine)
    order, starts = iv.group_order(pair, b, len(dev), engine)
    f = _idle_nb if engine == "numba" else _idle_np
    sums = f(b, e, la, order, starts, np.int64(consecutive_kernel_delay_ns))
    total = sums.sum(axis=1, keepdims=True)
    share = np.divide(sums, total, out=np.zeros(sums.shape), where=total != 0)
    return {"device": dev, "stream": st, "host_wait_ns": sums[:, 0],
            "kernel_wait_ns": sums[:, 1], "other_ns": sums[:, 2],
            "host_wait_share": share[:, 0], "kernel_wait_share": share[:, 1],
            "other_share": share[:, 2]}


def queue_length(tl: Timeline, round_us: bool | None = None,
                 engine: str = "numba") -> dict:
    """HTA's queue length statistics per stream, over the change points of
    launched-but-not-started work: count, mean, std, min, 25%, 50%, 75%,
    max (as pandas ``describe``; std with ddof=1)."""
    keep, b, e, la = hta_times(tl, round_us)
    known = la != NONE
    pair, dev, st = _streams(tl, keep, engine)
    order, starts = iv.group_order(pair[known], b[known], len(dev), engine)
    t, q = iv.queue_series(la[known], b[known], order, starts, engine)
    bounds = 2 * starts
    cols = {k: np.zeros(len(dev)) for k in
            ("count", "mean", "std", "min", "25%", "50%", "75%", "max")}
    for k in range(len(dev)):
        v = q[bounds[k]:bounds[k + 1]].astype(np.float64)
        if len(v) == 0:
            for c in cols:
                cols[c][k] = np.nan if c != "count" else 0
            continue
        cols["count"][k] = len(v)
        cols["mean"][k] = v.mean()
        cols["std"][k] = v.std(ddof=1) if len(v) > 1 else np.nan
        cols["min"][k], cols["max"][k] = v.min(), v.max()
        cols["25%"][k], cols["50%"][k], cols["75%"][k] = np.quantile(
            v, [0.25, 0.5, 0.75])
    return {"device": dev, "stream": st, **cols}
