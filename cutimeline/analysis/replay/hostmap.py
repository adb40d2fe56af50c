"""How host times move in a replay: the map from recorded to replayed host
time that ``compensate`` and every what-if replay find, and its use.

A replay removes host time at points (the recorder's cost: an op's at its
begin) and jumps where the host waited for replayed work (a sync; a
launch into a full queue), so a host time t moves to t + J − C, with C the
cost removed before t and J the jump in force (``HostShift``). A what-if
edit also removes whole intervals [b, e): a time inside one first moves to
its e (``snapped``), so all of it lands on b and the map stays
non-decreasing. ``shifted`` and ``moved`` apply the map (``moved``: the
snap and the shift in one pass, a Numba kernel with its NumPy twin).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...numeric.engines import readonly
from ...timeline.schema import NONE

__all__ = ["HostShift", "NO_SHIFT", "shifted", "snapped", "moved", "moved_range"]


@dataclass(frozen=True)
class HostShift:
    """The map of host times into a replay (ns): ``cost_t`` (sorted) when
    host time was removed and ``cost_cum`` the time removed before each
    (one longer: ``cost_cum[i]`` before ``cost_t[i]``); ``sync_t`` (sorted)
    where the jump J changes and ``jumps`` J from each on (one longer:
    ``jumps[0]`` before the first, 0)."""
    cost_t: np.ndarray
    cost_cum: np.ndarray
    sync_t: np.ndarray
    jumps: np.ndarray


_NO_I64 = np.zeros(0, np.int64)
#: no cost removed and no jump: ``moved`` with it only snaps
NO_SHIFT = HostShift(_NO_I64, np.zeros(1, np.int64), _NO_I64, np.zeros(1, np.int64))


def shifted(t, shift: HostShift, engine: str = "numba") -> np.ndarray:
    """Host times t mapped into the replay: t + Δ just before t, where
    Δ = J_k − (the cost removed before t) with k the breaks
    (``replaying.breaks``: syncs begun, full-queue launches made) before t
    (an op that begins at t has not yet cost anything at t). ``engine`` is
    accepted for symmetry: this is two binary searches."""
    t = np.atleast_1d(np.asarray(t, np.int64))
    i = np.searchsorted(shift.cost_t, t, side="left")
    k = np.searchsorted(shift.sync_t, t, side="left")
    return t + shift.jumps[k] - shift.cost_cum[i]


def snapped(t, cut_b: np.ndarray, cut_e: np.ndarray) -> np.ndarray:
    """Host times inside a removed interval [b, e) (sorted, disjoint)
    moved to its e: what-if's cuts, all of whose time lands on b."""
    t = np.asarray(t, np.int64)
    if not len(cut_b):
        return t
    i = np.searchsorted(cut_b, t, side="right") - 1
    inside = (i >= 0) & (t < cut_e[np.maximum(i, 0)])
    return np.where(inside, cut_e[np.maximum(i, 0)], t)


def moved(t, cut_b, cut_e, shift: HostShift, engine: str = "numba",
          keep_none: bool = False) -> np.ndarray:
    """``shifted(snapped(t, cut_b, cut_e), shift)``: a what-if replay's map
    of a host column, NONE kept as NONE with ``keep_none``. The NumPy twin
    makes six passes and three binary searches of each time; the kernel
    one pass, each search starting where the last one ended (galloping: a
    column in time order, as a recording's mostly is, walks the tables
    once), from the front again where the column steps back."""
    t = np.asarray(t, np.int64)
    if not len(t):
        return t
    if engine == "numba":
        return _moved_nb(readonly(t), readonly(np.zeros(0, bool), bool),
                         *_tables(cut_b, cut_e, shift), keep_none, False)[0]
    out = shifted(snapped(t, cut_b, cut_e), shift)
    return np.where(t != NONE, out, NONE) if keep_none else out


def moved_range(t, keep, cut_b, cut_e, shift: HostShift,
                engine: str = "numba") -> tuple[int, int] | None:
    """The least and greatest of ``moved(t, ...)[keep]`` (None when
    ``keep`` keeps nothing), the kernel's without the moved column: a
    replay measured for its steps needs its ops' host times only for the
    Timeline's extent."""
    t, keep = np.asarray(t, np.int64), np.asarray(keep, bool)
    if not keep.any():
        return None
    if engine == "numba":
        _, lo, hi = _moved_nb(readonly(t), readonly(keep, bool),
                              *_tables(cut_b, cut_e, shift), False, True)
        return int(lo), int(hi)
    m = moved(t, cut_b, cut_e, shift, engine)[keep]
    return int(m.min()), int(m.max())


def _tables(cut_b, cut_e, shift: HostShift):
    return (readonly(cut_b), readonly(cut_e), readonly(shift.cost_t),
            readonly(shift.cost_cum), readonly(shift.sync_t), readonly(shift.jumps))


@njit(cache=True)
def _first_at(a, x, lo, right):
    """The first i ≥ lo with a[i] ≥ x (a[i] > x with ``right``), where all
    of a[:lo] are below: np.searchsorted's answer, found by galloping."""
    n, step, hi = len(a), 1, lo
    while hi < n and (a[hi] <= x if right else a[hi] < x):
        lo = hi + 1
        hi += step
        step *= 2
    hi = min(hi, n)
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x if right else a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _moved_nb(t, keep, cut_b, cut_e, cost_t, cost_cum, sync_t, jumps, keep_none, extent):
    """(the moved column, least, greatest); with ``extent`` only the rows
    ``keep`` selects (all when it is empty) count, and no column is made."""
    out = np.empty(0 if extent else len(t), np.int64)
    lo, hi = np.int64(2 ** 62), np.int64(-(2 ** 62))
    pb = pc = pk = 0
    prev = t[0]
    for j in range(len(t)):
        x = t[j]
        if len(keep) and not keep[j]:
            continue
        if keep_none and x == NONE:
            out[j] = NONE
            continue
        if x < prev:  # stepped back: search from the front
            pb = pc = pk = 0
        prev = x
        pb = _first_at(cut_b, x, pb, True)
        if pb > 0 and x < cut_e[pb - 1]:
            x = cut_e[pb - 1]
        # x only grows with t (the snap is monotone), and when t steps back
        # the pointers restart; the snapped x may pass t's own pointers only
        # forwards, so both searches may start where they were
        pc = _first_at(cost_t, x, pc, False)
        pk = _first_at(sync_t, x, pk, False)
        y = x + jumps[pk] - cost_cum[pc]
        if extent:
            lo, hi = min(lo, y), max(hi, y)
        else:
            out[j] = y
    return out, lo, hi
