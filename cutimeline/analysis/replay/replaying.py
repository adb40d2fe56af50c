"""The replay's engine (the model: ``compensation.py``'s doc): ``replay``
on plain arrays, a Numba kernel and its NumPy twin; ``held``, the recorded
waits between streams it keeps, and ``waited_on``, which row on another
stream each such wait most likely was for; and ``breaks``, the host times
at which its jump changes. It knows arrays only: ``compensation.py`` reads them off
a Timeline, prices the recorder's cost, asks the replay and maps host
times with what it found; ``whatif.py`` asks it under each edit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...errors import CutimelineError
from ...numeric.engines import I64_MAX, as_i64, empty_i64
from ...timeline.gpus import LAUNCH_QUEUE
from ..thresholds import THRESHOLDS

__all__ = ["replay", "replay_breaks", "breaks", "held", "waited_on", "replay_nb",
           "replay_args", "WAIT_LATENCY_NS", "FAR_PAST"]

#: a time before any other: no wait, no ready time
FAR_PAST = -(2 ** 62)
_FAR_FUTURE = I64_MAX


@njit(cache=True)
def replay_nb(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold, after, depth, mode, qt, xt, xc, dep, ready):
    """``replay``; ``hold`` empty: made on the way (``held``'s rule, whose
    running end per stream is the replay's ``free_o``: a pass saved);
    ``after`` empty: no row waits for another; ``dep`` empty: each kept
    wait moves as its own row's launch (else as row ``dep[j]``'s, where
    ≥ 0: ``waited_on``); ``ready`` empty: no sync waits for a time
    (else per sync the time it returns no earlier than, as ``replay``'s
    ``ready``). ``mode`` 0: the jump after
    each row (``row_j``, as the twin); 1 (fused): instead, each row's
    replayed end and, for the sorted host times ``qt``, the jump and the
    costs spent before each (``shifted``'s terms, taken as the merge passes
    them); 2: instead, ``breaks`` itself, emitted as the merge meets them
    in its order (row_j: their jumps, e_r: their times; no sort, no table
    of a row each). (xt, xc): more costs, merged in on the way (after
    costs at their times). Returns (b_r, jumps, row_j, e_r, q_jump,
    q_cost, the costs' total)."""
    n_op, n_sy, n_g = len(cost_t), len(sb), len(g_launch)
    S = len(lam)
    inline, waits, deps = len(hold) == 0, len(after) > 0, len(dep) > 0
    floors = len(ready) > 0
    d_row = empty_i64(len(g_launch) if deps else 0)  # each row's Δ, for the waits on it
    free_r = np.full(S, FAR_PAST, np.int64)
    free_o = np.full(S, FAR_PAST, np.int64)
    # replayed ends of each stream's last ``depth`` rows, a ring per stream
    ring = np.empty((S, max(depth, 1)), np.int64)
    cnt = np.zeros(S, np.int64)
    slot = np.zeros(S, np.int64)  # cnt % depth, kept: no division per row
    b_r = empty_i64(n_g)
    # mode 2: at most a break per sync and per row, written as met (the
    # pages past the last one written are never touched)
    row_j = empty_i64(0 if mode == 1 else n_g + n_sy if mode == 2 else n_g)
    e_r = empty_i64(n_g if mode == 1 else n_g + n_sy if mode == 2 else 0)
    n_b = last_b = 0  # mode 2: breaks written, the jump of the last one
    n_q = len(qt)
    q_jump = np.zeros(n_q, np.int64)
    q_cost = np.zeros(n_q, np.int64)
    qj = qc = 0  # the next query for the jump, for the costs
    x, n_x = 0, len(xt)
    jumps = np.zeros(n_sy + 1, np.int64)
    i = j = 0
    removed = jump = 0  # Δ = jump − removed
    # the current stream's state in locals, written back when another
    # stream launches or a sync reads it: arrays the compiler cannot keep
    # in registers (they might alias the outputs) cost a store and a load
    # per row on the critical path
    cur = 0
    fr = fo = FAR_PAST
    cn = sl = lm = 0
    if S:
        lm = lam[0]
    for k in range(n_sy + 1):
        # what comes before sync k (ties: costs, then launches, then the
        # sync), merged two ways: the few syncs are the outer loop
        t_s = sb[k] if k < n_sy else _FAR_FUTURE
        while True:
            t_op = cost_t[i] if i < n_op else _FAR_FUTURE
            t_g = g_launch[j] if j < n_g else _FAR_FUTURE
            t_x = xt[x] if x < n_x else _FAR_FUTURE
            extra = t_x < t_op
            t_op = min(t_op, t_x)
            if t_op <= t_g:
                if t_op > t_s or t_op == _FAR_FUTURE:
                    break
                while qc < n_q and qt[qc] <= t_op:  # a cost at t is not spent at t
                    q_cost[qc] = removed
                    qc += 1
                if extra:
                    removed += xc[x]
                    x += 1
                else:
                    removed += cost[i]
                    i += 1
            else:
                if t_g > t_s:
                    break
                while qj < n_q and qt[qj] < t_g:  # a launch at t has moved t
                    q_jump[qj] = jump
                    qj += 1
                s = g_grp[j]
                if s != cur:
                    free_r[cur], free_o[cur], cnt[cur], slot[cur] = fr, fo, cn, sl
                    cur = s
                    fr, fo, cn, sl, lm = free_r[s], free_o[s], cnt[s], slot[s], lam[s]
                if depth > 0 and cn >= depth:
                    # a full queue: the launch returns when its oldest row ends
                    jump = max(jump, ring[s, sl] - g_launch[j] + removed)
                d = jump - removed
                if inline:
                    h = g_begin[j] if g_begin[j] > max(fo, g_launch[j] + lm) else FAR_PAST
                else:
                    h = hold[j]
                dh = d
                if deps:
                    d_row[j] = d
                    if dep[j] >= 0:  # the wait moves as what it waited for did
                        dh = d_row[dep[j]]
                start = max(max(fr, g_launch[j] + d + lm), h + dh)
                if waits:
                    a = after[j]
                    if a >= 0:
                        start = max(start, b_r[a] + (g_end[a] - g_begin[a]))
                b_r[j] = start
                fr = start + (g_end[j] - g_begin[j])
                fo = max(fo, g_end[j])
                if mode == 1:
                    e_r[j] = fr
                elif mode == 0:
                    row_j[j] = jump
                elif jump != last_b:  # a launch at t moved t: its break at t − 1
                    e_r[n_b], row_j[n_b] = g_launch[j] - 1, jump
                    n_b += 1
                    last_b = jump
                if depth > 0:
                    ring[s, sl] = fr
                    cn += 1
                    sl = 0 if sl + 1 == depth else sl + 1
                j += 1
        if k == n_sy:
            break
        while qj < n_q and qt[qj] <= sb[k]:  # a sync begun at t has not moved t
            q_jump[qj] = jump
            qj += 1
        if S:
            free_r[cur], free_o[cur], cnt[cur], slot[cur] = fr, fo, cn, sl
        c_o = c_r = FAR_PAST
        for s in range(S):
            if covers[s_grp[k], s]:
                c_o = max(c_o, free_o[s])
                c_r = max(c_r, free_r[s])
        if floors:  # what it waited for is ready then, recorded and replayed
            c_o = max(c_o, ready[k])
            c_r = max(c_r, ready[k])
        wake = max(se[k] - max(sb[k], c_o), 0)
        new_end = max(sb[k] + jump - removed, c_r) + wake
        jump = new_end - se[k] + removed
        jumps[k + 1] = jump
        if mode == 2 and jump != last_b:
            e_r[n_b], row_j[n_b] = sb[k], jump
            n_b += 1
            last_b = jump
    q_jump[qj:] = jump
    q_cost[qc:] = removed
    if mode == 2:
        return b_r, jumps, row_j[:n_b], e_r[:n_b], q_jump, q_cost, removed
    return b_r, jumps, row_j, e_r, q_jump, q_cost, removed


def _replay_np(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold, after, depth, dep, ready):
    g_dur = g_end - g_begin
    n_g, S = len(g_launch), len(lam)
    removed = np.concatenate([[0], np.cumsum(cost)])
    gone_g = removed[np.searchsorted(cost_t, g_launch, side="right")]
    free_r = np.full(S, FAR_PAST, np.int64)
    free_o = np.full(S, FAR_PAST, np.int64)
    b_r = np.empty(n_g, np.int64)
    row_j = np.empty(n_g, np.int64)
    d_all = np.zeros(n_g, np.int64)  # each row's Δ, for the waits on it
    has_dep = dep >= 0
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
        out = np.full(len(rows), FAR_PAST, np.int64)
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
        d_all[rows] = delta  # a row waits only on one launched before it
        for s in sorted(np.unique(grp), key=lambda s: waits[s]):
            m = grp == s
            r, d = rows[m], delta[m]
            dh = np.where(has_dep[r], d_all[np.maximum(dep[r], 0)], d)
            a = np.maximum(g_launch[r] + d + lam[s], hold[r] + dh)
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
            c_o = free_o[cov].max() if cov.any() else FAR_PAST
            c_r = free_r[cov].max() if cov.any() else FAR_PAST
            if len(ready):
                c_o, c_r = max(c_o, ready[k]), max(c_r, ready[k])
            wake = max(se[k] - max(sb[k], c_o), 0)
            new_d = max(sb[k] + jump - gone, c_r) + wake - se[k]
            # from here on Δ = J − (costs removed after this sync)
            jump = jumps[k + 1] = new_d + gone
        lo = hi
    return b_r, jumps, row_j


@njit(cache=True)
def _held_nb(g_launch, g_grp, g_begin, g_end, lam):
    hold = empty_i64(len(g_launch))
    prev = np.full(len(lam), FAR_PAST, np.int64)
    for j in range(len(g_launch)):
        hold[j] = FAR_PAST
        s = g_grp[j]
        if g_begin[j] > max(prev[s], g_launch[j] + lam[s]):
            hold[j] = g_begin[j]
        prev[s] = max(prev[s], g_end[j])
    return hold


WAIT_LATENCY_NS = THRESHOLDS.wait_latency_ns  # why: analysis/thresholds.py


def waited_on(hold, g_launch, g_grp, g_begin, g_end, device_of_grp) -> np.ndarray | None:
    """For each row that waited on something besides its stream and its
    launch (``hold`` above the far past; rows sorted by launch), the row
    (its position) it most likely waited for: on another stream of its
    device, the one that ended last no later than it began, and no more
    than ``WAIT_LATENCY_NS`` before; −1 where that row was launched after
    it or there is none (the wait then moves as the row's own launch).
    None when no row waited.

    A kept wait moves as what it waited for moved, not as its own launch:
    the replay moves a launch earlier by the host time removed before it,
    and the row it waited for, launched earlier, by no more. Moved as its
    own launch, a row could begin before the work it waited for ended."""
    hold = np.asarray(hold)
    mine = np.flatnonzero(hold > FAR_PAST)
    if not len(mine):
        return None
    grp, begin, end = (as_i64(a) for a in (g_grp, g_begin, g_end))
    dev = as_i64(device_of_grp)[grp]
    out = np.full(len(begin), -1, np.int64)
    for d in np.unique(dev[mine]):
        rows = np.flatnonzero(dev == d)
        rows = rows[np.argsort(end[rows], kind="stable")]
        st, ends = grp[rows], end[rows]
        # for each position, the last earlier one on another stream than its
        run = np.concatenate([[True], st[1:] != st[:-1]])
        prev_other = np.maximum.accumulate(np.where(run, np.arange(len(st)), 0)) - 1
        j = mine[dev[mine] == d]
        i = np.searchsorted(ends, begin[j], side="right") - 1
        same = (i >= 0) & (st[np.maximum(i, 0)] == grp[j])
        i = np.where(same, prev_other[np.maximum(i, 0)], i)
        ok = i >= 0
        k = np.where(ok, rows[np.maximum(i, 0)], -1)
        ok &= k < j  # launched before it (rows are in launch order)
        ok &= begin[j] - end[np.maximum(k, 0)] <= WAIT_LATENCY_NS
        out[j[ok]] = k[ok]
    return out


def held(g_launch, g_grp, g_begin, g_end, lam, engine: str = "numba") -> np.ndarray:
    """Recorded begin of each gpu row (sorted by launch) that waited on
    something besides its stream and its launch (it began after both its
    stream's previous work ended and launch + λ), else far in the past:
    the replay keeps such a row no earlier than this, shifted."""
    g_launch, g_grp, g_begin, g_end, lam = (as_i64(a) for a in
                                            (g_launch, g_grp, g_begin, g_end, lam))
    if engine == "numba":
        return _held_nb(g_launch, g_grp, g_begin, g_end, lam)
    hold = np.full(len(g_launch), FAR_PAST, np.int64)
    for s in np.unique(g_grp):
        r = np.flatnonzero(g_grp == s)
        prev = np.maximum.accumulate(g_end[r])
        prev = np.concatenate([[FAR_PAST], prev[:-1]])
        waited = g_begin[r] > np.maximum(prev, g_launch[r] + lam[s])
        hold[r[waited]] = g_begin[r[waited]]
    return hold


def replay(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam, covers,
           engine: str = "numba", *, depth: int = 0, after=None, hold=None, dep=None,
           ready=None):
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
    recorded waits to keep (default ``held`` of these rows). ``dep``: per
    gpu row the row (by position, earlier) its kept wait was for
    (``waited_on``; −1 none): the wait moves as that row's launch did, not
    as its own (default: its own). ``ready``: per sync, a time it returns
    no earlier than, in the recording's and the replay's clock alike
    (far past: none; a fetch waiting for a DataLoader worker's batch,
    whose workers run as they did: ``fetch_waits``); default none. Returns
    (replayed begin of each gpu row, the jump J_k after each sync, the jump
    in force after each row's launch: see ``breaks`` and ``shifted``).
    """
    args = replay_args(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end,
                        lam, covers, depth)
    n_g = len(args[5])
    none = np.zeros(0, np.int64)
    if after is not None:
        after = _checked_after(after, args[6])
    if engine != "numba":
        after = np.full(n_g, -1, np.int64) if after is None else after
        hold = held(*args[5:10], engine=engine) if hold is None else as_i64(hold)
        dep = np.full(n_g, -1, np.int64) if dep is None else as_i64(dep)
        return _replay_np(*args, hold, after, int(depth), dep, _ready(ready, args[2]))
    hold = none if hold is None else as_i64(hold)  # empty: made in the kernel
    return replay_nb(*args, hold, none if after is None else after, int(depth),
                      0, none, none, none, none if dep is None else as_i64(dep),
                      _ready(ready, args[2]))[:3]


def _ready(ready, sb) -> np.ndarray:
    """``ready`` as the kernels take it: int64, one per sync, or empty."""
    if ready is None:
        return np.zeros(0, np.int64)
    ready = as_i64(ready)
    if len(ready) != len(sb):
        raise CutimelineError(f"The replay's ready times number {len(ready)}, its syncs "
                              f"{len(sb)}: give one per sync (far past for none).")
    return ready


def _checked_after(after, g_grp) -> np.ndarray:
    """``after`` as int64, or a CutimelineError when a row would wait for
    a later row or on a stream whose rows wait."""
    after = as_i64(after)
    if (after >= np.arange(len(after))).any() or (after < -1).any() or \
            np.isin(g_grp[after[after >= 0]], g_grp[after >= 0]).any():
        raise CutimelineError("A replayed gpu row may wait only for an earlier row, "
                              "on a stream whose rows wait for none.")
    return after


def replay_breaks(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
                  covers, engine: str = "numba", *, depth: int = 0, after=None,
                  hold=None, dep=None, ready=None):
    """``replay``'s replayed begins with ``breaks``' (sync_t, jumps) in
    place of the jumps it returns: with Numba the kernel writes the breaks
    as it meets them (in the order ``breaks`` sorts them into), so no row
    gets a jump of its own and nothing is sorted (the what-if replays)."""
    if engine != "numba":
        b_r, jumps, row_j = replay(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin,
                                   g_end, lam, covers, engine, depth=depth, after=after,
                                   hold=hold, dep=dep, ready=ready)
        return (b_r,) + breaks(sb, jumps, g_launch, row_j)
    args = replay_args(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end,
                        lam, covers, depth)
    none = np.zeros(0, np.int64)
    after = none if after is None else _checked_after(after, args[6])
    hold = none if hold is None else as_i64(hold)
    r = replay_nb(*args, hold, after, int(depth), 2, none, none, none,
                  none if dep is None else as_i64(dep), _ready(ready, args[2]))
    jumps = np.zeros(len(r[2]) + 1, np.int64)  # a break per launch into a full queue:
    jumps[1:] = r[2]                            # one copy, not two
    return r[0], r[3], jumps


def replay_args(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
                 covers, depth):
    """``replay``'s arrays as the kernels take them (int64, contiguous),
    the queue depth checked."""
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise CutimelineError(f"The replay's launch queue depth={depth!r} must be an "
                              f"integer ≥ 0 (0: unbounded); CUDA's is about {LAUNCH_QUEUE}.")
    i64 = as_i64
    return (i64(cost_t), i64(cost), i64(sb), i64(se), i64(s_grp), i64(g_launch),
            i64(g_grp), i64(g_begin), i64(g_end), i64(lam),
            np.ascontiguousarray(covers, bool))


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
