"""Overhead compensation: the timeline replayed without the recorder's cost.

The recorder measures what it costs the host per op
(``meta["overhead_ns_per_op"]``) and, on a device, per launch for the two
events around it (``meta["overhead_ns_per_launch"]``). The replay removes
that cost from the host side and lets the GPU work follow:

* host time shrinks by the cost of every op dispatched so far (all threads,
  in time order): a host time t maps to t + Δ(t);
* each gpu row, in launch order, starts at max(its stream's replayed free
  time, replayed launch + λ) with λ the stream's smallest observed launch
  latency, and keeps its duration;
* a host-blocking sync waits for the replayed work it covers (its stream,
  or every stream of its device when device-wide): it returns at
  max(replayed begin, replayed completion) plus the wake-up latency it had
  (end − max(begin, completion) as recorded), and Δ jumps to match.

Not modelled: waits between streams (a row's dependency wait disappears
when its stream frees up earlier), and a host that would run further ahead
without the overhead until some queue limit blocks it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import intervals as iv
from .timeline import NONE, OpFlag, Timeline

__all__ = ["replay", "compensate"]

_FAR_PAST = -(2 ** 62)
_FAR_FUTURE = iv.I64_MAX
_LAUNCH = int(OpFlag.LAUNCH)


@njit(cache=True)
def _replay_nb(op_t, flags, per_op, per_launch, sb, se, s_grp, g_launch, g_grp,
               g_begin, g_end, lam, covers):
    n_op, n_sy, n_g = len(op_t), len(sb), len(g_launch)
    S = len(lam)
    free_r = np.full(S, _FAR_PAST, np.int64)
    free_o = np.full(S, _FAR_PAST, np.int64)
    b_r = np.empty(n_g, np.int64)
    jumps = np.zeros(n_sy + 1, np.int64)
    i = j = k = 0
    removed = jump = 0  # Δ = jump − removed
    while i < n_op or j < n_g or k < n_sy:
        t_op = op_t[i] if i < n_op else _FAR_FUTURE
        t_g = g_launch[j] if j < n_g else _FAR_FUTURE
        t_s = sb[k] if k < n_sy else _FAR_FUTURE
        if t_op <= t_g and t_op <= t_s:  # ties: ops, then launches, then syncs
            removed += per_op + (per_launch if flags[i] & _LAUNCH else 0)
            i += 1
        elif t_g <= t_s:
            s = g_grp[j]
            start = max(free_r[s], g_launch[j] + jump - removed + lam[s])
            b_r[j] = start
            free_r[s] = start + (g_end[j] - g_begin[j])
            free_o[s] = max(free_o[s], g_end[j])
            j += 1
        else:
            c_o = c_r = _FAR_PAST
            for s in range(S):
                if covers[s_grp[k], s]:
                    c_o = max(c_o, free_o[s])
                    c_r = max(c_r, free_r[s])
            wake = max(se[k] - max(sb[k], c_o), 0)
            new_end = max(sb[k] + jump - removed, c_r) + wake
            jump = new_end - se[k] + removed
            jumps[k + 1] = jump
            k += 1
    return b_r, jumps


def _replay_np(op_t, flags, per_op, per_launch, sb, se, s_grp, g_launch, g_grp,
               g_begin, g_end, lam, covers):
    cost = per_op + np.where((flags & _LAUNCH) != 0, per_launch, 0)
    g_dur = g_end - g_begin
    n_g, S = len(g_launch), len(lam)
    removed = np.concatenate([[0], np.cumsum(cost)])
    free_r = np.full(S, _FAR_PAST, np.int64)
    free_o = np.full(S, _FAR_PAST, np.int64)
    b_r = np.empty(n_g, np.int64)
    jumps = np.zeros(len(sb) + 1, np.int64)  # Δ from syncs, after sync k-1
    # gpu rows up to and including sync k's time come before it
    cut = np.searchsorted(g_launch, sb, side="right")
    lo = 0
    for k in range(len(sb) + 1):
        hi = cut[k] if k < len(sb) else n_g
        rows = np.arange(lo, hi)
        delta = jumps[k] - removed[np.searchsorted(op_t, g_launch[rows], side="right")]
        for s in np.unique(g_grp[rows]):
            r = rows[g_grp[rows] == s]
            a = g_launch[r] + delta[g_grp[rows] == s] + lam[s]
            dur = g_dur[r]
            before = np.concatenate([[0], np.cumsum(dur)[:-1]])
            top = np.maximum(np.maximum.accumulate(a - before), free_r[s])
            b_r[r] = top + before  # start = max(previous end, ready)
            free_r[s] = b_r[r[-1]] + dur[-1]
            free_o[s] = max(free_o[s], g_end[r].max())
        if k < len(sb):
            d = jumps[k] - removed[np.searchsorted(op_t, sb[k], side="right")]
            cov = covers[s_grp[k]]
            c_o = free_o[cov].max() if cov.any() else _FAR_PAST
            c_r = free_r[cov].max() if cov.any() else _FAR_PAST
            wake = max(se[k] - max(sb[k], c_o), 0)
            new_d = max(sb[k] + d, c_r) + wake - se[k]
            # from here on Δ = new_d − (ops removed after this sync)
            jumps[k + 1] = new_d + removed[np.searchsorted(op_t, sb[k], side="right")]
        lo = hi
    return b_r, jumps


def replay(op_t, flags, per_op, per_launch, sb, se, s_grp, g_launch, g_grp,
           g_begin, g_end, lam, covers, engine: str = "numba"):
    """The replay of the module doc on plain arrays (ns).

    ``op_t``/``flags``: op begin times (sorted) and flags; each op removes
    ``per_op``, and ``per_launch`` more if it has flag LAUNCH;
    ``sb``/``se``/``s_grp``: syncs sorted by begin, and the row of
    ``covers`` (bool, syncs-kinds × streams) saying which streams each
    waits for; ``g_*``: gpu rows sorted by launch with their stream and
    recorded begin and end; ``lam``: latency per stream. Returns (replayed
    begin of each gpu row, the jump J_k after each sync: see ``shifted``).
    """
    i64 = iv._i64
    args = (i64(op_t), np.ascontiguousarray(flags, np.uint8), np.int64(per_op),
            np.int64(per_launch), i64(sb), i64(se), i64(s_grp), i64(g_launch),
            i64(g_grp), i64(g_begin), i64(g_end), i64(lam),
            np.ascontiguousarray(covers, bool))
    return (_replay_nb if engine == "numba" else _replay_np)(*args)


@njit(cache=True)
def _launches_before_nb(flags, idx):
    """For sorted idx: how many of flags[:idx[q]] have LAUNCH."""
    out = np.empty(len(idx), np.int64)
    c = p = 0
    for q in range(len(idx)):
        while p < idx[q]:
            c += (flags[p] & _LAUNCH) != 0
            p += 1
        out[q] = c
    return out


def shifted(t, comp: dict, engine: str = "numba") -> np.ndarray:
    """Host times t mapped into the replay: t + Δ just before t, where
    Δ = J_k − (cost of the ops begun before t) with k the syncs begun
    before t (an op that begins at t has not yet cost anything at t)."""
    t = np.atleast_1d(np.asarray(t, np.int64))
    i = np.searchsorted(comp["op_t"], t, side="left")
    k = np.searchsorted(comp["sync_t"], t, side="left")
    removed = comp["overhead_ns_per_op"] * i
    if comp["overhead_ns_per_launch"]:
        flags = comp["flags"]
        if engine == "numba":
            o = np.argsort(i, kind="stable")
            before = np.empty(len(i), np.int64)
            before[o] = _launches_before_nb(flags, i[o].astype(np.int64))
        else:
            cum = np.concatenate([[0], np.cumsum((flags & _LAUNCH) != 0)])
            before = cum[i]
        removed = removed + comp["overhead_ns_per_launch"] * before
    return t + comp["jumps"][k] - removed


def compensate(tl: Timeline, ln=None, engine: str = "numba") -> dict | None:
    """Replay ``tl`` without the recorder's overhead (see the module doc).

    ``ln``: the Timeline's ``lanes.Lanes`` (None when it has no gpu rows).
    Returns None when meta holds no measured overhead; else a dict with the
    costs used, what ``shifted`` needs to map host times (``op_t``,
    ``flags``, ``sync_t``, ``jumps``) and, with gpu rows, their replayed
    ``begin_ns``/``end_ns``.
    """
    per_op = tl.meta.get("overhead_ns_per_op")
    if per_op is None:
        return None
    per_launch = tl.meta.get("overhead_ns_per_launch") or 0
    o = tl.ops
    op_t, flags = np.asarray(o.host_begin_ns, np.int64), o.flags
    order = iv.sort_order(op_t, engine)  # ops come in dispatch order: sorted
    if order is not None:
        op_t, flags = op_t[order], flags[order]
    n_launch = int(np.count_nonzero(flags & OpFlag.LAUNCH)) if per_launch else 0
    y = tl.syncs
    sy = np.argsort(y.host_begin_ns, kind="stable")
    if ln is None:
        n_s = 0
        covers = np.zeros((1, 0), bool)
        s_grp = np.zeros(len(sy), np.int64)
        g = dict(g_launch=np.zeros(0), g_grp=np.zeros(0), g_begin=np.zeros(0),
                 g_end=np.zeros(0), lam=np.zeros(0))
        rows = np.zeros(0, np.int64)
    else:
        keys, n_s = ln.stream_keys, len(ln.stream_keys)
        lam = ln.streams.lam
        sid = ln.streams.of_row
        launch = ln.launch if (ln.launch != NONE).all() else \
            np.where(ln.launch != NONE, ln.launch, ln.begin - lam[sid])
        rows = iv.sort_order(launch, engine)
        if rows is None:
            g = dict(g_launch=launch, g_grp=sid, g_begin=ln.begin, g_end=ln.end, lam=lam)
        else:
            g = dict(g_launch=launch[rows], g_grp=sid[rows], g_begin=ln.begin[rows],
                     g_end=ln.end[rows], lam=lam)
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
    b_r, jumps = replay(
        op_t, flags, per_op, per_launch, y.host_begin_ns[sy], y.host_end_ns[sy], s_grp,
        g["g_launch"], g["g_grp"], g["g_begin"], g["g_end"], g["lam"], covers, engine)
    removed = len(op_t) * int(per_op) + n_launch * int(per_launch)
    out = {"overhead_ns_per_op": int(per_op), "overhead_ns_per_launch": int(per_launch),
           "removed_ns": removed, "op_t": op_t, "flags": flags,
           "sync_t": np.asarray(y.host_begin_ns[sy], np.int64), "jumps": jumps}
    if ln is not None:
        if rows is None:
            begin = b_r
        else:
            begin = np.empty(len(rows), np.int64)
            begin[rows] = b_r
        out["begin_ns"] = begin
        out["end_ns"] = begin + (ln.end - ln.begin)
    return out
