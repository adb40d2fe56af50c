"""Step windows: the host's STEP spans, and the device-side windows that
verdicts and the step table measure.

The host runs ahead of the GPU, so a host step's window holds the tail of
the previous step's GPU work and misses the tail of its own: measured
there, a GPU-bound loop whose host runs a step ahead reads half idle. A
step's *device window* runs from the end of the previous step's last GPU
work to the end of its own last GPU work: the time the GPU took to finish
this step once it had finished the last one, so what kept it waiting for
this step (its batch being fetched, the Python before its first launch, a
read-back inside it) is in its window. (Start to start, the wait for step
k + 1's batch would land in step k, and the last step would have none.)
The first step begins with its first GPU work. Work belongs to the step
whose host window holds its launch time. A step that launched no GPU work
ends with its host window, never before the previous window ends.
"""

from __future__ import annotations

import numpy as np

from ..timeline.schema import NONE, SpanKind
from ..timeline.timeline import Timeline

__all__ = ["step_windows", "device_windows"]


def step_windows(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(number, begin_ns, end_ns) of the STEP spans, in time order."""
    s = tl.spans
    step = np.flatnonzero(s.kind == SpanKind.STEP)
    step = step[np.argsort(s.begin_ns[step], kind="stable")]
    return (np.asarray(s.number[step], np.int64), np.asarray(s.begin_ns[step], np.int64),
            np.asarray(s.end_ns[step], np.int64))


def device_windows(launch, begin, end, hb, he, fb=None,
                   fe=None) -> tuple[np.ndarray, np.ndarray]:
    """(begin_ns, end_ns) of each step's device window (see the module
    doc) from gpu rows (launch, begin, end; launch NONE: unknown, belongs
    to no step) and the steps' host windows [hb, he), in time order.
    ``fb, fe``: the windows of steps without GPU work (default [hb, he);
    the replay passes the host windows it moved)."""
    launch, begin = np.asarray(launch, np.int64), np.asarray(begin, np.int64)
    end = np.maximum(np.asarray(end, np.int64), begin)
    hb, he = np.asarray(hb, np.int64), np.asarray(he, np.int64)
    known = np.flatnonzero(launch != NONE)
    rows = known[np.argsort(launch[known], kind="stable")]
    L = launch[rows]
    a, b = np.searchsorted(L, hb, side="left"), np.searchsorted(L, he, side="left")
    has = b > a
    first = (hb if fb is None else np.asarray(fb, np.int64)).copy()
    last = (he if fe is None else np.asarray(fe, np.int64)).copy()
    if has.any():
        rb, re = begin[rows], end[rows]
        # few steps (one per iteration): a slice each is cheap enough
        first[has] = [rb[i:j].min() for i, j in zip(a[has], b[has])]
        last[has] = [re[i:j].max() for i, j in zip(a[has], b[has])]
    # end to end: each window ends with its own last work (or, without work,
    # its host end) and begins where the previous one ended
    w1 = np.maximum.accumulate(last) if len(last) else last
    w0 = np.empty_like(w1)
    if len(w0):
        w0[0] = min(first[0], w1[0])
        w0[1:] = w1[:-1]
    return w0, w1
