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
The first step begins with its host window (or its first GPU work, when
that came earlier: work queued before the step began): the fetch of its
batch, its host preprocessing and its warm-up are its own, as every later
step's are, so the windows tile the recording from the first step's
begin to the last one's end. Work belongs to the step whose host window
holds its launch time; a step that launched none ends with its host
window, never before the previous window ends.

"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric.engines import readonly, resolve_engine
from ...numeric.ordering import is_sorted_nb
from ...timeline.schema import NONE, SpanKind
from ...timeline.timeline import Timeline

__all__ = ["step_windows", "device_windows"]


def step_windows(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(number, begin_ns, end_ns) of the STEP spans, in time order."""
    s = tl.spans
    step = np.flatnonzero(s.kind == SpanKind.STEP)
    step = step[np.argsort(s.begin_ns[step], kind="stable")]
    return (np.asarray(s.number[step], np.int64), np.asarray(s.begin_ns[step], np.int64),
            np.asarray(s.end_ns[step], np.int64))


def device_windows(launch, begin, end, hb, he, fb=None, fe=None,
                   engine: str = "auto", in_order: bool | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(begin_ns, end_ns) of each step's device window (see the module
    doc) from gpu rows (launch, begin, end; launch NONE: unknown, belongs
    to no step) and the steps' host windows [hb, he), in time order.
    ``fb, fe``: the windows of steps without GPU work (default [hb, he);
    the replay passes the host windows it moved). ``in_order``: whether
    ``launch`` is sorted, when the caller knows (``numeric.columns``; None: the
    kernel checks). With ``engine="numba"`` and the rows in launch order
    (recordings launch in time order) one kernel reads each step's rows in
    place (``_step_work_nb``); otherwise, and in the NumPy twin, the rows
    are sorted by launch first."""
    hb, he = np.asarray(hb, np.int64), np.asarray(he, np.int64)
    start = hb if fb is None else np.asarray(fb, np.int64)  # the host windows' begins
    first = start.copy()
    last = (he if fe is None else np.asarray(fe, np.int64)).copy()
    done = False
    if resolve_engine(engine, len(launch)) == "numba":
        done = _step_work_nb(readonly(launch), readonly(begin), readonly(end), readonly(hb),
                             readonly(he), first, last, -1 if in_order is None else int(in_order))
    if not done:
        _step_work_np(np.asarray(launch, np.int64), np.asarray(begin, np.int64),
                      np.asarray(end, np.int64), hb, he, first, last)
    # end to end: each window ends with its own last work (or, without work,
    # its host end) and begins where the previous one ended
    w1 = np.maximum.accumulate(last) if len(last) else last
    w0 = np.empty_like(w1)
    if len(w0):
        w0[0] = min(start[0], first[0], w1[0])
        w0[1:] = w1[:-1]
    return w0, w1


@njit(cache=True)
def _step_work_nb(launch, begin, end, hb, he, first, last, in_order):
    """Each step's first begin and last end (ends clamped to ≥ begin) over
    the rows launched in [hb, he), into first and last where it has any;
    the rows read in place. False, nothing written, when the rows are not
    in launch order (``in_order``: 1 known sorted, 0 known not, −1 check)."""
    if in_order == 0 or (in_order < 0 and not is_sorted_nb(launch)):
        return False
    for w in range(len(hb)):
        a = np.searchsorted(launch, hb[w], side="left")
        b = np.searchsorted(launch, he[w], side="left")
        while a < b and launch[a] == NONE:  # unknown: no step's
            a += 1
        if a < b and launch[a] > NONE:  # the rest are known: no branch, vectorised
            rb, re = begin[a:b], end[a:b]
            lo, hi = rb[0], max(re[0], rb[0])
            for i in range(len(rb)):
                lo, hi = min(lo, rb[i]), max(hi, max(re[i], rb[i]))
            first[w], last[w] = lo, hi
        elif a < b:  # times below NONE: unknown rows may follow, skip each
            lo, hi, has = 0, 0, False
            for i in range(a, b):
                if launch[i] != NONE:
                    x, y = begin[i], max(end[i], begin[i])
                    lo, hi = (x, y) if not has else (min(lo, x), max(hi, y))
                    has = True
            if has:
                first[w], last[w] = lo, hi
    return True


def _step_work_np(launch, begin, end, hb, he, first, last):
    end = np.maximum(end, begin)
    known = np.flatnonzero(launch != NONE)
    rows = known[np.argsort(launch[known], kind="stable")]
    L = launch[rows]
    a, b = np.searchsorted(L, hb, side="left"), np.searchsorted(L, he, side="left")
    has = b > a
    if has.any():
        rb, re = begin[rows], end[rows]
        # few steps (one per iteration): a slice each is cheap enough
        first[has] = [rb[i:j].min() for i, j in zip(a[has], b[has])]
        last[has] = [re[i:j].max() for i, j in zip(a[has], b[has])]
