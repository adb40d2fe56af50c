"""What if: a Timeline replayed under an edit, and the step times it predicts.

One replay engine serves every edit (``compensation.replay``, a Numba
kernel with its NumPy twin): host time flows as recorded less what the
edit removes; each gpu row, in launch order, starts at the later of its
stream's replayed free time and its replayed launch + λ, and no earlier
than a wait on another stream it had as recorded (shifted as its launch
was); a host-blocking sync returns when the replayed work it covers is
done. An edit (``whatif_edits.py``) changes the inputs: host time removed
at points (the recorder's cost) or over intervals (fetches, syncs, Python
stretches, launch cost), syncs and ops that are gone.

A removed interval [b, e) becomes a point cost e − b at b, and every host
time inside it moves to e first ("snapped"): so all of it lands on b in
the replay, and the map from recorded to replayed host time stays
non-decreasing. ``replayed`` applies the map to every host column and
hands back a Timeline that ``analyze`` and ``plot`` take as they take a
recording (raw device events are not carried: the replay has none).
``predict`` analyses each edit's replay and sets its steps beside the
recorded ones. A launch into a full queue (``meta["launch_queue"]``
pending rows on its stream, CUDA's 1,024 by default) holds the host until
the oldest ends, as in ``compensation``. The ``copies`` edit moves gpu
rows to a stream of their own beside theirs (``_side_streams``). Not
modelled: work that an edit would move to other devices, and a consumer
of a moved copy other than the first work launched after it on its stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .compensation import engine_inputs, held, launch_queue, shifted
from .replaying import replay_breaks
from .whatif_edits import EDITS, Changes, Edit, changes, edit_named

__all__ = ["replayed", "predict", "Prediction", "STEP_DTYPE", "steady", "REPLAY_SETTINGS"]

#: the report settings a replay is analysed with (as the recording was)
REPLAY_SETTINGS = ("engine", "gpu_bound_at", "sync_slack_ns", "host_gap_ns", "mixed_margin")

STEP_DTYPE = [("number", np.int64), ("recorded_ns", np.int64), ("predicted_ns", np.int64),
              ("busy_frac", np.float64), ("predicted_busy_frac", np.float64)]
_OVERHEAD_KEYS = ("overhead_ns_per_op", "overhead_ns_per_launch", "overhead_ns_by_signature",
                  "overhead_model", "overhead_calibrations")


def _snap(t: np.ndarray, cut_b: np.ndarray, cut_e: np.ndarray) -> np.ndarray:
    """Host times inside a removed interval [b, e) moved to its e."""
    t = np.asarray(t, np.int64)
    if not len(cut_b):
        return t
    i = np.searchsorted(cut_b, t, side="right") - 1
    inside = (i >= 0) & (t < cut_e[np.maximum(i, 0)])
    return np.where(inside, cut_e[np.maximum(i, 0)], t)


def replayed(rep, edit: str | Edit, engine: str | None = None) -> Timeline:
    """The report's Timeline replayed under ``edit`` (a name of
    ``whatif_edits.EDITS``). Raises a CutimelineError when the edit does
    not apply (nothing it would remove) or the Timeline has no gpu rows."""
    edit = edit_named(edit)
    tl, ln = rep.timeline, rep.lanes
    engine = engine or rep.settings["engine"]
    if ln is None:
        raise CutimelineError("A what-if replay needs gpu rows, and this Timeline has "
                              "none; record on a GPU or a ctl.SimGPU() to get them.")
    ch = changes(tl, edit, rep.activity, engine)
    if ch is None:
        raise CutimelineError(f"The what-if edit {edit.name!r} does not apply to this "
                              f"Timeline: there is nothing it would remove.")
    return _apply(tl, ln, ch, edit, engine)


def _apply(tl: Timeline, ln, ch: Changes, edit: Edit, engine: str) -> Timeline:
    o, g, y, s = tl.ops, tl.gpu, tl.syncs, tl.spans
    cost_t = np.concatenate([ch.cost_t, ch.cut_b]).astype(np.int64)
    cost = np.concatenate([ch.cost, ch.cut_e - ch.cut_b]).astype(np.int64)
    order = np.argsort(cost_t, kind="stable")
    cost_t, cost = cost_t[order], cost[order]

    def snap(t):
        return _snap(t, ch.cut_b, ch.cut_e)

    keep_y = ~ch.drop_syncs
    sy = np.flatnonzero(keep_y)
    sb, se = snap(y.host_begin_ns[sy]), snap(y.host_end_ns[sy])
    sy = sy[np.argsort(sb, kind="stable")]
    sb, se = snap(y.host_begin_ns[sy]), snap(y.host_end_ns[sy])
    keep_g = np.ones(len(g), bool)   # a trace may hold GPU rows but no ops
    keep_g[g.op != NONE] = ~ch.drop_ops[g.op[g.op != NONE]]
    launch = np.where(ln.launch != NONE, snap(ln.launch), NONE)
    rows, gi, s_grp, covers = engine_inputs(tl, ln, sy, keep=keep_g, launch=launch,
                                            engine=engine)
    lam, grp = gi["lam"], gi["g_grp"]
    hold = held(gi["g_launch"], grp, gi["g_begin"], gi["g_end"], lam, engine)
    after, g_end = None, gi["g_end"]
    if ch.side_ops is not None and len(g):
        side = (g.op[rows] != NONE) & ch.side_ops[np.maximum(g.op[rows], 0)]
        if side.any():
            grp, lam, covers, hold, after = _side_streams(side, grp, lam, covers, hold)
            g_end = _device_part(o, g.op[rows], side, gi["g_begin"], g_end)
    # the jumps' breaks as the replay meets them (no table of a row each, no sort)
    b_r, sync_t, jumps = replay_breaks(cost_t, cost, sb, se, s_grp, gi["g_launch"], grp,
                                       gi["g_begin"], g_end, lam, covers, engine,
                                       depth=launch_queue(tl), after=after, hold=hold)
    comp = {"cost_t": cost_t, "cost_cum": np.concatenate([[0], np.cumsum(cost)]),
            "sync_t": sync_t, "jumps": jumps}

    def move(t):
        t = np.asarray(t, np.int64)
        return shifted(snap(t), comp) if len(t) else t

    begin = np.asarray(ln.begin, np.int64).copy()
    begin[rows] = b_r
    end = begin + (ln.end - ln.begin)
    stream = g.stream
    if after is not None:  # the moved rows on streams of their own
        moved_g = np.zeros(len(g), bool)
        moved_g[rows] = grp >= len(gi["lam"])
        end[rows] = np.where(moved_g[rows], b_r + (g_end - gi["g_begin"]), end[rows])
        stream = np.where(moved_g, g.stream + int(g.stream.max()) + 1, g.stream)
    g2 = g.replace(begin_ns=begin, end_ns=end, stream=stream,
                   begin_event=np.full(len(g), NONE),
                   end_event=np.full(len(g), NONE),
                   launch_ns=np.where(g.launch_ns != NONE, move(g.launch_ns), NONE))
    y2 = y.replace(host_begin_ns=move(y.host_begin_ns), host_end_ns=move(y.host_end_ns),
                   last_event=np.full(len(y), NONE))
    moved = tl.replace(
        ops=o.replace(host_begin_ns=move(o.host_begin_ns), host_end_ns=move(o.host_end_ns)),
        gpu=g2, syncs=y2,
        spans=s.replace(begin_ns=move(s.begin_ns), end_ns=move(s.end_ns)))
    meta = {k: v for k, v in tl.meta.items() if k not in _OVERHEAD_KEYS}
    meta.update(aligned=True, what_if=edit.name, what_if_code=edit.code)
    keep = {"ops": ~ch.drop_ops, "gpu": keep_g, "syncs": keep_y,
            "spans": np.ones(len(s), bool), "events": np.zeros(len(tl.events), bool),
            "truth": np.zeros(len(tl.truth), bool)}
    return moved._take(keep, meta)


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


@dataclass(frozen=True)
class Prediction:
    """One edit's prediction: ``edit``; over the steady-state steps (all
    but the first when there are three or more; ``steady``) the mean
    recorded and predicted step time (ns) and GPU busy fractions;
    ``gain`` (1 − predicted ÷ recorded: 0.38 is −38 % step time); ``steps``
    (``STEP_DTYPE``, every step of the report)."""
    edit: Edit
    step_ns: float
    predicted_step_ns: float
    busy_frac: float
    predicted_busy_frac: float
    gain: float
    steps: np.ndarray

    def to_dict(self) -> dict:
        return {"edit": self.edit.name, "code": self.edit.code, "cause": self.edit.cause,
                "step_ns": self.step_ns, "predicted_step_ns": self.predicted_step_ns,
                "busy_frac": self.busy_frac, "predicted_busy_frac": self.predicted_busy_frac,
                "gain": self.gain,
                "steps": [dict(zip(self.steps.dtype.names, r)) for r in self.steps.tolist()]}


def steady(steps: np.ndarray) -> np.ndarray:
    """The steady-state rows of a step table: all but the first (which pays
    for warm-up) when there are three or more."""
    return steps[1:] if len(steps) >= 3 else steps


def predict(rep, analyze, edits=None) -> list[Prediction]:
    """Each edit that applies (default all of ``EDITS``) replayed and
    analysed by ``analyze`` (``ctl.analyze``, passed in: the analyzer
    imports this module's callers) with the report's settings; ranked by
    gain, largest first. Empty for a Timeline without gpu rows."""
    if rep.lanes is None:
        return []
    rec = rep.steps if len(rep.steps) else np.array([rep.overall])
    opts = {k: rep.settings[k] for k in REPLAY_SETTINGS}
    out = []
    for name in (EDITS if edits is None else edits):
        edit = edit_named(name)
        ch = changes(rep.timeline, edit, rep.activity, opts["engine"])
        if ch is None:
            continue
        tl2 = _apply(rep.timeline, rep.lanes, ch, edit, opts["engine"])
        new = analyze(tl2, **opts)
        got = new.steps if len(rep.steps) else np.array([new.overall])
        t = np.zeros(len(rec), STEP_DTYPE)
        t["number"], t["recorded_ns"], t["busy_frac"] = \
            rec["number"], rec["duration_ns"], rec["busy_frac"]
        at = {int(n): i for i, n in enumerate(got["number"])}
        idx = np.array([at.get(int(n), -1) for n in rec["number"]], np.int64)
        if (idx < 0).any():  # the replay lost a step: cannot say
            continue
        t["predicted_ns"], t["predicted_busy_frac"] = \
            got["duration_ns"][idx], got["busy_frac"][idx]
        st = steady(t)
        # the mean: a run's time per step. When the host runs ahead, the
        # steps' device windows follow its cadence and the backlog lands on
        # the last one; a median would miss it.
        step_ns, pred_ns = float(st["recorded_ns"].mean()), float(st["predicted_ns"].mean())
        out.append(Prediction(edit, step_ns, pred_ns, float(st["busy_frac"].mean()),
                              float(st["predicted_busy_frac"].mean()),
                              1 - pred_ns / step_ns if step_ns > 0 else 0.0, t))
    out.sort(key=lambda p: -p.gain)  # stable: ties in EDITS order
    return out
