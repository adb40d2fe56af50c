"""Overhead compensation: the timeline replayed without the recorder's cost.

The recorder measures at start what it costs the host (``selfcost.py``);
``costs.py`` prices each op and module call by it. The replay removes that
cost from the host side and lets the GPU work follow:

* host time shrinks by the recorder's cost spent so far (all threads, in
  time order): a host time t maps to t + Δ(t);
* each gpu row, in launch order, starts at max(its stream's replayed free
  time, replayed launch + λ) with λ the stream's smallest observed launch
  latency, and keeps its duration; a row that waited on something else
  as recorded (it began after both its stream's previous work and its
  launch + λ: another stream's work, an event) also starts no earlier
  than its recorded begin shifted as its launch was, so the wait between
  streams is kept (what it waited for was launched before it, and moved
  at least as far);
* a host-blocking sync waits for the replayed work it covers (its stream,
  or every stream of its device when device-wide): it returns at
  max(replayed begin, replayed completion) plus the wake-up latency it had
  (end − max(begin, completion) as recorded), and Δ jumps to match;
* a launch into a stream that already holds ``depth`` replayed rows not
  yet finished (``launch_queue``: the Timeline's ``meta["launch_queue"]``,
  1024 by default, as CUDA blocks the host at about 1,024 pending
  launches; 0 unbounded) returns when the oldest of them ends, and Δ
  jumps to match: a host that the replay lets run ahead stops where CUDA
  would stop it;
* a row may also wait for the replayed end of an earlier row on another
  stream (``after``: what-if's copies moved to a side stream, whose
  consumer waits for them).

Not modelled: a wait that the replay would shorten further (its source
moved more than the waiting row's launch did), and a queue that fills with
other commands than gpu rows (event records, memsets the Timeline lacks).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import CutimelineError
from ..numeric.engines import I64_MAX, _i64, empty_i64
from ..numeric.ordering import sort_order
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .costs import costs, mix_scale

__all__ = ["replay", "held", "compensate", "shifted", "engine_inputs", "breaks",
           "launch_queue", "LAUNCH_QUEUE"]

LAUNCH_QUEUE = 1024  # pending launches per stream at which CUDA blocks the host

_FAR_PAST = -(2 ** 62)
_FAR_FUTURE = I64_MAX


@njit(cache=True)
def _replay_nb(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold, after, depth):
    n_op, n_sy, n_g = len(cost_t), len(sb), len(g_launch)
    S = len(lam)
    free_r = np.full(S, _FAR_PAST, np.int64)
    free_o = np.full(S, _FAR_PAST, np.int64)
    # replayed ends of each stream's last ``depth`` rows, a ring per stream
    ring = np.empty((S, max(depth, 1)), np.int64)
    cnt = np.zeros(S, np.int64)
    b_r = empty_i64(n_g)
    row_j = empty_i64(n_g)
    jumps = np.zeros(n_sy + 1, np.int64)
    i = j = 0
    removed = jump = 0  # Δ = jump − removed
    for k in range(n_sy + 1):
        # what comes before sync k (ties: costs, then launches, then the
        # sync), merged two ways: the few syncs are the outer loop
        t_s = sb[k] if k < n_sy else _FAR_FUTURE
        while True:
            t_op = cost_t[i] if i < n_op else _FAR_FUTURE
            t_g = g_launch[j] if j < n_g else _FAR_FUTURE
            if t_op <= t_g:
                if t_op > t_s or i >= n_op:
                    break
                removed += cost[i]
                i += 1
            else:
                if t_g > t_s:
                    break
                s = g_grp[j]
                if depth > 0 and cnt[s] >= depth:
                    # a full queue: the launch returns when its oldest row ends
                    jump = max(jump, ring[s, cnt[s] % depth] - g_launch[j] + removed)
                d = jump - removed
                start = max(max(free_r[s], g_launch[j] + d + lam[s]), hold[j] + d)
                a = after[j]
                if a >= 0:
                    start = max(start, b_r[a] + (g_end[a] - g_begin[a]))
                b_r[j] = start
                row_j[j] = jump
                free_r[s] = start + (g_end[j] - g_begin[j])
                free_o[s] = max(free_o[s], g_end[j])
                if depth > 0:
                    ring[s, cnt[s] % depth] = free_r[s]
                    cnt[s] += 1
                j += 1
        if k == n_sy:
            break
        c_o = c_r = _FAR_PAST
        for s in range(S):
            if covers[s_grp[k], s]:
                c_o = max(c_o, free_o[s])
                c_r = max(c_r, free_r[s])
        wake = max(se[k] - max(sb[k], c_o), 0)
        new_end = max(sb[k] + jump - removed, c_r) + wake
        jump = new_end - se[k] + removed
        jumps[k + 1] = jump
    return b_r, jumps, row_j


def _replay_np(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold, after, depth):
    g_dur = g_end - g_begin
    n_g, S = len(g_launch), len(lam)
    removed = np.concatenate([[0], np.cumsum(cost)])
    gone_g = removed[np.searchsorted(cost_t, g_launch, side="right")]
    free_r = np.full(S, _FAR_PAST, np.int64)
    free_o = np.full(S, _FAR_PAST, np.int64)
    b_r = np.empty(n_g, np.int64)
    row_j = np.empty(n_g, np.int64)
    jumps = np.zeros(len(sb) + 1, np.int64)  # J after sync k-1
    # the row whose end frees a full queue for each row: its stream's
    # depth-th earlier row. A run of ``depth`` rows never holds one.
    ref = np.full(n_g, -1, np.int64)
    for s in np.unique(g_grp) if depth > 0 else ():
        r = np.flatnonzero(g_grp == s)
        ref[r[depth:]] = r[:max(len(r) - depth, 0)]
    # streams with rows that wait for another row's end go after the others
    waits = np.zeros(S, bool)
    waits[g_grp[after >= 0]] = True

    def need(rows):  # J each row's launch needs to find room in its queue
        out = np.full(len(rows), _FAR_PAST, np.int64)
        q = ref[rows] >= 0
        rq, f = rows[q], ref[rows[q]]
        out[q] = b_r[f] + g_dur[f] - g_launch[rq] + gone_g[rq]
        return out

    def run(rows, jump, queued):
        """Rows ``rows`` replayed from jump ``jump`` (their queues' waits
        taken when ``queued``: each row's own queue lies in earlier runs)."""
        jr = np.maximum(np.maximum.accumulate(need(rows)), jump) if queued else \
            np.full(len(rows), jump, np.int64)
        row_j[rows] = jr
        delta, grp = jr - gone_g[rows], g_grp[rows]
        for s in sorted(np.unique(grp), key=lambda s: waits[s]):
            m = grp == s
            r, d = rows[m], delta[m]
            a = np.maximum(g_launch[r] + d + lam[s], hold[r] + d)
            w = after[r]
            has = w >= 0
            a[has] = np.maximum(a[has], b_r[w[has]] + g_dur[w[has]])
            dur = g_dur[r]
            before = np.concatenate([[0], np.cumsum(dur)[:-1]])
            top = np.maximum(np.maximum.accumulate(a - before), free_r[s])
            b_r[r] = top + before  # start = max(previous end, ready)
            free_r[s] = b_r[r[-1]] + dur[-1]
            free_o[s] = max(free_o[s], g_end[r].max())
        return int(jr[-1])

    # gpu rows up to and including sync k's time come before it
    cut = np.searchsorted(g_launch, sb, side="right")
    lo = jump = 0
    for k in range(len(sb) + 1):
        hi = cut[k] if k < len(sb) else n_g
        if hi > lo:
            # all at once as if no queue filled; where one did (the first
            # such row saw correct ends before it), again by runs of depth
            saved = free_r.copy(), free_o.copy()
            after_all = run(np.arange(lo, hi), jump, False)
            if depth > 0 and need(np.arange(lo, hi)).max() > jump:
                free_r[:], free_o[:] = saved
                for c in range(lo, hi, depth):
                    jump = run(np.arange(c, min(c + depth, hi)), jump, True)
            else:
                jump = after_all
        if k < len(sb):
            gone = removed[np.searchsorted(cost_t, sb[k], side="right")]
            cov = covers[s_grp[k]]
            c_o = free_o[cov].max() if cov.any() else _FAR_PAST
            c_r = free_r[cov].max() if cov.any() else _FAR_PAST
            wake = max(se[k] - max(sb[k], c_o), 0)
            new_d = max(sb[k] + jump - gone, c_r) + wake - se[k]
            # from here on Δ = J − (costs removed after this sync)
            jump = jumps[k + 1] = new_d + gone
        lo = hi
    return b_r, jumps, row_j


def replay(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam, covers,
           engine: str = "numba", *, depth: int = 0, after=None, hold=None):
    """The replay of the module doc on plain arrays (ns).

    ``cost_t``/``cost``: when the recorder spent host time (sorted) and
    how much (an op at its begin, a module hook at its span's bound);
    ``sb``/``se``/``s_grp``: syncs sorted by begin, and the row of
    ``covers`` (bool, syncs-kinds × streams) saying which streams each
    waits for; ``g_*``: gpu rows sorted by launch with their stream and
    recorded begin and end; ``lam``: latency per stream. ``depth``: the
    launch queue of each stream (0: unbounded). ``after``: per gpu row the
    row (by position, earlier) whose replayed end it waits for, −1 none; a
    stream holding such rows must not be waited for so. ``hold``: the
    recorded waits to keep (default ``held`` of these rows). Returns
    (replayed begin of each gpu row, the jump J_k after each sync, the jump
    in force after each row's launch: see ``breaks`` and ``shifted``).
    """
    i64 = _i64
    args = (i64(cost_t), i64(cost), i64(sb), i64(se), i64(s_grp), i64(g_launch),
            i64(g_grp), i64(g_begin), i64(g_end), i64(lam),
            np.ascontiguousarray(covers, bool))
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise CutimelineError(f"The replay's launch queue depth={depth!r} must be an "
                              f"integer ≥ 0 (0: unbounded); CUDA's is about 1024.")
    n_g = len(args[5])
    after = np.full(n_g, -1, np.int64) if after is None else i64(after)
    if (after >= np.arange(n_g)).any() or (after < -1).any() or \
            np.isin(args[6][after[after >= 0]], args[6][after >= 0]).any():
        raise CutimelineError("A replayed gpu row may wait only for an earlier row, "
                              "on a stream whose rows wait for none.")
    hold = held(*args[5:10], engine=engine) if hold is None else i64(hold)
    return (_replay_nb if engine == "numba" else _replay_np)(*args, hold, after,
                                                             int(depth))


def breaks(sync_t, jumps, g_launch, row_j) -> tuple[np.ndarray, np.ndarray]:
    """What ``shifted`` takes as ``sync_t`` and ``jumps``: the host times
    at which the jump J changes (a sync's begin; a launch that waited for
    a full queue, as ``g_launch − 1`` so that the launch itself moves) and
    J from each on (``jumps[0] = 0`` before the first)."""
    t = np.concatenate([np.asarray(sync_t, np.int64), np.asarray(g_launch, np.int64) - 1])
    v = np.concatenate([np.asarray(jumps, np.int64)[1:], np.asarray(row_j, np.int64)])
    order = np.argsort(t, kind="stable")  # a sync before a launch at its time
    t, v = t[order], v[order]
    keep = v != np.concatenate([[0], v[:-1]])
    return t[keep], np.concatenate([[0], v[keep]])


@njit(cache=True)
def _held_nb(g_launch, g_grp, g_begin, g_end, lam):
    hold = empty_i64(len(g_launch))
    prev = np.full(len(lam), _FAR_PAST, np.int64)
    for j in range(len(g_launch)):
        hold[j] = _FAR_PAST
        s = g_grp[j]
        if g_begin[j] > max(prev[s], g_launch[j] + lam[s]):
            hold[j] = g_begin[j]
        prev[s] = max(prev[s], g_end[j])
    return hold


def held(g_launch, g_grp, g_begin, g_end, lam, engine: str = "numba") -> np.ndarray:
    """Recorded begin of each gpu row (sorted by launch) that waited on
    something besides its stream and its launch (it began after both its
    stream's previous work ended and launch + λ), else far in the past:
    the replay keeps such a row no earlier than this, shifted."""
    g_launch, g_grp, g_begin, g_end, lam = (_i64(a) for a in
                                            (g_launch, g_grp, g_begin, g_end, lam))
    if engine == "numba":
        return _held_nb(g_launch, g_grp, g_begin, g_end, lam)
    hold = np.full(len(g_launch), _FAR_PAST, np.int64)
    for s in np.unique(g_grp):
        r = np.flatnonzero(g_grp == s)
        prev = np.maximum.accumulate(g_end[r])
        prev = np.concatenate([[_FAR_PAST], prev[:-1]])
        waited = g_begin[r] > np.maximum(prev, g_launch[r] + lam[s])
        hold[r[waited]] = g_begin[r[waited]]
    return hold


def shifted(t, comp: dict, engine: str = "numba") -> np.ndarray:
    """Host times t mapped into the replay: t + Δ just before t, where
    Δ = J_k − (the recorder's cost spent before t) with k the breaks
    (``breaks``: syncs begun, full-queue launches made) before t (an op that begins at t has not yet cost anything at t).
    ``engine`` is accepted for symmetry: this is two binary searches."""
    t = np.atleast_1d(np.asarray(t, np.int64))
    i = np.searchsorted(comp["cost_t"], t, side="left")
    k = np.searchsorted(comp["sync_t"], t, side="left")
    return t + comp["jumps"][k] - comp["cost_cum"][i]


def engine_inputs(tl: Timeline, ln, sy: np.ndarray, keep: np.ndarray | None = None,
                  launch: np.ndarray | None = None, engine: str = "numba"):
    """What ``replay`` needs of the device side: (the gpu rows in launch
    order, or None when they are in it already, and when ``keep`` is given
    only the kept rows; a dict of their ``g_launch``, ``g_grp``,
    ``g_begin``, ``g_end`` and ``lam``; each sync's row of ``covers``; the
    bool ``covers``, sync kinds × streams). ``sy``: the syncs replayed, by
    begin. ``launch``: the rows' host launch times to use (default the
    recorded ones); an unknown launch is taken as begin − λ."""
    y = tl.syncs
    if ln is None:
        return (np.zeros(0, np.int64), dict(
            g_launch=np.zeros(0), g_grp=np.zeros(0), g_begin=np.zeros(0),
            g_end=np.zeros(0), lam=np.zeros(0)), np.zeros(len(sy), np.int64),
            np.zeros((1, 0), bool))
    keys, n_s = ln.stream_keys, len(ln.stream_keys)
    lam = ln.streams.lam
    sid = ln.streams.of_row
    launch = ln.launch if launch is None else launch
    if not (launch != NONE).all():
        launch = np.where(launch != NONE, launch, ln.begin - lam[sid])
    if keep is None:
        rows = sort_order(launch, engine)
    else:
        kept = np.flatnonzero(keep)
        rows = kept[np.argsort(launch[kept], kind="stable")]
    end = _sync_rows_clipped(tl, ln)
    if rows is None:
        g = dict(g_launch=launch, g_grp=sid, g_begin=ln.begin, g_end=end, lam=lam)
    else:
        g = dict(g_launch=launch[rows], g_grp=sid[rows], g_begin=ln.begin[rows],
                 g_end=end[rows], lam=lam)
    # which streams a sync covers: its stream on its device, or all of
    # its device's streams (all streams when the device is unknown)
    dev, st = y.device[sy].astype(np.int64), y.stream[sy].astype(np.int64)
    kinds, s_grp = np.unique(np.stack([dev, st], 1), axis=0,
                             return_inverse=True) if len(sy) else \
        (np.zeros((0, 2), np.int64), np.zeros(0, np.int64))
    s_grp = s_grp.reshape(-1)
    covers = np.zeros((max(len(kinds), 1), n_s), bool)
    for k, (d, s) in enumerate(kinds):
        covers[k] = ((keys[:, 0] == d) | (d == NONE)) & \
            ((keys[:, 1] == s) | (s == NONE))
    return rows, g, s_grp, covers


def launch_queue(tl: Timeline) -> int:
    """The launch queue depth the replay gives each stream of ``tl``: what
    its device recorded in ``meta["launch_queue"]`` (a SimGPU its own, 0
    when unbounded), else CUDA's ``LAUNCH_QUEUE``."""
    d = tl.meta.get("launch_queue", LAUNCH_QUEUE)
    return LAUNCH_QUEUE if d is None else int(d)


def _sync_rows_clipped(tl: Timeline, ln) -> np.ndarray:
    """The gpu rows' ends, those of a sync op's own rows (a ``.item()``'s
    read-back) no later than the host's return from that sync: the row's
    closing event is recorded when the host is back, so its recorded end
    includes the host's wake-up, which the replay adds once more as the
    sync's own latency (a sync would wait for its own return)."""
    y, g = tl.syncs, tl.gpu
    has = y.op != NONE
    if not has.any() or not len(g):
        return ln.end
    back = np.full(len(tl.ops), NONE, np.int64)
    np.maximum.at(back, np.asarray(y.op[has], np.int64), np.asarray(y.host_end_ns[has], np.int64))
    at = np.where(g.op != NONE, back[np.maximum(g.op, 0)], NONE)
    hit = at != NONE
    if not hit.any():
        return ln.end
    return np.where(hit, np.maximum(np.minimum(ln.end, at), ln.begin), ln.end)


def compensate(tl: Timeline, ln=None, engine: str = "numba") -> dict | None:
    """Replay ``tl`` without the recorder's overhead (see the module doc).

    ``ln``: the Timeline's ``lanes.Lanes`` (None when it has no gpu rows).
    Returns None when meta holds no measured overhead; else a dict with the
    costs used (``overhead_ns_per_op``: the mean per op, ``removed_ns``:
    the total), what ``shifted`` needs to map host times (``cost_t``,
    ``cost_cum``, ``sync_t``, ``jumps``) and, with gpu rows, their replayed
    ``begin_ns``/``end_ns``.
    """
    spent = costs(tl, engine)
    if spent is None:
        return None
    cost_t, cost = spent
    per_launch = tl.meta.get("overhead_ns_per_launch") or 0
    y = tl.syncs
    sy = np.argsort(y.host_begin_ns, kind="stable")
    rows, g, s_grp, covers = engine_inputs(tl, ln, sy, engine=engine)
    sb = np.asarray(y.host_begin_ns[sy], np.int64)
    b_r, jumps, row_j = replay(
        cost_t, cost, sb, y.host_end_ns[sy], s_grp, g["g_launch"], g["g_grp"],
        g["g_begin"], g["g_end"], g["lam"], covers, engine, depth=launch_queue(tl))
    sync_t, jumps = breaks(sb, jumps, g["g_launch"], row_j)
    cum = np.zeros(len(cost) + 1, np.int64)  # one pass, no concatenated copy
    np.cumsum(cost, out=cum[1:])
    out = {"overhead_ns_per_op": int(tl.meta["overhead_ns_per_op"]),
           "overhead_ns_per_launch": int(per_launch), "removed_ns": int(cum[-1]),
           "mix_scale": mix_scale(tl.meta),
           "cost_t": cost_t, "cost_cum": cum,
           "sync_t": sync_t, "jumps": jumps}
    if ln is not None:
        if rows is None:
            begin = b_r
        else:
            begin = np.empty(len(rows), np.int64)
            begin[rows] = b_r
        out["begin_ns"] = begin
        out["end_ns"] = end = ln.end - ln.begin  # in place: one fresh array, not two
        end += begin
    return out
