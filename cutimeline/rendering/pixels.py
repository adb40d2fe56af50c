"""Reduction of a timeline's rows to the resolution they are drawn at.

A figure ``width`` pixels wide shows the window [w0, w1) ns; pixel column c
covers [w0 + c·Δ, w0 + (c+1)·Δ) with Δ = (w1 − w0) / width. Work shorter
than a pixel, or a pause between two pieces of work shorter than a pixel,
cannot be seen, so before anything is drawn intervals are widened to whole
columns (the first column they touch to the last) and, per lane and
colour, runs that touch are merged: at most about ``width / 2`` rectangles
per lane and colour remain however many rows there were. Step functions
(queue depth) and point series (CPU lead) are reduced per column the same
way, and for the overview of a dense window (``lanes/overview.py``) intervals
are binned into columns as the time each column holds of them
(``coverage``). Nothing here measures: these are the drawing's own
decimations of intervals the analysis already found.
"""

from __future__ import annotations

import numpy as np

from ..numeric import intervals as iv
from ..numeric.ordering import group_order
from ..timeline.schema import NONE

__all__ = ["Columns", "runs", "coverage", "step_max", "envelope", "even_sample"]


class Columns:
    """Pixel columns of the window [w0, w1) ns at ``width`` columns."""

    def __init__(self, w0: int, w1: int, width: int):
        self.w0, self.w1, self.width = int(w0), int(w1), max(int(width), 1)
        self.span = max(self.w1 - self.w0, 1)

    def floor(self, t) -> np.ndarray:
        """Column of each time (may lie outside 0..width-1)."""
        d = np.asarray(t, np.int64) - self.w0
        # integer arithmetic: (t − w0)·width stays far below 2^63 for any
        # window shorter than a day at any sensible width
        return np.floor_divide(d * self.width, self.span)

    def ceil(self, t) -> np.ndarray:
        d = np.asarray(t, np.int64) - self.w0
        return -np.floor_divide(-d * self.width, self.span)

    def time(self, col) -> np.ndarray:
        """Host-clock ns at which each column begins: the first ns that
        ``floor`` puts in it."""
        c = np.asarray(col, np.int64)
        return self.w0 - np.floor_divide(-c * self.span, self.width)

    def ms(self, col) -> np.ndarray:
        """Milliseconds from w0 at which each column begins (float)."""
        return np.asarray(col, np.float64) * (self.span / self.width / 1e6)


def runs(lane, begin, end, n_lanes: int, cols: Columns,
         engine: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lane, c0, c1): the union of each lane's intervals in whole pixel
    columns [c0, c1), runs that touch merged, sorted by lane then column.
    Rows outside the window are dropped; each kept row is at least one
    column wide."""
    lane = np.asarray(lane, np.int64)
    begin, end = np.asarray(begin, np.int64), np.asarray(end, np.int64)
    keep = (begin < cols.w1) & (np.maximum(end, begin + 1) > cols.w0) & (lane >= 0)
    if not keep.all():
        lane, begin, end = lane[keep], begin[keep], end[keep]
    c0 = np.clip(cols.floor(begin), 0, cols.width)
    c1 = np.clip(cols.ceil(end), 0, cols.width)
    c1 = np.maximum(c1, np.minimum(c0 + 1, cols.width))
    c0 = np.minimum(c0, c1 - 1)
    if len(lane) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e
    order, starts = group_order(lane, c0, n_lanes, engine)
    ig, ib, ie = iv.merge(c0, c1, np.full(len(c0), NONE, np.int64), order,
                          starts, 0, 0, engine)[:3]
    return ig, ib, ie


def coverage(lane, begin, end, n_lanes: int, cols: Columns) -> np.ndarray:
    """(n_lanes, width) float ns: how much of each pixel column each lane's
    intervals [begin, end) cover, clipped to the window. Intervals of one
    lane that overlap count twice (a stream's work does not overlap). O(rows
    + lanes·width): a row adds its partial first and last columns, and
    the whole columns between them through a running count."""
    w = cols.width
    lane = np.asarray(lane, np.int64)
    b = np.maximum(np.asarray(begin, np.int64), cols.w0)
    e = np.minimum(np.asarray(end, np.int64), cols.w1)
    keep = (e > b) & (lane >= 0)
    lane, b, e = lane[keep], b[keep], e[keep]
    size = n_lanes * w
    if len(lane) == 0:
        return np.zeros((n_lanes, w))
    c0 = np.clip(cols.floor(b), 0, w - 1)
    c1 = np.clip(cols.floor(e - 1), 0, w - 1)  # the column of the last ns
    base = lane * w
    one = c0 == c1
    # float from the start: bincount of no rows is int, whatever its weights
    acc = np.bincount(base[one] + c0[one], weights=(e - b)[one], minlength=size) \
        .astype(np.float64)
    m = ~one
    if m.any():
        b, e, c0, c1, base = b[m], e[m], c0[m], c1[m], base[m]
        acc += np.bincount(base + c0, weights=cols.time(c0 + 1) - b, minlength=size)
        acc += np.bincount(base + c1, weights=e - cols.time(c1), minlength=size)
        inner = c1 > c0 + 1  # whole columns c0+1 .. c1-1, all in one lane
        step = np.bincount(base[inner] + c0[inner] + 1, minlength=size + 1) - \
            np.bincount(base[inner] + c1[inner], minlength=size + 1)
        col = np.arange(w)
        acc += np.cumsum(step)[:size] * np.tile(cols.time(col + 1) - cols.time(col), n_lanes)
    return acc.reshape(n_lanes, w)


def step_max(t, d, cols: Columns) -> np.ndarray:
    """The largest value a step function takes in each column (depth d[i]
    from t[i] on, 0 before the first step; t sorted). Of several steps at
    one instant only the last counts, so a +1 and −1 at the same ns leave
    no spike."""
    t, d = np.asarray(t, np.int64), np.asarray(d, np.int64)
    out = np.zeros(cols.width, np.int64)
    if len(t) == 0:
        return out
    last = np.append(t[1:] != t[:-1], True)
    t, d = t[last], d[last]
    starts = cols.time(np.arange(cols.width))
    i = np.searchsorted(t, starts, side="right") - 1  # value at each column start
    out[:] = np.where(i >= 0, d[np.maximum(i, 0)], 0)
    inside = (t >= cols.w0) & (t < cols.w1)
    if inside.any():
        c = np.clip(cols.floor(t[inside]), 0, cols.width - 1)
        head = np.flatnonzero(np.append(True, c[1:] != c[:-1]))
        peak = np.maximum.reduceat(d[inside], head)
        out[c[head]] = np.maximum(out[c[head]], peak)
    return out


def envelope(t, v, cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(col, lo, hi): of points (t ns, v), the columns holding any and the
    smallest and largest v in each. Points outside the window are dropped."""
    t, v = np.asarray(t, np.int64), np.asarray(v)
    inside = (t >= cols.w0) & (t < cols.w1)
    t, v = t[inside], v[inside]
    if len(t) == 0:
        return np.zeros(0, np.int64), v[:0], v[:0]
    c = cols.floor(t)
    o = np.argsort(c, kind="stable")
    c, v = c[o], v[o]
    head = np.flatnonzero(np.append(True, c[1:] != c[:-1]))
    return c[head], np.minimum.reduceat(v, head), np.maximum.reduceat(v, head)


def even_sample(n: int, most: int) -> np.ndarray:
    """Indices of at most ``most`` of n items, evenly spread (all if n ≤ most)."""
    if n <= most:
        return np.arange(n)
    if most <= 0:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(0, n - 1, most).round().astype(np.int64))
