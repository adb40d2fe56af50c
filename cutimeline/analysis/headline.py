"""The run's answer in words: its verdict, the fix that gains most, and the
evidence, said the same way on every surface.

``headline`` turns the run's ``Judgement`` (``verdicts/causal.py``: the
bottleneck whose removal gains most over the steady-state steps) into
the words that ``summary()``'s first line, the figure's title, the
reports' reprs, ``to_dict()``, the command line and the demo all print:
the verdict, the change to make first with its predicted gain and step
times, the source line of the syncs or fetches it names, what a sync
exposes, and the idle time by cause as evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..text import fmt_ns, pct
from .advice import ADVICE, host_only_advice
from .idle.gaps import CauseName
from .replay.gpuwork import gpu_time_words
from .replay.predictions import steady as steady_rows
from .tables.sources import counted, wait_lines
from .verdicts.causal import BOUNDS, MIN_GAIN, Bottleneck, Judgement
from .verdicts.margins import VERDICT_CAUSES, Verdict

if TYPE_CHECKING:
    from .report import Report

__all__ = ["headline", "steady"]

#: what a bound class's time is, and what removing it would take
_BOUND_WORDS = {Bottleneck.DEPENDENCY: ("queued work waiting on other streams or events",
                                         "overlapping the streams"),
                Bottleneck.COMMUNICATION: ("collectives running with no compute beside them",
                                           "overlapping communication with compute"),
                Bottleneck.UNKNOWN: ("idle time of unknown cause (the trace lacks launch "
                                     "times)", "a trace with launch times to tell")}
#: the idle cause a class's fix addresses, where its syncs or fetches are quoted
_CLASS_CAUSE = {Bottleneck.INPUT: CauseName.DATA, Bottleneck.SYNC: CauseName.SYNC,
                Bottleneck.HOST: CauseName.HOST, Bottleneck.LAUNCH: CauseName.LAUNCH}


def steady(rep: Report) -> tuple[np.ndarray, str]:
    """The steady-state steps (``predictions.steady``'s rule, the one
    definition: all but the first when there are three or more; the window
    as one row without steps) and which they are, in words."""
    s = rep.steps if len(rep.steps) else np.array([rep.overall])
    part = steady_rows(s)
    numbers = part["number"]
    if numbers[0] == -1:
        which = "the whole window (no steps)"
    elif len(part) < len(s):
        which = f"steps {numbers[0]}–{numbers[-1]}, all but the first"
    else:
        which = f"step {numbers[0]}" if len(part) == 1 else \
            f"steps {numbers[0]}–{numbers[-1]}"
    return part, which


def headline(rep: Report) -> dict:
    """The run's verdict in words: ``verdict``; ``text`` (the sentence:
    the fix that gains most with its predicted gain, or why nothing on the
    host side would help); ``steps`` (which, in words); ``change`` (the
    change in code to make first, "" for none); ``fix``/``second``
    (``Prediction.to_dict()`` of the fix and the runner-up, without their
    per-step rows; None where there is none); ``gain``; ``busy`` (the
    GPU's computing share without the recorder); ``exposes`` (the cause a
    sync exposes, ""); ``evidence`` (GPU idle time by cause over those
    steps, ns); ``short`` (a few words for a figure)."""
    j = rep.judgement
    part, which = steady(rep)
    idle = {c: int(part[f"{c}_ns"].sum()) for c in VERDICT_CAUSES if f"{c}_ns" in
            part.dtype.names}
    if not idle.get("communication"):  # no collectives alone: idle causes only
        idle.pop("communication", None)
    preds = {p.edit.name: p for p in rep.what_if()}
    fix, second = preds.get(j.fix), preds.get(j.second_fix)
    exposes = str(j.exposes)  # the word, "" for none
    text = _sentence(rep, j, part, fix, second, idle, exposes)
    change = host_only_advice(rep.timeline.meta) if j.verdict == Verdict.HOST_ONLY \
        else _change(j, fix, second)
    return {"verdict": j.verdict.value, "text": text, "steps": which, "change": change,
            "fix": _brief(fix) if j.verdict not in (Verdict.GPU_BOUND, Verdict.HOST_ONLY)
            or _gpu_fix(j, fix) else None,
            "second": _brief(second), "gain": float(j.gain) if fix is not None or
            j.fix in BOUNDS else 0.0, "busy": float(j.busy), "exposes": exposes,
            "evidence": idle, "short": _short(j, fix)}


def _change(j: Judgement, fix, second) -> str:
    """The change in code to make first: the verdict's fix (both, for
    "mixed"); the verdict's advice where no replayed fix names it (GPU-,
    dependency-, communication-bound, host-only); none for "unknown",
    where the replay finds nothing worth changing."""
    if j.verdict == Verdict.UNKNOWN:
        return ADVICE[Verdict.UNKNOWN] if j.fix == Bottleneck.UNKNOWN else ""
    if _gpu_fix(j, fix):
        return fix.edit.code
    if j.verdict in (Verdict.GPU_BOUND, Verdict.HOST_ONLY) or fix is None:
        return ADVICE.get(j.verdict, "")
    if j.verdict == Verdict.MIXED and second is not None:
        return f"{fix.edit.code}; or {second.edit.code}"
    return fix.edit.code


def _gpu_fix(j: Judgement, fix) -> bool:
    """A GPU-bound verdict that names a GPU-side fix (``replay/gpuside.py``)."""
    return j.verdict == Verdict.GPU_BOUND and fix is not None and j.top == Bottleneck.GPU \
        and j.gain >= MIN_GAIN


def _brief(p) -> dict | None:
    if p is None:
        return None
    d = p.to_dict()
    d.pop("steps")
    return d


def _sentence(rep: Report, j: Judgement, part: np.ndarray, fix, second, idle: dict,
              exposes: str) -> str:
    v = j.verdict
    total = sum(idle.values())
    if v == Verdict.HOST_ONLY:
        return "host-only — " + ("no work reached the simulated device: the tensors are "
                                 "on the CPU" if rep.timeline.meta.get("simulated") else
                                 "no GPU work recorded")
    if _gpu_fix(j, fix):
        where = gpu_time_words(rep.timeline, part["host_begin_ns"], part["host_end_ns"])
        return (f"GPU-bound — {fix.edit.remedy} would save a predicted {pct(fix.gain)} of "
                f"the step ({fmt_ns(fix.step_ns)} → {fmt_ns(fix.predicted_step_ns)})"
                + (f": {where}" if where else "")
                + (f". Next: {_gain_words(second, j, True)}"
                   if second is not None and j.second_gain >= 0.01 else ""))
    if v == Verdict.GPU_BOUND:
        best = f" (the most: {_gain_words(fix)})" if fix is not None and \
            j.gain >= 0.005 else ""
        return (f"GPU-bound — the GPU computes {pct(j.busy)} of the step and no "
                f"change on the host side is predicted to save "
                f"{pct(1 - rep.settings['gpu_bound_at'])} of it{best}")
    if v == Verdict.MIXED:
        return (f"mixed — two fixes gain about as much: {_gain_words(fix, j)} and "
                f"{_gain_words(second, j, True)}")
    if j.fix in BOUNDS:
        what, how = _BOUND_WORDS[j.fix]
        return (f"{v} — {pct(j.gain)} of the step is {what}: {how} could save up to "
                f"that much")
    if v == Verdict.UNKNOWN:
        shares = ", ".join(f"{c} {pct(v / total)}" for c, v in
                           sorted(idle.items(), key=lambda kv: -kv[1])[:3] if v > 0)
        return (f"unknown — the GPU computes {pct(j.busy)} of the step, and no fix the "
                f"replay knows saves {pct(MIN_GAIN)} of it"
                + (f" (its idle time: {shares})" if shares else ""))
    text = f"{v} — {fix.edit.remedy} would save a predicted " \
        f"{pct(fix.gain)} of the step ({fmt_ns(fix.step_ns)} → " \
        f"{fmt_ns(fix.predicted_step_ns)})"
    text += _quoted(rep, part, _CLASS_CAUSE.get(j.top, ""))
    if exposes:
        cause = _CLASS_CAUSE[exposes]
        what = "DataLoader fetches" if cause == CauseName.DATA else "host's Python"
        where = _quoted(rep, part, cause)  # "; 1 fetch per step, 1 at train.py:40 `…`"
        text += (f"; the syncs expose the {what} ({pct(idle.get(cause, 0) / max(total, 1))}"
                 f" of GPU idle time{where.replace(';', ':', 1)}), which without them "
                 f"would overlap queued GPU work")
    if second is not None and j.second_gain >= 0.01:
        text += f". Next: {_gain_words(second, j, True)}"
    return text


def _gain_words(p, j: Judgement | None = None, runner: bool = False) -> str:
    """"no host reads of GPU values inside the step −48%"; a bound's class
    when the prediction is None."""
    if p is None:
        if j is None:
            return "none"
        cls, g = (j.second, j.second_gain) if runner else (j.top, j.gain)
        return f"{_BOUND_WORDS[cls][1]} up to −{pct(g)}" if cls in BOUNDS else "none"
    return f"{p.edit.remedy} −{pct(p.gain)}"


def _short(j: Judgement, fix) -> str:
    """The verdict in a few words for a figure: "sync-bound: −48% with no
    host reads of GPU values inside the step"."""
    v = j.verdict
    if _gpu_fix(j, fix):
        return f"{v}: −{pct(fix.gain)} with {fix.edit.remedy}"
    if v in (Verdict.GPU_BOUND, Verdict.HOST_ONLY, Verdict.MIXED) or fix is None:
        return str(v)
    return f"{v}: −{pct(fix.gain)} with {fix.edit.remedy}"


def _quoted(rep: Report, part: np.ndarray, cause: str) -> str:
    """For a verdict that names syncs or DataLoader fetches: their top
    source line over the steps ``part``, as "; 12 syncs per step, 11 at
    train.py:57 `…`" ("" without a sources table)."""
    if cause not in (CauseName.SYNC, CauseName.DATA) or not len(rep.timeline.sources):
        return ""
    w = wait_lines(rep.timeline, part["host_begin_ns"], part["host_end_ns"])
    steps = len(part) if part["number"][0] != -1 else 1
    said = counted(w["sync"], w["syncs"], "syncs", steps) if cause == CauseName.SYNC else \
        counted(w["data"], w["fetches"], "fetches", steps)
    return f"; {said}" if said else ""
