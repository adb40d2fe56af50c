"""The top offenders behind a verdict: the ops, module paths, spans and
source lines that spent the time the verdict names, over a window.

One finder per verdict (``_FINDERS``). GPU work is read over a step's
device window, host work over its host window (``Report.offenders`` picks
which, by ``margins.ON_GPU``). ``Overlaps`` finds the rows that overlap a
window by binary search, made once per report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...numeric.ordering import sort_order
from ...timeline.schema import NONE, SpanKind
from ...timeline.timeline import Timeline
from ..idle.activity import (HostActivity, fetch_spans, host_activity, host_compute,
                             subtract)
from ..idle.communication import collective_rows
from ..idle.gaps import Cause
from ..idle.lanes import Lanes
from ..idle.overlap import device_idle_amounts
from ..tables.nesting import self_ns
from ..tables.sources import op_line
from .margins import ON_GPU, Verdict

__all__ = ["offenders", "Overlaps"]


def _top(names: np.ndarray, weights: np.ndarray, tl: Timeline, k: int,
         decode: bool = True) -> list[tuple[str, int]]:
    """The k names with the largest summed weight (string ids, or labels
    with ``decode=False``), largest first, ties by id."""
    if len(names) == 0:
        return []
    if decode:  # string ids: count straight into a table of all strings
        ids = np.asarray(names, np.int64)
        tot = np.bincount(ids + 1, weights=weights, minlength=len(tl.strings) + 1)
        best = np.argsort(-tot, kind="stable")[:k]
        labels = tl.decode(best - 1)
    else:
        u, inv = np.unique(names, return_inverse=True)
        tot = np.bincount(inv.reshape(-1), weights=weights, minlength=len(u))
        best = np.argsort(-tot, kind="stable")[:k]
        labels = u[best]
    return [(str(n) or "(none)", int(t)) for n, t in zip(labels, tot[best]) if t > 0]


def _modules(ids: np.ndarray, weights: np.ndarray, tl: Timeline, k: int):
    inside = ids != NONE  # ops outside every module have no path to name
    return _top(ids[inside], weights[inside], tl, k)


def _lead_source(tl: Timeline, out: dict, ops: np.ndarray, weights: np.ndarray) -> None:
    """``out["source"]``: where the top op of ``out["ops"]`` was called
    most among the op rows ``ops`` (``sources.op_line``), when the
    Timeline has a sources table and the line is known."""
    if len(tl.sources) and out["ops"]:
        line = op_line(tl, ops, weights, tl.string_id(out["ops"][0][0]))
        if line is not None:
            out["source"] = line


class Overlaps:
    """Which intervals overlap a window, found by binary search instead of
    a scan of them all (a report asks once per verdict range): sorted by
    begin, an interval that overlaps [w0, w1) begins in [w0 − longest, w1)."""

    def __init__(self, begin: np.ndarray, end: np.ndarray, engine: str = "numba"):
        self.begin, self.end = np.asarray(begin), np.asarray(end)
        order = sort_order(self.begin, engine)  # None: sorted already (recordings)
        self.order = np.arange(len(self.begin)) if order is None else order
        self.sorted = self.begin if order is None else self.begin[order]
        dur = self.end - self.begin
        self.longest = int(dur.max()) if len(dur) else 0

    def rows(self, w0: int, w1: int) -> np.ndarray:
        """Rows with end > w0 and begin < w1, ascending (as flatnonzero)."""
        a = np.searchsorted(self.sorted, w0 - self.longest, side="left")
        b = np.searchsorted(self.sorted, w1, side="left")
        cand = self.order[a:b]
        if self.sorted is not self.begin:
            cand = np.sort(cand)
        return cand[self.end[cand] > w0]


@dataclass(frozen=True)
class _Ask:
    """What each verdict's finder reads: the Timeline and its lanes, the
    window [w0, w1), how many to name (k), self times (``own``) and host
    activity (``act``) when the caller has them, the caller's ``Overlaps``
    (``index``), the engine."""
    tl: Timeline
    ln: Lanes | None
    w0: int
    w1: int
    k: int
    own: np.ndarray | None
    index: dict
    engine: str
    act: HostActivity | None

    def overlaps(self, key: str, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Rows of ``index[key]`` (made on first use) overlapping the window."""
        if key not in self.index:
            self.index[key] = Overlaps(begin, end, self.engine)
        return self.index[key].rows(self.w0, self.w1)

    def activity(self) -> HostActivity:
        return host_activity(self.tl, engine=self.engine) if self.act is None else self.act


def _gpu_work(a: _Ask, out: dict) -> None:
    """GPU-bound: ops and modules by GPU time in the window, and where the
    top op was called most."""
    tl, ln, o, g = a.tl, a.ln, a.tl.ops, a.tl.gpu
    sel = a.overlaps("gpu", ln.begin, ln.end)
    dur = np.minimum(ln.end[sel], a.w1) - np.maximum(ln.begin[sel], a.w0)
    op = g.op[sel]
    linked = op != NONE
    names = g["name"][sel].copy()   # a trace may hold GPU rows but no ops
    names[linked] = o["name"][op[linked]]
    out["ops"] = _top(names, dur, tl, a.k)
    out["modules"] = _modules(o.module[op[linked]], dur[linked], tl, a.k)
    _lead_source(tl, out, op[linked], dur[linked])


def _collectives(a: _Ask, out: dict) -> None:
    """communication-bound: collective kernels by time, and how many."""
    ln = a.ln
    sel = a.overlaps("gpu", ln.begin, ln.end)
    sel = sel[collective_rows(a.tl)[sel]]
    dur = np.minimum(ln.end[sel], a.w1) - np.maximum(ln.begin[sel], a.w0)
    out["ops"] = _top(a.tl.gpu["name"][sel], dur, a.tl, a.k)
    out["count"] = int(len(sel))


def _syncs(a: _Ask, out: dict) -> None:
    """sync-bound: the ops (or sync kinds, without an op) and modules by
    time blocked in syncs, and how many syncs."""
    tl, o, y = a.tl, a.tl.ops, a.tl.syncs
    # the recorder's calibration pings are its own, not the program's syncs
    ping = tl.string_id("ping")
    sel = np.flatnonzero((y.host_end_ns > a.w0) & (y.host_begin_ns < a.w1) &
                         ((y.op != NONE) | (y.kind != ping)))
    blocked = (y.host_end_ns - y.host_begin_ns)[sel]
    op = y.op[sel]
    linked = op != NONE
    names = y.kind[sel].copy()
    names[linked] = o["name"][op[linked]]
    out["ops"] = _top(names, blocked, tl, a.k)
    out["modules"] = _modules(o.module[op[linked]], blocked[linked], tl, a.k)
    out["count"] = int(len(sel))


def _fetches(a: _Ask, out: dict) -> None:
    """input-bound: DataLoader fetches (``activity.fetch_spans``) by time, how
    many, their mean."""
    s = a.tl.spans
    sel = np.flatnonzero(fetch_spans(a.tl) & (s.end_ns > a.w0) & (s.begin_ns < a.w1))
    dur = (s.end_ns - s.begin_ns)[sel]
    out["spans"] = _top(s["name"][sel], dur, a.tl, a.k)
    out["count"] = int(len(sel))
    out["mean_ns"] = int(dur.mean()) if len(sel) else 0


def _waiting_streams(a: _Ask, out: dict) -> None:
    """dependency-bound: streams by their dependency wait while their
    device was idle too."""
    ln = a.ln
    st = ln.streams
    mid = np.flatnonzero((st.gb < a.w1) & (st.ge > a.w0))
    am, _ = device_idle_amounts(ln, a.activity(), mid, np.full(len(mid), a.w0),
                                np.full(len(mid), a.w1), a.engine)
    dep = am[:, Cause.DEPENDENCY]
    key = ln.stream_keys[st.gg[mid]]
    label = np.array([f"device {d} stream {x}" for d, x in key], dtype=object) \
        if len(key) else np.zeros(0, object)
    out["spans"] = _top(label, dep, a.tl, a.k, decode=False)


def _host_own_time(a: _Ask, out: dict) -> None:
    """host-bound: user spans by time (fetches are data, not host), the
    host-only ops computing in the window (``activity.host_compute``), and the
    op-free stretches: how many, their total and mean."""
    tl, o, s, w0, w1 = a.tl, a.tl.ops, a.tl.spans, a.w0, a.w1
    act = a.activity()
    user = np.flatnonzero((s.kind == SpanKind.USER) & ~fetch_spans(tl) &
                          (s.end_ns > w0) & (s.begin_ns < w1))
    dur = np.minimum(s.end_ns[user], w1) - np.maximum(s.begin_ns[user], w0)
    out["spans"] = _top(s["name"][user], dur, tl, a.k)
    fb, fe = subtract((np.array([w0], np.int64), np.array([w1], np.int64)),
                      act.launching)  # no op dispatching on any thread
    cpu = host_compute(o.host_begin_ns, o.host_end_ns, o.device, o.flags, a.engine)
    cpu &= (o.host_end_ns > w0) & (o.host_begin_ns < w1)
    sel = np.flatnonzero(cpu)
    if len(sel):
        dur = np.minimum(o.host_end_ns[sel], w1) - np.maximum(o.host_begin_ns[sel], w0)
        out["ops"] = _top(o["name"][sel], dur, tl, a.k)
    out["count"] = int(len(fb))
    out["total_ns"] = int((fe - fb).sum())
    out["mean_ns"] = int((fe - fb).mean()) if len(fb) else 0


def _host_ops(a: _Ask, out: dict) -> None:
    """launch-bound, host-only, unknown (and a GPU verdict without lanes):
    ops and modules by host self time (prorated where an op crosses the
    window), where the top op was called most, how many ops, their mean."""
    tl, o, w0, w1 = a.tl, a.tl.ops, a.w0, a.w1
    sel = a.overlaps("ops", o.host_begin_ns, o.host_end_ns)
    dur = (np.minimum(o.host_end_ns[sel], w1) - np.maximum(o.host_begin_ns[sel], w0))
    own = self_ns(tl) if a.own is None else a.own
    whole = o.host_end_ns[sel] - o.host_begin_ns[sel]
    mine = own[sel] if np.array_equal(own[sel], whole) else \
        np.round(own[sel] * np.divide(dur, whole, out=np.zeros(len(sel)),
                                      where=whole > 0)).astype(np.int64)
    out["ops"] = _top(o["name"][sel], mine, tl, a.k)
    out["modules"] = _modules(o.module[sel], mine, tl, a.k)
    _lead_source(tl, out, sel, mine)
    out["count"] = int(len(sel))
    out["mean_ns"] = int(dur.mean()) if len(sel) else 0


#: each verdict's finder; a verdict not here (launch-bound, host-only,
#: unknown) names where the host's time went
_FINDERS = {Verdict.GPU_BOUND: _gpu_work, Verdict.COMMUNICATION_BOUND: _collectives,
            Verdict.SYNC_BOUND: _syncs, Verdict.INPUT_BOUND: _fetches,
            Verdict.DEPENDENCY_BOUND: _waiting_streams, Verdict.HOST_BOUND: _host_own_time}


def offenders(tl: Timeline, ln: Lanes | None, w0: int, w1: int, verdict: str,
              k: int = 3, own: np.ndarray | None = None,
              index: dict | None = None, engine: str = "numba",
              act: HostActivity | None = None) -> dict:
    """The top ops, module paths and spans behind ``verdict`` (a
    ``Verdict`` or its word) in [w0, w1), found by the verdict's finder
    above: ``{"ops", "modules", "spans"}`` as (name, ns) pairs, largest
    first, and per verdict ``count``, ``mean_ns``, ``total_ns``,
    ``source``. ``own``: host self times (default ``nesting.self_ns``);
    ``act``: host activity (default ``activity.host_activity(tl)``);
    ``index``: a dict the caller keeps between calls, where the
    ``Overlaps`` of ops and gpu rows are made once (with ``engine``). A
    verdict read from GPU work (``ON_GPU``) needs ``ln``; without it the
    host's time is named instead."""
    out: dict = {"ops": [], "modules": [], "spans": []}
    find = _FINDERS.get(verdict, _host_ops)
    if ln is None and verdict in ON_GPU:
        find = _host_ops
    find(_Ask(tl, ln, int(w0), int(w1), k, own, {} if index is None else index, engine, act),
         out)
    return out
