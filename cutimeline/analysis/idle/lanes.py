"""The GPU side of a Timeline as lanes: its rows grouped by stream and by
device, each group's busy intervals and idle gaps (with causes, see
``gaps.py``), and measures over windows: idle time by cause, queue depth,
CPU lead.

A *window* is a host-clock range [w0, w1) in ns. ``lanes`` measures the
windows it is given (window 0 is the report's, the others usually the
steps), clipped to the trace [``Timeline.start_ns``, ``Timeline.end_ns``];
over the trace the gaps and busy intervals of a group tile the time
exactly, so a window's busy time is its length minus its idle time, and
its idle time by cause sums to its idle time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...numeric import intervals as iv
from ...numeric.columns import column_facts
from ...numeric.engines import empty_bool, empty_i64
from ...numeric.ids import pair_ids
from ...numeric.ordering import group_order, is_sorted
from ...numeric.runs import gather_sorted, merge_rows, merge_values
from ...timeline.schema import NONE, OpFlag
from ...timeline.timeline import Timeline
from .activity import HostActivity
from .attribution import attribute
from .queues import lead_stats, queue_series, window_stats_sorted

__all__ = ["Group", "Lanes", "lanes", "busy_in", "idle_in", "queue_depth"]

_LOWEST = -(2 ** 63)


@dataclass
class Group:
    """One grouping of the gpu rows (by stream or by device)."""
    n: int                 # number of groups
    of_row: np.ndarray     # group id of each gpu row
    order: np.ndarray      # rows grouped, sorted by begin
    starts: np.ndarray     # group g's rows: order[starts[g]:starts[g+1]]
    ib: np.ndarray         # merged busy intervals, grouped and sorted
    ie: np.ndarray
    istart: np.ndarray     # group g's intervals: istart[g]:istart[g+1]
    gb: np.ndarray         # gaps, grouped and sorted
    ge: np.ndarray
    gnext: np.ndarray      # row ending each gap (NONE: tail)
    gstart: np.ndarray     # group g's gaps: gstart[g]:gstart[g+1]
    lam: np.ndarray        # smallest launch latency per group (ns, ≥ 0)
    gg: np.ndarray         # group of each gap
    nl: np.ndarray         # launch time of the row ending each gap
    after: np.ndarray      # gap follows a sync op's own row
    _amounts: np.ndarray | None  # (gaps, 6) ns by Cause: see ``amounts``
    _idle: np.ndarray | None  # (groups, windows, 6) idle ns by Cause: see ``idle``
    busy: np.ndarray       # (groups, windows) busy ns
    q_order: np.ndarray    # rows with a launch time, grouped (for queue depth)
    q_starts: np.ndarray
    P: np.ndarray          # their launch times, sorted within each group
    M: np.ndarray          # their end times, sorted within each group
    queue: dict            # (groups, windows) mean/min/max; p50/p95 of window 0
    lead: np.ndarray       # (groups, 4) lead mean/p50/p95/max in window 0
    act: HostActivity | None = None   # what the gaps were classified with
    engine: str = "numba"
    windows: tuple | None = None      # (w0, w1) measured

    @property
    def idle(self) -> np.ndarray:
        """(groups, windows, 6) idle ns by Cause in the windows measured.
        A device's streams' are classified on first use: an analysis reads
        the device's (its verdicts) and, per stream, only what the device
        left idle (``overlap.py``); their busy time is known without."""
        if self._idle is None:
            self._idle = attribute(self.gb, self.ge, self.nl, self.gnext != NONE,
                                   self.lam[self.gg], self.gstart, self.act,
                                   *self.windows, self.engine, self.after,
                                   amounts=False)[1]
        return self._idle

    @property
    def amounts(self) -> np.ndarray:
        """(gaps, 6) ns of each gap by Cause. Classified again on first use:
        ``lanes`` keeps only the windows' sums (the per-gap table is as
        large as six columns of rows, and fresh memory costs more than
        classifying)."""
        if self._amounts is None:
            self._amounts = attribute(self.gb, self.ge, self.nl, self.gnext != NONE,
                                      self.lam[self.gg], self.gstart, self.act,
                                      [0], [0], self.engine, self.after)[0]
        return self._amounts


@dataclass
class Lanes:
    begin: np.ndarray      # gpu rows, end clamped to ≥ begin
    end: np.ndarray
    launch: np.ndarray
    lead: np.ndarray       # begin − launch (NONE where launch is unknown)
    streams: Group
    devices: Group
    stream_keys: np.ndarray   # (device, stream) of each stream group
    device_keys: np.ndarray   # device of each device group
    stream_device: np.ndarray  # device group of each stream group
    lo: int
    hi: int
    w0: np.ndarray         # the windows measured (clipped to [lo, hi])
    w1: np.ndarray


def lanes(tl: Timeline, act: HostActivity, w0, w1, engine: str = "numba",
          bounds: tuple[int, int] | None = None) -> Lanes:
    """Group a Timeline's (aligned) gpu rows; gaps, causes and measures
    over the windows [w0, w1) (window 0 gets quantiles and CPU lead)."""
    g = tl.gpu
    begin = np.asarray(g.begin_ns, np.int64)
    launch = np.asarray(g.launch_ns, np.int64)
    lo, hi = bounds if bounds is not None else (tl.start_ns, tl.end_ns)
    w0 = np.clip(np.atleast_1d(np.asarray(w0, np.int64)), lo, hi)
    w1 = np.clip(np.atleast_1d(np.asarray(w1, np.int64)), w0, hi)
    end, lead, unknown, summary = (_prepare if engine == "numba" else _prepare_np)(
        begin, np.asarray(g.end_ns, np.int64), launch, w0[0], w1[0])
    pair, k_dev, k_st = _pairs(g, engine)
    stream_keys = np.stack([k_dev, k_st], axis=1)
    dev_keys, stream_dev = np.unique(k_dev, return_inverse=True)
    stream_dev = stream_dev.reshape(-1)
    # rows of sync ops: the gap after one is the sync's (see gaps.py)
    if tl.ops.remember("flags", "sync", lambda f: bool(np.any(f & OpFlag.SYNC))):
        sync_op = (tl.ops.flags & OpFlag.SYNC) != 0
        sync_row = (g.op != NONE) & sync_op[np.maximum(g.op, 0)]
    else:
        sync_row = np.zeros(0, bool)
    # which of the columns the groups read come sorted (``numeric.columns``): one
    # stream's rows are then read in place, nothing checked again
    in_order = tuple(x is g[c] and column_facts(g, c, engine).sorted for x, c in
                     ((begin, "begin_ns"), (launch, "launch_ns"), (end, "end_ns")))
    args = (begin, end, launch, lead, unknown, sync_row, lo, hi, w0, w1, act, engine,
            in_order, summary)
    streams = _group(pair, len(k_dev), *args, lazy=len(k_dev) > len(dev_keys))
    if len(k_dev) == len(dev_keys):  # one stream per device: same lanes
        devices = streams
    elif engine == "numba":  # a device's sorted rows: its streams' runs merged
        devices = _group(stream_dev[pair], len(dev_keys), *args,
                         runs=(streams, stream_dev))
    else:
        devices = _group(stream_dev[pair], len(dev_keys), *args)
    return Lanes(begin, end, launch, lead, streams, devices, stream_keys,
                 dev_keys, stream_dev, lo, hi, w0, w1)


def _pairs(g, engine: str):
    """``pair_ids`` of the rows' (device, stream): from the columns' facts,
    remembered, when all rows have one device and one stream (a pass over
    both columns saved; zeros come as untouched pages)."""
    fd, fs = column_facts(g, "device", engine), column_facts(g, "stream", engine)
    if len(g) and fd.lo == fd.hi and fs.lo == fs.hi:
        return np.zeros(len(g), np.int64), np.full(1, fd.lo, np.int64), \
            np.full(1, fs.lo, np.int64)
    return pair_ids(g.device, g.stream, engine)


def _group(of_row, n, begin, end, launch, lead, unknown, sync_row, lo, hi, w0, w1,
           act, engine, in_order, summary, runs=None, lazy=False) -> Group:
    # one group whose rows come in time order: nothing to sort or gather
    flat = runs is None and n == 1 and len(begin) > 0 and in_order[0]
    if flat:
        order, starts = np.arange(len(begin), dtype=np.int64), \
            np.array([0, len(begin)], np.int64)
    elif runs is None:
        order, starts = group_order(of_row, begin, n, engine)
    else:  # merge the sorted runs of the member groups instead of sorting
        sub, member_of = runs
        parts = [merge_rows(begin, sub.order, sub.starts,
                               np.flatnonzero(member_of == k), engine) for k in range(n)]
        order = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else \
            sub.order[:0]
        starts = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    istart, ib, ie, gg, gb, ge, gnext, gprev, lam = iv.merge_lean(
        begin, end, launch, order, starts, lo, hi, engine)
    lam = np.maximum(lam, 0)
    has_next, nl, after = (_gap_rows if engine == "numba" else _gap_rows_np)(
        gnext, gprev, launch, sync_row)
    gstart = _starts(gg, n)
    if lazy:  # idle by cause on first use (``Group.idle``); busy: covered time
        amounts, idle = None, None
        busy = _busy(ib, ie, istart, n, w0, w1, engine)
    else:
        amounts, idle = attribute(gb, ge, nl, has_next, lam[gg], gstart, act, w0, w1,
                                  engine, after, amounts=False)
        busy = (w1 - w0)[None, :] - idle.sum(axis=2)
    if not unknown:  # every row has a launch time: the usual case
        q_order, q_starts = order, starts
    else:
        known = launch[order] != NONE
        q_order = order[known]
        q_starts = np.searchsorted(np.flatnonzero(known), starts).astype(np.int64)
    if runs is None:
        flat = flat and not unknown
        P = launch if flat and in_order[1] else gather_sorted(launch, q_order, q_starts, engine)
        M = end if flat and in_order[2] else gather_sorted(end, q_order, q_starts, engine)
    else:  # the member groups' sorted launches and ends, merged
        sub, member_of = runs

        def merged(x, col):
            if n == 1 and not unknown and is_sorted(col, engine):
                return col  # one group, its rows in time order already (launches, usually)
            parts = [merge_values(x, sub.q_starts, np.flatnonzero(member_of == k), engine)
                     for k in range(n)]
            return parts[0] if n == 1 else np.concatenate(parts)
        P, M = merged(sub.P, launch), merged(sub.M, end)
    mean, qmin, qmax, quant = window_stats_sorted(P, M, q_starts, w0, w1, engine=engine)
    queue = {"mean": mean, "min": qmin, "max": qmax, "p50": quant[:, 0], "p95": quant[:, 1]}
    leads = lead_stats(lead, begin, order, starts, w0[0], w1[0], engine, of_row,
                       summary=summary)
    return Group(n, of_row, order, starts, ib, ie, istart, gb, ge, gnext,
                 gstart, lam, gg, nl, after, amounts, idle, busy, q_order, q_starts,
                 P, M, queue, leads, act, engine, (w0, w1))


@njit(cache=True)
def _gap_rows(gnext, gprev, launch, sync_row):
    """Per gap, in one pass: whether work ends it, that work's launch time
    (NONE: none or unknown), whether it follows a sync op's own row."""
    n = len(gnext)
    has_next = empty_bool(n)
    nl = empty_i64(n)
    after = empty_bool(n)
    for k in range(n):
        r = gnext[k]
        has_next[k] = r != NONE
        nl[k] = launch[r] if r != NONE else NONE
        after[k] = sync_row[gprev[k]] if len(sync_row) and gprev[k] != NONE else False
    return has_next, nl, after


def _gap_rows_np(gnext, gprev, launch, sync_row):
    has_next = gnext != NONE
    nl = np.where(has_next, launch[np.maximum(gnext, 0)], NONE)
    after = (gprev != NONE) & sync_row[np.maximum(gprev, 0)] if len(sync_row) else \
        np.zeros(len(gnext), bool)
    return has_next, nl, after


@njit(cache=True)
def _prepare(begin, end, launch, w0=0, w1=0):
    """(end clamped to ≥ begin — the input itself when no row needs it —,
    CPU lead begin − launch (NONE where unknown), whether any launch is
    unknown, and over the rows that ``lead_stats`` counts in window 0 —
    a lead other than NONE, a begin in [w0, w1) —: the leads' sum, their
    number and the largest, −2^63 without any), in one pass: the pass
    ``lead_stats`` would make over the same two columns, saved."""
    lead = empty_i64(len(begin))
    unknown = False
    clamp = False
    total = m = 0
    top = _LOWEST
    for i in range(len(begin)):  # selects, no branch: LLVM vectorises the loop
        b, a = begin[i], launch[i]
        x = NONE if a == NONE else b - a
        lead[i] = x
        unknown |= a == NONE
        ok = (x != NONE) & (w0 <= b) & (b < w1)
        total += x if ok else 0
        m += ok
        top = max(top, x if ok else _LOWEST)
        clamp |= end[i] < b
    if clamp:
        end = np.maximum(end, begin)
    return end, lead, unknown, (total, m, top)


def _prepare_np(begin, end, launch, w0=0, w1=0):
    unknown = launch == NONE
    lead = np.where(unknown, NONE, begin - launch)
    if np.any(end < begin):
        end = np.maximum(end, begin)
    ok = (lead != NONE) & (begin >= w0) & (begin < w1)
    v = lead[ok]
    summary = (int(v.sum()), len(v), int(v.max()) if len(v) else _LOWEST)
    return end, lead, bool(unknown.any()), summary


def _starts(group_sorted: np.ndarray, n: int) -> np.ndarray:
    return np.searchsorted(group_sorted, np.arange(n + 1)).astype(np.int64)


def queue_depth(ln: Lanes, grp: Group, k: int, engine: str = "numba"):
    """(t_ns, depth) of group k: the queue depth from each t on, +1 at each
    launch and −1 when that work ends (launched, not finished; rows with
    no launch time not counted): ``numeric.queuedepth``'s model, which the
    Chrome export's counter reads too."""
    s, e = grp.q_starts[k], grp.q_starts[k + 1]
    t, d = queue_series(ln.launch, ln.end, grp.q_order[s:e],
                           np.array([0, e - s]), engine)
    return t, d


def busy_in(grp: Group, w0, w1, engine: str = "numba") -> np.ndarray:
    """(groups, windows) busy ns in any windows: time covered by work."""
    w0 = np.atleast_1d(np.asarray(w0, np.int64))
    w1 = np.maximum(np.atleast_1d(np.asarray(w1, np.int64)), w0)
    return _busy(grp.ib, grp.ie, grp.istart, grp.n, w0, w1, engine)


def _busy(ib, ie, istart, n, w0, w1, engine) -> np.ndarray:
    out = np.zeros((n, len(w0)), np.int64)
    for k in range(n):
        s, e = istart[k], istart[k + 1]
        if e > s:
            out[k] = iv.coverage(ib[s:e], ie[s:e], w0, w1, engine)
    return out


def idle_in(grp: Group, w0, w1, act: HostActivity, engine: str = "numba") -> np.ndarray:
    """(groups, windows, 6) idle ns by Cause in any windows."""
    has_next = grp.gnext != NONE
    return attribute(grp.gb, grp.ge, grp.nl, has_next, grp.lam[grp.gg], grp.gstart,
                     act, w0, w1, engine, grp.after)[1]
