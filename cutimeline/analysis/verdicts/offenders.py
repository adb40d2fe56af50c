"""The top offenders behind a verdict: the ops, module paths, spans and
source lines that spent the time the verdict names, over a window.

GPU work is read over a step's device window, host work over its host
window (``Report.offenders`` picks which). ``Overlaps`` finds the rows that
overlap a window by binary search, made once per report.
"""

from __future__ import annotations

import numpy as np

from ...numeric.ordering import sort_order
from ...timeline.schema import NONE, SpanKind
from ...timeline.timeline import Timeline
from ..idle.communication import collective_rows
from ..idle.gaps import Cause, HostActivity, fetch_spans, host_activity, host_compute, subtract
from ..idle.lanes import Lanes
from ..idle.overlap import device_idle_amounts
from ..tables.nesting import self_ns
from ..tables.sources import op_line

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


def offenders(tl: Timeline, ln: Lanes | None, w0: int, w1: int, verdict: str,
              k: int = 3, own: np.ndarray | None = None,
              index: dict | None = None, engine: str = "numba",
              act: HostActivity | None = None) -> dict:
    """The top ops, module paths and spans behind a verdict in [w0, w1):
    ops and modules by GPU time (GPU-bound), host self time (launch-bound
    and host-only: an op's time less its nested ops', ``own``, default
    ``nesting.self_ns``; prorated where an op crosses the window) or time
    blocked in syncs (sync-bound); fetches (``gaps.fetch_spans``) by time
    (input-bound); streams by dependency wait while their device was idle
    (dependency-bound); collective kernels by time (communication-bound);
    user spans by time, and the op-free stretches
    (host-bound; ``act``, default ``gaps.host_activity(tl)``). ``index``:
    a dict the caller keeps between calls, where the ``Overlaps`` of ops
    and gpu rows are made once (with ``engine``)."""
    o, s, y = tl.ops, tl.spans, tl.syncs
    out: dict = {"ops": [], "modules": [], "spans": []}
    index = {} if index is None else index
    if verdict == "GPU-bound" and ln is not None:
        g = tl.gpu
        if "gpu" not in index:
            index["gpu"] = Overlaps(ln.begin, ln.end, engine)
        sel = index["gpu"].rows(w0, w1)
        dur = np.minimum(ln.end[sel], w1) - np.maximum(ln.begin[sel], w0)
        op = g.op[sel]
        linked = op != NONE
        names = g["name"][sel].copy()   # a trace may hold GPU rows but no ops
        names[linked] = o["name"][op[linked]]
        out["ops"] = _top(names, dur, tl, k)
        out["modules"] = _modules(o.module[op[linked]], dur[linked], tl, k)
        _lead_source(tl, out, op[linked], dur[linked])
    elif verdict == "communication-bound" and ln is not None:
        if "gpu" not in index:
            index["gpu"] = Overlaps(ln.begin, ln.end, engine)
        sel = index["gpu"].rows(w0, w1)
        sel = sel[collective_rows(tl)[sel]]
        dur = np.minimum(ln.end[sel], w1) - np.maximum(ln.begin[sel], w0)
        out["ops"] = _top(tl.gpu["name"][sel], dur, tl, k)
        out["count"] = int(len(sel))
    elif verdict == "sync-bound":
        sel = np.flatnonzero((y.host_end_ns > w0) & (y.host_begin_ns < w1))
        blocked = (y.host_end_ns - y.host_begin_ns)[sel]
        op = y.op[sel]
        linked = op != NONE
        names = y.kind[sel].copy()
        names[linked] = o["name"][op[linked]]
        out["ops"] = _top(names, blocked, tl, k)
        out["modules"] = _modules(o.module[op[linked]], blocked[linked], tl, k)
        out["count"] = int(len(sel))
    elif verdict == "input-bound":
        sel = np.flatnonzero(fetch_spans(tl) & (s.end_ns > w0) & (s.begin_ns < w1))
        dur = (s.end_ns - s.begin_ns)[sel]
        out["spans"] = _top(s["name"][sel], dur, tl, k)
        out["count"] = int(len(sel))
        out["mean_ns"] = int(dur.mean()) if len(sel) else 0
    elif verdict == "dependency-bound" and ln is not None:
        st = ln.streams
        mid = np.flatnonzero((st.gb < w1) & (st.ge > w0))
        act = host_activity(tl, engine=engine) if act is None else act
        am, _ = device_idle_amounts(ln, act, mid, np.full(len(mid), w0),
                                    np.full(len(mid), w1), engine)
        dep = am[:, Cause.DEPENDENCY]
        key = ln.stream_keys[st.gg[mid]]
        label = np.array([f"device {d} stream {x}" for d, x in key], dtype=object) \
            if len(key) else np.zeros(0, object)
        out["spans"] = _top(label, dep, tl, k, decode=False)
    elif verdict == "host-bound":
        act = host_activity(tl, engine=engine) if act is None else act
        # user spans by time; fetches are data, not host
        user = np.flatnonzero((s.kind == SpanKind.USER) & ~fetch_spans(tl) &
                              (s.end_ns > w0) & (s.begin_ns < w1))
        dur = np.minimum(s.end_ns[user], w1) - np.maximum(s.begin_ns[user], w0)
        out["spans"] = _top(s["name"][user], dur, tl, k)
        fb, fe = subtract((np.array([w0], np.int64), np.array([w1], np.int64)),
                          act.launching)  # no op dispatching on any thread
        # and the host-only ops computing there (``gaps.host_compute``)
        cpu = host_compute(o.host_begin_ns, o.host_end_ns, o.device, o.flags,
                           act.host_gap_ns, engine)
        cpu &= (o.host_end_ns > w0) & (o.host_begin_ns < w1)
        sel = np.flatnonzero(cpu)
        if len(sel):
            dur = np.minimum(o.host_end_ns[sel], w1) - np.maximum(o.host_begin_ns[sel], w0)
            out["ops"] = _top(o["name"][sel], dur, tl, k)
        out["count"] = int(len(fb))
        out["total_ns"] = int((fe - fb).sum())
        out["mean_ns"] = int((fe - fb).mean()) if len(fb) else 0
    else:  # launch-bound, host-only, unknown: where the host's time went
        if "ops" not in index:
            index["ops"] = Overlaps(o.host_begin_ns, o.host_end_ns, engine)
        sel = index["ops"].rows(w0, w1)
        dur = (np.minimum(o.host_end_ns[sel], w1) - np.maximum(o.host_begin_ns[sel], w0))
        if own is None:
            own = self_ns(tl)
        whole = o.host_end_ns[sel] - o.host_begin_ns[sel]
        mine = own[sel] if np.array_equal(own[sel], whole) else \
            np.round(own[sel] * np.divide(dur, whole, out=np.zeros(len(sel)),
                                          where=whole > 0)).astype(np.int64)
        out["ops"] = _top(o["name"][sel], mine, tl, k)
        out["modules"] = _modules(o.module[sel], mine, tl, k)
        _lead_source(tl, out, sel, mine)
        out["count"] = int(len(sel))
        out["mean_ns"] = int(dur.mean()) if len(sel) else 0
    return out
