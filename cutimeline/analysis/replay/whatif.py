"""What if: a Timeline replayed under an edit.

One replay engine serves every edit (``replaying.replay``; its model is
``compensation.py``'s doc); an edit (``edits.py``) changes its inputs:
host time removed at points (the recorder's cost) or over intervals
(fetches, syncs, Python stretches, launch cost), syncs and ops that are
gone. A fetch that waited for a DataLoader worker still waits for the
batch's recorded ready time (``compensation.fetch_waits``) unless the
edit removes it (``data``).

Invariant: the map from recorded to replayed host time stays
non-decreasing (``hostmap.py``). A removed interval [b, e) becomes a
point cost e − b at b (``_costs``), and every host time inside it moves
to e first ("snapped"), so all of it lands on b in the replay.
``replayed`` hands back a Timeline that ``analyze`` and ``plot`` take as
they take a recording (no raw device events: the replay has none);
``predictions.py`` measures replays step by step. The ``copies`` edit
moves gpu rows to a stream of their own (``_side_streams``). Not
modelled: work an edit would move to other devices, and a consumer of a
moved copy other than the first work launched after it on its stream.
"""

from __future__ import annotations


import numpy as np

from ...errors import CutimelineError
from ...numeric.columns import column_facts
from ...numeric.ordering import sort_order
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline
from .compensation import engine_inputs, fetch_waits, kept_waits, launch_queue, with_fetches
from .edits import EDITS, Changes, Edit, EditName, changes, combined, edit_named
from .hostmap import NO_SHIFT, HostShift, moved, snapped
from .replaying import held, replay_breaks

__all__ = ["replayed", "apply", "REPLAY_SETTINGS"]

#: the report settings a replay is analysed with (as the recording was)
REPLAY_SETTINGS = ("engine", "gpu_bound_at", "sync_slack_ns", "host_gap_ns", "mixed_margin")

STEP_DTYPE = [("number", np.int64), ("recorded_ns", np.int64), ("predicted_ns", np.int64),
              ("busy_frac", np.float64), ("predicted_busy_frac", np.float64)]
_OVERHEAD_KEYS = ("overhead_ns_per_op", "overhead_ns_per_launch", "overhead_ns_by_signature",
                  "overhead_model", "overhead_calibrations")


_snap = snapped  # host times inside a removed interval [b, e) moved to its e


def replayed(rep, edit: str | Edit, engine: str | None = None) -> Timeline:
    """The report's Timeline replayed under ``edit`` (a name of
    ``edits.EDITS``); a fix without the recorder's own cost too, where the
    recording measured it (as ``predictions`` weighs it). Raises a CutimelineError when the edit does
    not apply (nothing it would remove) or the Timeline has no gpu rows."""
    edit = edit_named(edit)
    tl, ln = rep.timeline, rep.lanes
    engine = engine or rep.settings["engine"]
    if ln is None:
        raise CutimelineError("A what-if replay needs gpu rows, and this Timeline has "
                              "none; record on a GPU or a ctl.SimGPU() to get them.")
    ch = changes(tl, edit, rep.activity, engine)
    if ch is None:
        raise CutimelineError(f"The what-if edit {edit.name.value!r} does not apply to "
                              f"this Timeline: there is nothing it would remove.")
    if edit.name != EditName.RECORDER:  # a fix is judged on the program without the recorder
        ch = combined(changes(tl, EDITS[EditName.RECORDER], rep.activity, engine), ch)
    return apply(tl, ln, ch, edit, engine)


def apply(tl: Timeline, ln, ch: Changes, edit: Edit, engine: str, lean: bool = False):
    """The Timeline replayed under ``ch``. ``lean`` (``predictions``'):
    only its gpu rows' begin and end and its spans move (moving the other
    host columns is most of a replay's cost, and a prediction reads only
    those), and (Timeline, which of the recording's gpu rows it kept, the
    replay's map of recorded host times) comes back."""
    o, g, y, s = tl.ops, tl.gpu, tl.syncs, tl.spans
    cost_t, cost = _costs(ch, engine)

    def snap(t):
        return _snap(t, ch.cut_b, ch.cut_e)

    keep_y = ~ch.drop_syncs
    sy = np.flatnonzero(keep_y)
    sb, se = snap(y.host_begin_ns[sy]), snap(y.host_end_ns[sy])
    sy = sy[np.argsort(sb, kind="stable")]
    sb, se = snap(y.host_begin_ns[sy]), snap(y.host_end_ns[sy])
    keep_g = np.ones(len(g), bool)   # a trace may hold GPU rows but no ops
    if ch.drop_ops.any():
        keep_g[g.op != NONE] = ~ch.drop_ops[g.op[g.op != NONE]]
    # NONE stays NONE; without cuts the snap changes nothing
    launch = moved(ln.launch, ch.cut_b, ch.cut_e, NO_SHIFT, engine, keep_none=True) \
        if len(ch.cut_b) else ln.launch
    rows, gi, s_grp, covers = engine_inputs(tl, ln, sy, keep=keep_g, launch=launch,
                                            engine=engine)
    lam, grp = gi["lam"], gi["g_grp"]
    # the fetches that waited for workers, but those the edit removes
    fb, fe, fr = fetch_waits(tl)
    fb, fe = snap(fb), snap(fe)
    kept = fe > fb
    sb, se, s_grp, covers, ready = with_fetches(sb, se, s_grp, covers,
                                                (fb[kept], fe[kept], fr[kept]))
    hold, dep = kept_waits(ln, gi, engine)
    if hold is None:  # one stream: the kernel would find these itself
        hold = held(gi["g_launch"], grp, gi["g_begin"], gi["g_end"], lam, engine)
    after, g_end = None, gi["g_end"]
    if ch.gpu_scale is not None:  # the GPU-side edits: the work itself shorter
        # (the waits above are read from the recorded times, as they were)
        scale = ch.gpu_scale if rows is None else ch.gpu_scale[rows]
        g_end = gi["g_begin"] + np.round((g_end - gi["g_begin"]) * scale).astype(np.int64)
    at = slice(None) if rows is None else rows  # None: every row, in launch order
    if ch.side_ops is not None and len(g):
        side = (g.op[at] != NONE) & ch.side_ops[np.maximum(g.op[at], 0)]
        if side.any():
            grp, lam, covers, hold, after = _side_streams(side, grp, lam, covers, hold)
            if dep is not None:  # the moved rows keep no wait: nor one on another row
                dep = np.where(side, -1, dep)
            g_end = _device_part(o, g.op[at], side, gi["g_begin"], g_end)
    # the jumps' breaks as the replay meets them (no table of a row each, no sort)
    b_r, sync_t, jumps = replay_breaks(cost_t, cost, sb, se, s_grp, gi["g_launch"], grp,
                                       gi["g_begin"], g_end, lam, covers, engine,
                                       depth=launch_queue(tl), after=after, hold=hold,
                                       dep=dep, ready=ready)
    cum = np.zeros(len(cost) + 1, np.int64)  # one pass, no concatenated copy
    np.cumsum(cost, out=cum[1:])
    shift = HostShift(cost_t, cum, sync_t, jumps)

    def move(t, keep_none=False):
        return moved(t, ch.cut_b, ch.cut_e, shift, engine, keep_none)

    if rows is None:  # the replay's begins are the column (a fresh array)
        begin = b_r
    else:
        begin = np.asarray(ln.begin, np.int64).copy()
        begin[rows] = b_r
    end = ln.end - ln.begin  # in place: one fresh array, not two
    if ch.gpu_scale is not None:
        end = np.round(end * ch.gpu_scale).astype(np.int64)
    end += begin
    stream = g.stream
    if after is not None:  # the moved rows on streams of their own
        moved_g = np.zeros(len(g), bool)
        moved_g[at] = grp >= len(gi["lam"])
        end[at] = np.where(moved_g[at], b_r + (g_end - gi["g_begin"]), end[at])
        stream = np.where(moved_g, g.stream + int(g.stream.max()) + 1, g.stream)
    if lean:  # what a prediction reads: the rows' times and the step spans
        # (no events: a row keeps no reference to the events the replay drops)
        g2 = g.replace(begin_ns=begin, end_ns=end, stream=stream,
                       begin_event=_nones(g, "begin_event", engine),
                       end_event=_nones(g, "end_event", engine))
        ops, y2 = o, y.replace(last_event=_nones(y, "last_event", engine))
    else:
        g2 = g.replace(begin_ns=begin, end_ns=end, stream=stream,
                       begin_event=_nones(g, "begin_event", engine),
                       end_event=_nones(g, "end_event", engine),
                       launch_ns=move(g.launch_ns, keep_none=True))
        y2 = y.replace(host_begin_ns=move(y.host_begin_ns), host_end_ns=move(y.host_end_ns),
                       last_event=_nones(y, "last_event", engine))
        ops = o.replace(host_begin_ns=move(o.host_begin_ns), host_end_ns=move(o.host_end_ns))
    out = tl.replace(
        ops=ops, gpu=g2, syncs=y2,
        spans=s.replace(begin_ns=move(s.begin_ns), end_ns=move(s.end_ns)))
    meta = {k: v for k, v in tl.meta.items() if k not in _OVERHEAD_KEYS}
    meta.update(aligned=True, what_if=edit.name.value, what_if_code=edit.code)
    keep = {"ops": ~ch.drop_ops, "gpu": keep_g, "syncs": keep_y,
            "events": np.zeros(len(tl.events), bool), "truth": np.zeros(len(tl.truth), bool)}
    # a table that keeps every row is not copied: ``_take`` keeps a table it
    # is not given whole, unless it refers to one that loses rows, which is
    # then the same mask (a gone op's rows); its references stay as they are
    out = out._take({k: m for k, m in keep.items() if not m.all()}, meta)
    return (out, keep_g, move) if lean else out


def _costs(ch: Changes, engine: str) -> tuple[np.ndarray, np.ndarray]:
    """The edit's point costs and its cuts as point costs (e − b at b), by
    time (stable: a point cost before a cut at its time). An edit has one
    kind or the other, each sorted already: then no copy and no sort."""
    if not len(ch.cut_b) or not len(ch.cost_t):
        cost_t, cost = (ch.cost_t, ch.cost) if len(ch.cost_t) else \
            (ch.cut_b, ch.cut_e - ch.cut_b)
        cost_t, cost = np.asarray(cost_t, np.int64), np.asarray(cost, np.int64)
    else:
        cost_t = np.concatenate([ch.cost_t, ch.cut_b]).astype(np.int64)
        cost = np.concatenate([ch.cost, ch.cut_e - ch.cut_b]).astype(np.int64)
    order = sort_order(cost_t, engine)
    return (cost_t, cost) if order is None else (cost_t[order], cost[order])


def _nones(t, col: str, engine: str) -> np.ndarray:
    """Column ``col`` of table ``t`` all NONE (a replay has no events):
    the column itself when it is (its facts, remembered), else one array
    the table remembers, read-only: each edit's replay shares it instead
    of filling 8 bytes a row anew (fresh pages cost more than the fill)."""
    if not len(t):
        return t[col]
    f = column_facts(t, col, engine)
    if f.lo == f.hi == NONE:
        return t[col]

    def fill(c):
        x = np.full(len(c), NONE, c.dtype)
        x.flags.writeable = False
        return x
    return t.remember(col, "all NONE", fill)


def _side_streams(side, grp, lam, covers, hold):
    """The replay's inputs with the gpu rows ``side`` (launch order) on a
    stream of their own beside each of theirs (group S + s: its latency, and
    the syncs that covered s cover it), no longer held by what they waited
    for as recorded (their stream's compute, which they now overlap), and
    the first other row of their stream after a run of them waiting for the
    last of the run: the compute that consumes a copy waits for it."""
    S = len(lam)
    after = np.full(len(grp), -1, np.int64)
    for s in np.unique(grp[side]):
        r = np.flatnonzero(grp == s)
        k = np.flatnonzero(~side[r][1:] & side[r][:-1]) + 1
        after[r[k]] = r[k - 1]
    hold = hold.copy()
    hold[side] = -(2 ** 62)
    return (np.where(side, grp + S, grp), np.concatenate([lam, lam]),
            np.concatenate([covers, covers], axis=1), hold, after)


def _device_part(o, op, side, g_begin, g_end):
    """The ends of gpu rows (launch order) with the rows ``side`` cut to
    their device work: less the part of the row inside its op's host
    interval. A copy's events bracket its call, so the row of one that the
    host staged (pageable memory) or waited for spans that host time; the
    work a call enqueues starts when it returns. On hardware a pinned
    transfer still takes bytes ÷ PCIe bandwidth, which a Timeline does not
    hold: the prediction is good while that stays under the compute it
    now overlaps."""
    op = np.maximum(op, 0)
    ob, oe = o.host_begin_ns[op], o.host_end_ns[op]
    inside = np.maximum(np.minimum(g_end, oe) - np.maximum(g_begin, ob), 0)
    return np.where(side, g_begin + np.maximum(g_end - g_begin - inside, 0), g_end)
