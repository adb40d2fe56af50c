"""The step table (per step: its verdict with its margin, the evidence
behind it) and the top offenders behind a verdict.

A step is measured over its device window (``steps.py``) on its primary
device (the one with the most GPU time): busy and idle time, idle time by
cause, queue depth, and the verdict (``margins.py``); host-side measures
(ops, launches, time in fetches and syncs, the CPU lead of the work
launched) over its host window.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numeric import intervals as iv
from ..numeric.ordering import sort_order
from ..numeric.runs import merge_rows, runs_sorted
from ..timeline.schema import NONE, OpFlag, SpanKind
from ..timeline.timeline import Timeline
from .gaps import CAUSES, Cause, HostActivity
from .lanes import Lanes
from .margins import VERDICT_CAUSES, VERDICTS, rank_causes, verdicts
from .steps import step_windows

__all__ = ["VERDICTS", "verdicts", "step_windows", "step_table", "offenders"]

# begin/end: the device window; host_begin/host_end: the host STEP span
STEP_DTYPE = [("number", np.int64), ("begin_ns", np.int64), ("end_ns", np.int64),
              ("duration_ns", np.int64), ("host_begin_ns", np.int64),
              ("host_end_ns", np.int64), ("verdict", object), ("cause", object),
              ("share", np.float64), ("runner_up", object),
              ("runner_up_share", np.float64),
              ("busy_ns", np.int64), ("busy_frac", np.float64),
              ("idle_ns", np.int64)] + \
    [(f"{c}_ns", np.int64) for c in CAUSES] + \
    [("communication_ns", np.int64),  # collectives alone (communication.py)
     ("lead_first_ns", np.int64), ("lead_last_ns", np.int64),
     ("lead_max_ns", np.int64), ("queue_mean", np.float64),
     ("queue_min", np.int64), ("queue_max", np.int64), ("ops", np.int64),
     ("launches", np.int64), ("host_data_ns", np.int64),
     ("host_sync_ns", np.int64), ("predicted_ns", np.int64),
     ("predicted_busy_frac", np.float64)]


@njit(cache=True)
def _count_flag(flags, bit, i0, i1):
    """How many of flags[i0[w]:i1[w]] have ``bit``, per window w."""
    out = np.zeros(len(i0), np.int64)
    for w in range(len(i0)):
        c = 0
        for k in range(i0[w], i1[w]):
            c += (flags[k] & bit) != 0
        out[w] = c
    return out


def _count_flag_np(flags, bit, i0, i1):
    before = np.zeros(len(flags) + 1, np.int64)  # rows with ``bit`` before each row
    np.cumsum((flags & bit) != 0, out=before[1:])
    return np.maximum(before[i1] - before[i0], 0)


def step_table(tl: Timeline, ln: Lanes | None, act: HostActivity, primary: int,
               comp: dict | None, idx, w0, w1, numbers, gpu_bound_at: float = 0.85,
               engine: str = "numba", *, host=None, predicted=None,
               mixed_margin: float = 0.2) -> np.ndarray:
    """One row per window (usually the steps) with the measures of
    ``STEP_DTYPE`` on device group ``primary``; ``idx`` are the windows'
    indices among those ``ln`` measured (see the module doc). [w0, w1):
    the device windows; ``host``: (begin, end) of the host windows
    (default the same); ``predicted``: (begin, end) of the windows in the
    overhead replay (default the host windows moved by ``shifted``)."""
    w0, w1 = np.asarray(w0, np.int64), np.asarray(w1, np.int64)
    h0, h1 = (w0, w1) if host is None else (np.asarray(h, np.int64) for h in host)
    idx = np.asarray(idx, np.int64)
    out = np.zeros(len(w0), STEP_DTYPE)
    out["number"], out["begin_ns"], out["end_ns"] = numbers, w0, w1
    out["duration_ns"] = w1 - w0
    out["host_begin_ns"], out["host_end_ns"] = h0, h1
    out["cause"], out["runner_up"] = "", ""
    o = tl.ops
    by_time = sort_order(o.host_begin_ns, engine)  # ops come sorted, mostly
    t_op = o.host_begin_ns if by_time is None else o.host_begin_ns[by_time]
    flags = o.flags if by_time is None else o.flags[by_time]
    i0, i1 = np.searchsorted(t_op, h0), np.searchsorted(t_op, h1)
    out["ops"] = i1 - i0
    count_flag = _count_flag if engine == "numba" else _count_flag_np
    out["launches"] = count_flag(flags, int(OpFlag.LAUNCH), i0, i1)
    out["host_data_ns"] = iv.coverage(*act.data, h0, h1, engine)
    out["host_sync_ns"] = iv.coverage(*act.sync, h0, h1, engine)
    for c in ("lead_first_ns", "lead_last_ns", "lead_max_ns"):
        out[c] = NONE
    out["predicted_ns"] = NONE
    out["predicted_busy_frac"] = np.nan
    if comp is not None:
        from .compensation import shifted
        p0, p1 = (shifted(h0, comp, engine), shifted(h1, comp, engine)) \
            if predicted is None else predicted
        out["predicted_ns"] = p1 - p0
    if ln is None:
        out["verdict"] = verdicts(np.zeros(len(w0)), np.zeros((len(w0), len(Cause))),
                                  has_gpu=False)
        out["share"], out["runner_up_share"] = np.nan, np.nan
        return out
    dv = ln.devices
    idle = dv.idle[primary, idx]
    busy = dv.busy[primary, idx]
    span = np.maximum(w1 - w0, 1)
    out["busy_ns"], out["busy_frac"] = busy, busy / span
    out["idle_ns"] = idle.sum(axis=1)
    for c in Cause:
        out[f"{CAUSES[c]}_ns"] = idle[:, c]
    for k, c in (("mean", "queue_mean"), ("min", "queue_min"), ("max", "queue_max")):
        out[c] = dv.queue[k][primary, idx]
    # CPU lead of the work launched in each step, in launch order
    launch, lead = ln.launch, ln.lead
    in_order = dv.n == 1 and sort_order(launch, engine) is None
    if not in_order or (len(launch) and launch[0] == NONE):
        mine = np.flatnonzero(ln.launch != NONE) if dv.n == 1 else \
            np.flatnonzero((dv.of_row == primary) & (ln.launch != NONE))
        o_l = sort_order(ln.launch[mine], engine)
        if o_l is not None:
            mine = mine[o_l]
        launch, lead = ln.launch[mine], ln.lead[mine]
    a, b = np.searchsorted(launch, h0), np.searchsorted(launch, h1)
    has = b > a
    out["lead_first_ns"][has] = lead[a[has]]
    out["lead_last_ns"][has] = lead[b[has] - 1]
    out["lead_max_ns"][has] = [lead[i:j].max() for i, j in zip(a[has], b[has])]
    if comp is not None:
        ub, ue = _replayed_union(ln, primary, comp, engine)
        pb = iv.coverage(ub, ue, p0, p1, engine)
        out["predicted_busy_frac"] = pb / np.maximum(p1 - p0, 1)
    from .communication import exposed
    comm = exposed(tl, ln, primary, ln.w0[idx], ln.w1[idx], engine)
    out["communication_ns"] = comm
    if comm.any():  # collectives alone rank beside the idle causes
        idle = np.concatenate([idle, comm[:, None]], axis=1)
        compute_frac = (busy - comm) / span
    else:
        compute_frac = out["busy_frac"]
    out["verdict"] = verdicts(compute_frac, idle, gpu_bound_at,
                              mixed_margin=mixed_margin)
    r = rank_causes(idle)
    names = np.array(list(VERDICT_CAUSES[:idle.shape[1]]) + [""], dtype=object)
    out["cause"], out["share"] = names[r["cause"]], r["share"]
    out["runner_up"], out["runner_up_share"] = names[r["runner_up"]], r["runner_up_share"]
    return out


def _replayed_union(ln: Lanes, primary: int, comp: dict, engine: str):
    """Union of device group ``primary``'s replayed gpu rows. A stream's
    replayed rows keep its recorded order (the replay runs a stream's work
    in launch order), so the device's are its streams' sorted runs merged
    (ties by row, as a stable sort), not sorted again."""
    b, e = comp["begin_ns"], comp["end_ns"]
    if ln.streams.n == 1:  # one stream: all rows, in order
        return iv.union(b, e, engine)
    st = ln.streams
    members = np.flatnonzero(ln.stream_device == primary)
    if engine == "numba" and runs_sorted(b, st.order, st.starts, members, engine):
        rows = merge_rows(b, st.order, st.starts, members, engine)
    else:
        rows = np.flatnonzero(ln.devices.of_row == primary)
        rows = rows[np.argsort(b[rows], kind="stable")]
    return iv.union(b, e, engine, rows=rows)


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
        from .sources import op_line
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
    blocked in syncs (sync-bound); DataLoader spans by fetch time
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
        from .communication import collective_rows
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
        sel = np.flatnonzero((s.kind == SpanKind.DATA) & (s.end_ns > w0) &
                             (s.begin_ns < w1))
        dur = (s.end_ns - s.begin_ns)[sel]
        out["spans"] = _top(s["name"][sel], dur, tl, k)
        out["count"] = int(len(sel))
        out["mean_ns"] = int(dur.mean()) if len(sel) else 0
    elif verdict == "dependency-bound" and ln is not None:
        from .gaps import host_activity
        from .overlap import device_idle_amounts
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
        from .gaps import host_activity, host_compute, subtract
        act = host_activity(tl, engine=engine) if act is None else act
        user = np.flatnonzero((s.kind == SpanKind.USER) & (s.end_ns > w0) &
                              (s.begin_ns < w1))
        fetch = np.array(["DataLoader" in str(n) for n in tl.decode(s["name"][user])],
                         bool)
        user = user[~fetch] if len(user) else user  # fetches are data, not host
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
            from .nesting import self_ns
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
