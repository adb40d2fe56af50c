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
recorded ones. Not modelled: launch queues that fill (the host blocks at
about 1,024 pending launches in CUDA; a replay that lets the host run that
far ahead overstates its lead, not the step time), and work that an edit
would move to other streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .compensation import engine_inputs, replay, shifted
from .whatif_edits import EDITS, Changes, Edit, changes, edit_named

__all__ = ["replayed", "predict", "Prediction", "STEP_DTYPE", "steady"]

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
    keep_g = ~((g.op != NONE) & ch.drop_ops[np.maximum(g.op, 0)]) if len(g) else \
        np.zeros(0, bool)
    launch = np.where(ln.launch != NONE, snap(ln.launch), NONE)
    rows, gi, s_grp, covers = engine_inputs(tl, ln, sy, keep=keep_g, launch=launch,
                                            engine=engine)
    b_r, jumps = replay(cost_t, cost, sb, se, s_grp, gi["g_launch"], gi["g_grp"],
                        gi["g_begin"], gi["g_end"], gi["lam"], covers, engine)
    comp = {"cost_t": cost_t, "cost_cum": np.concatenate([[0], np.cumsum(cost)]),
            "sync_t": sb, "jumps": jumps}

    def move(t):
        t = np.asarray(t, np.int64)
        return shifted(snap(t), comp) if len(t) else t

    begin = np.asarray(ln.begin, np.int64).copy()
    begin[rows] = b_r
    end = begin + (ln.end - ln.begin)
    g2 = g.replace(begin_ns=begin, end_ns=end, begin_event=np.full(len(g), NONE),
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
    opts = {k: rep.settings[k] for k in ("engine", "gpu_bound_at", "sync_slack_ns",
                                         "host_gap_ns", "mixed_margin")}
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
