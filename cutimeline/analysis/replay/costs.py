"""Overhead pricing: when and how much host time the recorder spent, per op.

The recorder measures at start what it costs the host (``selfcost.py``):
per op, from its kinds of arguments, priced per recorded op name and shapes
(``meta["overhead_ns_by_signature"]``, their mean in
``meta["overhead_ns_per_op"]``, the only figure in older files), more in
backward and per module call (``meta["overhead_model"]``), and on a device
per launch for the two events around it (``meta["overhead_ns_per_launch"]``).
``costs`` puts them together as a time-sorted series; ``compensation.py``
replays the timeline without it. ``op_costs`` prices the ops in one
Numba pass (a hash table of the priced keys) with a NumPy twin.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric.columns import column_facts
from ...numeric.engines import as_i64, check_engine, empty_i64
from ...numeric.ids import dense_ids, hash_slot
from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from ..thresholds import THRESHOLDS

__all__ = ["costs", "op_costs", "recorder_op_costs", "mix_scale", "repeats", "merge2_nb"]

_LAUNCH = int(OpFlag.LAUNCH)
REPEAT_WINDOW = THRESHOLDS.repeat_window  # why: analysis/thresholds.py


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
                 scale, per_launch, window, n_thread, bits):
    # each distinct (name, shapes) key gets an id in an open-addressing hash
    # of 2^bits slots, as ``ids.dense_ids`` numbers keys, fused here with
    # the pricing (apart, the two cost 3× as much; a binary search of the
    # price table per op is a chain
    # of unpredictable loads: 120 ns an op), with its price and, per
    # thread, the position of its last op there: a repeat within
    # ``window`` is one subtraction. Past half full it gives up (ok False)
    # and the caller comes again with more bits: arrays reassigned inside
    # the loop would cost reference counting at every op. ``n_thread``:
    # more than the largest thread id (the caller knows it: no pass here).
    one = n_thread == 1
    cap = 1 << (bits - 1)
    slot_key = np.zeros(1 << bits, np.int64)
    slot_id = np.full(1 << bits, -1, np.int64)
    price = np.empty(cap, np.float64)
    last = np.full((cap, n_thread), -1, np.int64)
    seen = np.zeros(n_thread, np.int64)
    out = empty_i64(len(name))
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
        th = 0
        at = i  # one thread (the usual case): an op's place on it is its row
        if not one:  # a count per thread, kept in memory: a store and a load per op
            th = thread[i]
            at = seen[th]
            seen[th] += 1
        p = last[k, th]
        if p < 0 or at - p > window:  # not among the last ``window``
            c *= scale
        last[k, th] = at
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
             window: int = REPEAT_WINDOW, engine: str = "numba",
             thread_range: tuple[int, int] | None = None) -> np.ndarray:
    """What the recorder spent on each op (int64 ns): its (name, shapes)
    priced by ``table`` (``{"name", "shapes", "ns"}`` lists; else
    ``per_op``), plus ``backward_ns`` in backward (a grad_fn), times
    ``scale`` unless it ``repeats`` one of the ``window`` ops before it on
    its thread, rounded half to even, plus ``per_launch`` if it launched
    (``launched``: bools, or uint8 flags, nonzero where the op launched).
    ``thread_range``: the least and greatest ``thread``, when known."""
    def ints(a):  # the kernel reads the columns' own widths (int32): no copies
        a = np.ascontiguousarray(a)
        return a if engine == "numba" and a.dtype.kind in "iu" else as_i64(a)
    tkeys = _pair(table["name"], table["shapes"]) if table and len(table["ns"]) else \
        np.zeros(0, np.int64)
    tns = np.asarray(table["ns"], np.float64) if len(tkeys) else np.zeros(0)
    order = np.argsort(tkeys, kind="stable")
    tkeys, tns = tkeys[order], tns[order]
    thread = ints(thread)
    args = [ints(name), ints(shapes), ints(grad_fn), thread,
            _flags(launched), tkeys, tns, float(per_op),
            float(backward_ns), float(scale), int(per_launch), int(window)]
    if engine == "numba":
        lo, hi = (0, 0) if not len(thread) else thread_range if thread_range is not None \
            else (int(thread.min()), int(thread.max()))
        if lo < 0 or hi >= 1 << 12:
            args[3] = thread = dense_ids(thread, engine)[0]  # a last position per thread
            hi = int(thread.max())
        threads = hi + 1
        bits = max(8, int(4 * len(tkeys)).bit_length())
        # keys × threads last positions: past 2^25 (256 MB) the twin does it
        while threads << (bits - 1) <= 1 << 25:
            out, ok = _op_costs_nb(*args, threads, bits)
            if ok:
                return out
            bits += 2
    return _op_costs_np(*args)


def _flags(launched) -> np.ndarray:
    """``launched`` as the kernel reads it: uint8 as it is (``flags &
    LAUNCH``: no bool copy of a column), anything else as bools."""
    a = np.ascontiguousarray(launched)
    return a if a.dtype == np.uint8 else np.ascontiguousarray(a, np.bool_)


@njit(cache=True)
def merge2_nb(ta, ca, tb, cb):
    """Two runs sorted by time merged, ties: a first. The runs of a between
    b's few entries are found by bisection and copied as slices, at memory
    speed, not compared row by row."""
    n, m = len(ta), len(tb)
    t = empty_i64(n + m)
    c = empty_i64(n + m)
    i = o = 0
    for j in range(m + 1):
        k = n if j == m else i + np.searchsorted(ta[i:], tb[j], side="right")
        t[o:o + k - i] = ta[i:k]
        c[o:o + k - i] = ca[i:k]
        o += k - i
        i = k
        if j < m:
            t[o], c[o] = tb[j], cb[j]
            o += 1
    return t, c


def recorder_op_costs(tl: Timeline, engine: str = "numba") -> np.ndarray | None:
    """What the recorder spent on each op of ``tl`` (int64 ns, one per ops
    row), priced as ``costs`` prices them; None without a measured cost.
    The what-if edits that scale an op's host time scale only the rest."""
    m = tl.meta
    if m.get("overhead_ns_per_op") is None:
        return None
    o = tl.ops
    model = m.get("overhead_model") or {}
    f = column_facts(o, "thread", engine)  # remembered: no pass over the threads
    return op_costs(o["name"], o["shapes"], o.grad_fn, o.thread,
                    o.flags & _LAUNCH, m.get("overhead_ns_by_signature"),
                    float(m["overhead_ns_per_op"]), float(model.get("backward_ns") or 0),
                    mix_scale(m), int(m.get("overhead_ns_per_launch") or 0), engine=engine,
                    thread_range=(f.lo, f.hi))


def costs(tl: Timeline, engine: str = "numba", apart: bool = False) -> tuple | None:
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
    per-op figure. ``apart``: (t, cost, t2, cost2), the few module-hook and
    calibration entries (t2, cost2: sorted) apart from the ops' series
    when that is sorted (one thread; else they are in it), for a reader
    that merges them on its way (the replay) instead of a copy of both."""
    m = tl.meta
    per_op = m.get("overhead_ns_per_op")
    if per_op is None:
        return None
    check_engine(engine)
    o = tl.ops
    model = m.get("overhead_model") or {}
    calibrations = np.asarray(m.get("overhead_calibrations") or [], np.int64).reshape(-1, 3)
    scale = mix_scale(m)
    cost = recorder_op_costs(tl, engine)
    t = np.asarray(o.host_begin_ns, np.int64)
    in_order = column_facts(o, "host_begin_ns", engine).sorted  # remembered: no pass
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
    none = () if not apart else (np.zeros(0, np.int64),) * 2
    if not more_t:
        if in_order:
            return (t, cost) + none
        order = np.argsort(t, kind="stable")
        return (t[order], cost[order]) + none
    tb = np.concatenate(more_t).astype(np.int64)
    cb = np.concatenate(more_c).astype(np.int64)
    if engine == "numba" and in_order:  # one thread: merge the few others in
        order = np.argsort(tb, kind="stable")
        if apart:
            return t, cost, tb[order], cb[order]
        return merge2_nb(t, cost, tb[order], cb[order])
    t, cost = np.concatenate([t, tb]), np.concatenate([cost, cb])
    order = np.argsort(t, kind="stable")  # ties: ops before module hooks
    return (t[order], cost[order]) + none
