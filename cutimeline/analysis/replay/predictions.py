"""Predictions: each fix's replay measured step by step against the same base.

A fix is weighed on the program without the recorder: the *base* is the
recording replayed without the recorder's own host cost (the
``recorder`` edit, where the recording measured it; the recording itself
otherwise, as for an imported trace), and each fix's replay removes the
recorder's cost too (``edits.combined``), so a gain is what the fix saves
of the program's step, not of the recorder's.

Every replay is measured with the recording's steps: a gpu row belongs to
the step whose recorded host window holds its recorded launch, and each
step's device window runs from the end of the previous step's last work
to the end of its own (``steps.device_windows``) on the replay's clock.
Deciding a row's step from its replayed launch instead would move work
between neighbouring steps wherever a fix moves a launch across a step's
replayed begin (a step could read 0 ns and the one before it twice its
length), though the run's time is the same. Busy time is the union of
the kept rows of the report's primary device over each window.

``predict`` ranks the fixes by the mean step time they predict over the
steady-state steps (``steady``: all but the first when there are three
or more): the mean, a run's time per step (when the host runs ahead, the
backlog lands on the last step; a median would miss it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...numeric import intervals as iv
from ...numeric.columns import column_facts
from ...timeline.schema import NONE
from ..idle.steps import device_windows, step_windows
from .edits import EDITS, FIXES, Changes, Edit, EditName, changes, combined, edit_named
from .whatif import apply

__all__ = ["Prediction", "Weighing", "STEP_DTYPE", "predict", "weigh", "steady",
           "base_changes"]

#: per step of a prediction: the base step (without the recorder's cost
#: where it was measured) and the fix's, with their GPU busy fractions
STEP_DTYPE = [("number", np.int64), ("base_ns", np.int64), ("predicted_ns", np.int64),
              ("busy_frac", np.float64), ("predicted_busy_frac", np.float64)]


@dataclass(frozen=True)
class Prediction:
    """One fix's prediction: ``edit``; over the steady-state steps
    (``steady``) the mean base step time (ns: the step without the
    recorder's own cost where it was measured) and the fix's, with their
    GPU busy fractions; ``gain`` (1 − predicted ÷ base: 0.38 is −38 %
    step time); ``steps`` (``STEP_DTYPE``, every step of the report)."""
    edit: Edit
    step_ns: float
    predicted_step_ns: float
    busy_frac: float
    predicted_busy_frac: float
    gain: float
    steps: np.ndarray

    def to_dict(self) -> dict:
        return {"edit": self.edit.name.value, "code": self.edit.code,
                "cause": str(self.edit.cause),
                "complete": self.edit.complete, "step_ns": self.step_ns,
                "predicted_step_ns": self.predicted_step_ns, "busy_frac": self.busy_frac,
                "predicted_busy_frac": self.predicted_busy_frac, "gain": self.gain,
                "steps": [dict(zip(self.steps.dtype.names, r)) for r in self.steps.tolist()]}


def steady(steps: np.ndarray) -> np.ndarray:
    """The steady-state rows of a step table: all but the first (which pays
    for warm-up) when there are three or more. The one definition of
    "steady": the verdicts, the predictions and ``headline.steady`` (the
    summary, the compute line, the integrations) all read it."""
    return steps[1:] if len(steps) >= 3 else steps


def base_changes(rep) -> Changes | None:
    """The recorder's edit on the report's Timeline (its own host cost
    removed), None where the recording did not measure it."""
    return changes(rep.timeline, EDITS[EditName.RECORDER], rep.activity, rep.settings["engine"])


class _Frame:
    """The report's steps as the recording has them: their numbers, host
    windows, and what every replay is measured against (see the module
    doc). Without steps, the report's window is one step."""

    def __init__(self, rep, rows: np.ndarray):
        tl = rep.timeline
        self.rep, self.rows = rep, rows
        self.numbers, self.hb, self.he = step_windows(tl)
        self.stepped = len(rows) > 0 and rows["number"][0] != NONE
        if not self.stepped:
            w0, w1 = rep.window
            self.numbers = np.array([NONE], np.int64)
            self.hb, self.he = np.array([w0], np.int64), np.array([w1], np.int64)
        at = {int(n): i for i, n in enumerate(self.numbers)}
        self.pick = np.array([at.get(int(n), -1) for n in rows["number"]], np.int64)
        ln = rep.lanes
        self.device = int(ln.device_keys[rep.primary])
        self.one_device = len(ln.device_keys) == 1
        # the recorded launches in time order (a recording's are): a subset
        # of them stays so, and the step kernel reads them in place
        self.in_order = column_facts(tl.gpu, "launch_ns", rep.settings["engine"]).sorted

    def measure(self, tl2, keep_g: np.ndarray, move) -> tuple[np.ndarray, np.ndarray]:
        """(duration ns, busy fraction) of each of the report's steps in the
        replay ``tl2`` (its gpu rows: the recording's rows ``keep_g``;
        ``move``: its map of recorded host times, None for the recording)."""
        tl = self.rep.timeline
        engine = self.rep.settings["engine"]
        g, g2 = tl.gpu, tl2.gpu
        b2, e2 = np.asarray(g2.begin_ns, np.int64), np.asarray(g2.end_ns, np.int64)
        e2 = np.maximum(e2, b2)
        if self.stepped:
            _, fb, fe = step_windows(tl2)  # the same spans, in the same order, moved
            launch = np.asarray(g.launch_ns, np.int64)
            if not keep_g.all():
                launch = launch[keep_g]
            w0, w1 = device_windows(launch, b2, e2, self.hb, self.he, fb, fe,
                                    engine=engine, in_order=self.in_order)
        elif self.rep.settings.get("window") == "first to last device activity":
            w0 = np.array([b2.min() if len(b2) else 0], np.int64)
            w1 = np.array([e2.max() if len(e2) else 0], np.int64)
        else:  # the whole window as one step, host time and device work alike
            m0, m1 = (self.hb, self.he) if move is None else (move(self.hb), move(self.he))
            w0 = np.minimum(m0, b2.min()) if len(b2) else m0
            w1 = np.maximum(m1, e2.max()) if len(e2) else m1
        if self.one_device:
            ub, ue = iv.union(b2, e2, engine)
        else:
            mine = np.asarray(g2.device) == self.device
            ub, ue = iv.union(b2[mine], e2[mine], engine)
        busy = iv.coverage(ub, ue, w0, w1, engine)
        dur = np.maximum(w1 - w0, 0)
        pick = self.pick if self.stepped else np.zeros(len(self.rows), np.int64)
        return dur[pick], (busy / np.maximum(dur, 1))[pick]


def _replay(rep, frame: _Frame, ch: Changes | None, edit: Edit):
    """(duration, busy) per step of the replay under ``ch`` (None: the
    recording itself)."""
    tl = rep.timeline
    if ch is None:
        return frame.measure(tl, np.ones(len(tl.gpu), bool), None)
    tl2, keep_g, move = apply(tl, rep.lanes, ch, edit, rep.settings["engine"], lean=True)
    return frame.measure(tl2, keep_g, move)


@dataclass(frozen=True)
class Weighing:
    """The base every fix is weighed against, per step of the report
    (``base_ns``, ``base_busy``: the recording without the recorder's own
    cost where it was measured, else as recorded), and the fixes'
    ``predictions``, ranked by gain."""
    base_ns: np.ndarray
    base_busy: np.ndarray
    predictions: list


def predict(rep, edits=None) -> list[Prediction]:
    """Each fix that applies (default all of ``FIXES``; ``recorder`` may be
    named: it is measured against the recording itself) replayed and
    measured step by step (see the module doc), ranked by gain, largest
    first. Empty for a Timeline without gpu rows."""
    return weigh(rep, edits).predictions


def weigh(rep, edits=None) -> Weighing:
    """``predict``'s predictions with their base (``Weighing``); a
    Timeline without gpu rows has none, and its recorded steps as base."""
    rows = rep.step_rows()
    if rep.lanes is None:
        return Weighing(rows["duration_ns"].astype(np.int64),
                        np.zeros(len(rows)), [])
    frame = _Frame(rep, rows)
    rec = base_changes(rep)
    base = _replay(rep, frame, rec, EDITS[EditName.RECORDER])
    out = []
    for name in (FIXES if edits is None else edits):
        edit = edit_named(name)
        ch = changes(rep.timeline, edit, rep.activity, rep.settings["engine"])
        if ch is None:
            continue
        if edit.name == EditName.RECORDER:
            ref, got = _replay(rep, frame, None, edit), base
        else:
            ref, got = base, _replay(rep, frame, combined(rec, ch), edit)
        out.append(_prediction(edit, rows, ref, got))
    out.sort(key=lambda p: -p.gain)  # stable: ties in EDITS order
    return Weighing(np.asarray(base[0], np.int64), np.asarray(base[1], np.float64), out)


def _prediction(edit: Edit, rows: np.ndarray, ref, got) -> Prediction:
    t = np.zeros(len(rows), STEP_DTYPE)
    t["number"] = rows["number"]
    t["base_ns"], t["busy_frac"] = ref
    t["predicted_ns"], t["predicted_busy_frac"] = got
    st = steady(t)
    step_ns, pred_ns = float(st["base_ns"].mean()), float(st["predicted_ns"].mean())
    return Prediction(edit, step_ns, pred_ns, float(st["busy_frac"].mean()),
                      float(st["predicted_busy_frac"].mean()),
                      1 - pred_ns / step_ns if step_ns > 0 else 0.0, t)
