"""Overhead compensation: the timeline replayed without the recorder's cost.

The recorder measures at start what it costs the host (``selfcost.py``):
per op, from its kinds of arguments, priced per recorded op name and shapes
(``meta["overhead_ns_by_signature"]``, their mean in
``meta["overhead_ns_per_op"]``, the only figure in older files), more in
backward and per module call (``meta["overhead_model"]``), and on a device
per launch for the two events around it (``meta["overhead_ns_per_launch"]``;
``costs`` puts them together). The replay removes that cost from the host
side and lets the GPU work follow:

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
  (end − max(begin, completion) as recorded), and Δ jumps to match.

Not modelled: a host that would run further ahead without the overhead
until some queue limit blocks it, and a wait that the replay would shorten
further (its source moved more than the waiting row's launch did).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numeric import intervals as iv
from ..numeric.ids import dense_ids, hash_slot
from ..timeline.schema import NONE, OpFlag, SpanKind
from ..timeline.timeline import Timeline

__all__ = ["replay", "held", "compensate", "costs", "op_costs", "mix_scale", "repeats",
           "shifted"]

_FAR_PAST = -(2 ** 62)
_FAR_FUTURE = iv.I64_MAX
_LAUNCH = int(OpFlag.LAUNCH)


@njit(cache=True)
def _replay_nb(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold):
    n_op, n_sy, n_g = len(cost_t), len(sb), len(g_launch)
    S = len(lam)
    free_r = np.full(S, _FAR_PAST, np.int64)
    free_o = np.full(S, _FAR_PAST, np.int64)
    b_r = iv.empty_i64(n_g)
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
                d = jump - removed
                start = max(max(free_r[s], g_launch[j] + d + lam[s]), hold[j] + d)
                b_r[j] = start
                free_r[s] = start + (g_end[j] - g_begin[j])
                free_o[s] = max(free_o[s], g_end[j])
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
    return b_r, jumps


def _replay_np(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam,
               covers, hold):
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
        delta = jumps[k] - removed[np.searchsorted(cost_t, g_launch[rows], side="right")]
        for s in np.unique(g_grp[rows]):
            r = rows[g_grp[rows] == s]
            d = delta[g_grp[rows] == s]
            a = np.maximum(g_launch[r] + d + lam[s], hold[r] + d)
            dur = g_dur[r]
            before = np.concatenate([[0], np.cumsum(dur)[:-1]])
            top = np.maximum(np.maximum.accumulate(a - before), free_r[s])
            b_r[r] = top + before  # start = max(previous end, ready)
            free_r[s] = b_r[r[-1]] + dur[-1]
            free_o[s] = max(free_o[s], g_end[r].max())
        if k < len(sb):
            gone = removed[np.searchsorted(cost_t, sb[k], side="right")]
            d = jumps[k] - gone
            cov = covers[s_grp[k]]
            c_o = free_o[cov].max() if cov.any() else _FAR_PAST
            c_r = free_r[cov].max() if cov.any() else _FAR_PAST
            wake = max(se[k] - max(sb[k], c_o), 0)
            new_d = max(sb[k] + d, c_r) + wake - se[k]
            # from here on Δ = new_d − (costs removed after this sync)
            jumps[k + 1] = new_d + gone
        lo = hi
    return b_r, jumps


def replay(cost_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_end, lam, covers,
           engine: str = "numba"):
    """The replay of the module doc on plain arrays (ns).

    ``cost_t``/``cost``: when the recorder spent host time (sorted) and
    how much (an op at its begin, a module hook at its span's bound);
    ``sb``/``se``/``s_grp``: syncs sorted by begin, and the row of
    ``covers`` (bool, syncs-kinds × streams) saying which streams each
    waits for; ``g_*``: gpu rows sorted by launch with their stream and
    recorded begin and end; ``lam``: latency per stream. Returns (replayed
    begin of each gpu row, the jump J_k after each sync: see ``shifted``).
    """
    i64 = iv._i64
    args = (i64(cost_t), i64(cost), i64(sb), i64(se), i64(s_grp), i64(g_launch),
            i64(g_grp), i64(g_begin), i64(g_end), i64(lam),
            np.ascontiguousarray(covers, bool))
    hold = held(*args[5:10], engine=engine)
    return (_replay_nb if engine == "numba" else _replay_np)(*args, hold)


@njit(cache=True)
def _held_nb(g_launch, g_grp, g_begin, g_end, lam):
    hold = iv.empty_i64(len(g_launch))
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
    g_launch, g_grp, g_begin, g_end, lam = (iv._i64(a) for a in
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
    Δ = J_k − (the recorder's cost spent before t) with k the syncs begun
    before t (an op that begins at t has not yet cost anything at t).
    ``engine`` is accepted for symmetry: this is two binary searches."""
    t = np.atleast_1d(np.asarray(t, np.int64))
    i = np.searchsorted(comp["cost_t"], t, side="left")
    k = np.searchsorted(comp["sync_t"], t, side="left")
    return t + comp["jumps"][k] - comp["cost_cum"][i]


REPEAT_WINDOW = 8


def _pair(name, shapes) -> np.ndarray:
    """One int64 key per (name, shapes) pair of string ids (NONE allowed)."""
    return np.asarray(name, np.int64) << 32 | (np.asarray(shapes, np.int64) & 0xFFFFFFFF)


def repeats(keys: np.ndarray, thread: np.ndarray | None = None,
            window: int = REPEAT_WINDOW) -> np.ndarray:
    """Which ops (in dispatch order) have the key (op name and shapes) of
    one of the ``window`` ops before them on their thread: those run the
    recorder's code while the CPU caches still hold it, and cost what the
    start-up model prices; the others cost ``mix_scale`` times that. The
    pure-Python twin is ``selfcost._repeats``."""
    keys = np.asarray(keys, np.int64)
    out = np.zeros(len(keys), bool)
    if thread is not None and len(np.unique(thread)) > 1:
        for t in np.unique(thread):
            sel = np.flatnonzero(thread == t)
            out[sel] = repeats(keys[sel], None, window)
        return out
    for k in range(1, window + 1):
        out[k:] |= keys[k:] == keys[:-k]
    return out


def mix_scale(meta: dict) -> float:
    """What the ops of a real mix that do not ``repeats`` cost over what the
    start-up model prices them at (``selfcost.Program``), measured while recording and at stop
    (``meta["overhead_calibrations"]``, ratios in 1/1000): their median,
    against preemption spikes. 1 when none was measured (files saved
    before the calibrations)."""
    c = np.asarray(meta.get("overhead_calibrations") or [], np.int64).reshape(-1, 3)
    return float(np.median(c[:, 2]) / 1000) if len(c) else 1.0


@njit(cache=True)
def _op_costs_nb(name, shapes, grad_fn, thread, launched, tkeys, tns, per_op, backward_ns,
                 scale, per_launch, window, bits):
    # each distinct (name, shapes) key gets an id in an open-addressing hash
    # of 2^bits slots, as ``ids.dense_ids`` numbers keys, fused here with
    # the pricing (apart, the two cost 3× as much; a binary search of the
    # price table per op is a chain
    # of unpredictable loads: 120 ns an op), with its price and, per
    # thread, the position of its last op there: a repeat within
    # ``window`` is one subtraction. Past half full it gives up (ok False)
    # and the caller comes again with more bits: arrays reassigned inside
    # the loop would cost reference counting at every op.
    n_thread = 1
    for i in range(len(thread)):
        n_thread = max(n_thread, thread[i] + 1)
    cap = 1 << (bits - 1)
    slot_key = np.zeros(1 << bits, np.int64)
    slot_id = np.full(1 << bits, -1, np.int64)
    price = np.empty(cap, np.float64)
    last = np.full((cap, n_thread), -1, np.int64)
    seen = np.zeros(n_thread, np.int64)
    out = iv.empty_i64(len(name))
    n_id = 0
    for r in range(len(tkeys)):  # sorted: a repeated key keeps its first row
        j = hash_slot(slot_key, slot_id, tkeys[r], bits)
        if slot_id[j] < 0:
            if n_id == cap:
                return out, False
            slot_key[j], slot_id[j] = tkeys[r], n_id
            price[n_id] = tns[r]
            n_id += 1
    for i in range(len(name)):
        key = (np.int64(name[i]) << 32) | (np.int64(shapes[i]) & 0xFFFFFFFF)
        j = hash_slot(slot_key, slot_id, key, bits)
        k = slot_id[j]
        if k < 0:  # a key the table does not price
            if n_id == cap:
                return out, False
            k = n_id
            slot_key[j], slot_id[j] = key, k
            price[k] = per_op
            n_id += 1
        c = price[k]
        if grad_fn[i] != NONE:
            c += backward_ns
        th = thread[i]
        p = last[k, th]
        if p < 0 or seen[th] - p > window:  # not among the last ``window``
            c *= scale
        last[k, th] = seen[th]
        seen[th] += 1
        out[i] = np.int64(np.rint(c)) + (per_launch if launched[i] else 0)
    return out, True


def _op_costs_np(name, shapes, grad_fn, thread, launched, tkeys, tns, per_op, backward_ns,
                 scale, per_launch, window):
    pair = _pair(name, shapes)
    cost = np.full(len(name), per_op)
    if len(tkeys):
        at = np.minimum(np.searchsorted(tkeys, pair), len(tkeys) - 1)
        hit = tkeys[at] == pair
        cost[hit] = tns[at[hit]]
    cost += np.where(grad_fn != NONE, backward_ns, 0.0)
    cost *= np.where(repeats(pair, thread, window), 1.0, scale)
    return np.rint(cost).astype(np.int64) + np.where(launched, per_launch, 0)


def op_costs(name, shapes, grad_fn, thread, launched, table: dict | None, per_op: float,
             backward_ns: float = 0.0, scale: float = 1.0, per_launch: int = 0,
             window: int = REPEAT_WINDOW, engine: str = "numba") -> np.ndarray:
    """What the recorder spent on each op (int64 ns): its (name, shapes)
    priced by ``table`` (``{"name", "shapes", "ns"}`` lists; else
    ``per_op``), plus ``backward_ns`` in backward (a grad_fn), times
    ``scale`` unless it ``repeats`` one of the ``window`` ops before it on
    its thread, rounded half to even, plus ``per_launch`` if it launched."""
    def ints(a):  # the kernel reads the columns' own widths (int32): no copies
        a = np.ascontiguousarray(a)
        return a if engine == "numba" and a.dtype.kind in "iu" else iv._i64(a)
    tkeys = _pair(table["name"], table["shapes"]) if table and len(table["ns"]) else \
        np.zeros(0, np.int64)
    tns = np.asarray(table["ns"], np.float64) if len(tkeys) else np.zeros(0)
    order = np.argsort(tkeys, kind="stable")
    tkeys, tns = tkeys[order], tns[order]
    thread = ints(thread)
    args = [ints(name), ints(shapes), ints(grad_fn), thread,
            np.ascontiguousarray(launched, np.bool_), tkeys, tns, float(per_op),
            float(backward_ns), float(scale), int(per_launch), int(window)]
    if engine == "numba":
        if len(thread) and (thread.min() < 0 or thread.max() >= 1 << 12):
            args[3] = thread = dense_ids(thread, engine)[0]  # a last position per thread
        threads = int(thread.max()) + 1 if len(thread) else 1
        bits = max(8, int(4 * len(tkeys)).bit_length())
        # keys × threads last positions: past 2^25 (256 MB) the twin does it
        while threads << (bits - 1) <= 1 << 25:
            out, ok = _op_costs_nb(*args, bits)
            if ok:
                return out
            bits += 2
    return _op_costs_np(*args)


@njit(cache=True)
def _merge2_nb(ta, ca, tb, cb):
    """Two runs sorted by time merged, ties: a first. The runs of a between
    b's few entries are copied in tight loops (a select per row between
    the two runs ran at 12 ns a row)."""
    n, m = len(ta), len(tb)
    t = iv.empty_i64(n + m)
    c = iv.empty_i64(n + m)
    i = o = 0
    for j in range(m):
        while i < n and ta[i] <= tb[j]:
            t[o], c[o] = ta[i], ca[i]
            i += 1
            o += 1
        t[o], c[o] = tb[j], cb[j]
        o += 1
    while i < n:
        t[o], c[o] = ta[i], ca[i]
        i += 1
        o += 1
    return t, c


def costs(tl: Timeline, engine: str = "numba") -> tuple[np.ndarray, np.ndarray] | None:
    """When and how much host time the recorder spent (ns), sorted by time
    (ties in this order): each op at its begin, priced by ``op_costs`` with
    ``meta["overhead_ns_by_signature"]`` (its name and shapes) or else
    ``meta["overhead_ns_per_op"]``, ``overhead_model["backward_ns"]`` in
    backward and ``overhead_ns_per_launch`` if it launched; each module
    call half of ``overhead_model["module_ns"]`` at its MODULE span's begin
    (the pre hook) and half at its end (the post hook). None without a
    measured cost. The model's prices of ops that do not ``repeats`` (and
    of module calls) are multiplied by ``mix_scale``; the time the
    recorder spent re-measuring between steps (``overhead_calibrations``)
    is removed as it was. Timelines saved before the model only have the
    per-op figure."""
    m = tl.meta
    per_op = m.get("overhead_ns_per_op")
    if per_op is None:
        return None
    iv.check_engine(engine)
    o = tl.ops
    model = m.get("overhead_model") or {}
    calibrations = np.asarray(m.get("overhead_calibrations") or [], np.int64).reshape(-1, 3)
    scale = mix_scale(m)
    cost = op_costs(o["name"], o["shapes"], o.grad_fn, o.thread,
                    (o.flags & _LAUNCH) != 0, m.get("overhead_ns_by_signature"),
                    float(per_op), float(model.get("backward_ns") or 0), scale,
                    int(m.get("overhead_ns_per_launch") or 0), engine=engine)
    t = np.asarray(o.host_begin_ns, np.int64)
    more_t, more_c = [], []
    if model.get("module_ns") and len(tl.spans):
        sp = tl.spans
        mod = sp.kind == int(SpanKind.MODULE)
        half = round(model["module_ns"] * scale / 2)
        more_t += [sp.begin_ns[mod], sp.end_ns[mod]]
        more_c.append(np.full(2 * int(mod.sum()), half, np.int64))
    if len(calibrations):  # the re-measurements' own time, all of it
        more_t.append(calibrations[:, 0])
        more_c.append(calibrations[:, 1] - calibrations[:, 0])
    if not more_t:
        order = iv.sort_order(t, engine)
        return (t, cost) if order is None else (t[order], cost[order])
    tb = np.concatenate(more_t).astype(np.int64)
    cb = np.concatenate(more_c).astype(np.int64)
    if engine == "numba" and iv.is_sorted(t, engine):  # one thread: merge the few others in
        order = np.argsort(tb, kind="stable")
        return _merge2_nb(t, cost, tb[order], cb[order])
    t, cost = np.concatenate([t, tb]), np.concatenate([cost, cb])
    order = np.argsort(t, kind="stable")  # ties: ops before module hooks
    return t[order], cost[order]


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
    if ln is None:
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
        cost_t, cost, y.host_begin_ns[sy], y.host_end_ns[sy], s_grp,
        g["g_launch"], g["g_grp"], g["g_begin"], g["g_end"], g["lam"], covers, engine)
    out = {"overhead_ns_per_op": int(tl.meta["overhead_ns_per_op"]),
           "overhead_ns_per_launch": int(per_launch), "removed_ns": int(cost.sum()),
           "mix_scale": mix_scale(tl.meta),
           "cost_t": cost_t, "cost_cum": np.concatenate([[0], np.cumsum(cost)]),
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
