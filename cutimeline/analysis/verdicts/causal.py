"""The causal verdict: the bottleneck whose removal gains most.

A window's (a step's, or the run's steady-state steps') verdict is read
from the replay (``replay/predictions.py``): each fix that removes one
bottleneck whole (``edits.Edit.complete``) is replayed on the program
without the recorder, and the fix that shortens the step most names it.
The idle time by cause (``idle/gaps.py``) stays beside it as evidence,
not the verdict: where one cause exposes another they differ (a per-step
read-back keeps the host from running ahead, so the fetch after it shows
as data idle time, yet removing the read hides the fetch behind queued
GPU work and gains more than removing the fetch).

Why the replay and not a critical path read backwards from the
recording: the replay *is* that path, walked forward under each fix, and
its predictions are scored against the same loops run with each fix
(``bench_whatif.py``); a backward critical path names the work on the
path but not what removing it saves, since the next-longest path takes
over.

Invariants: GPU-side fixes (``gpuside.py``) never change which verdict a
window gets, only which fix a GPU-bound one names; ``launch`` (a
dispatcher twice as fast) is partial and names none. What no replay
removes (cross-stream waits, collectives, unknown causes) is bounded by
its own time (``BOUNDS``). GPU busy excludes the recorder's cost and
collectives running alone. The rules are ``judge_window``'s; what a step
keeps, ``kept_gains``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ...text import Word
from ..idle.gaps import CAUSES, CauseName
from ..replay.predictions import Prediction, steady
from ..thresholds import THRESHOLDS
from .margins import GPU_BOUND_AT, MIXED_MARGIN, Verdict

__all__ = ["Bottleneck", "CLASSES", "BOUNDS", "MIN_GAIN", "EXPOSED_SHARE", "Judgement",
           "judge_window", "judge_steps", "judge_run", "kept_gains"]


class Bottleneck(Word):
    """A bottleneck class: what a ``Judgement``'s ``top``, ``second`` and
    ``exposes`` name, the keys of its ``gains``, and, for a bound, its
    ``fix``. A member equals, hashes and formats as its value, so plain
    strings still name a class and every surface prints the word.

    The classes that name a verdict and the fixes replayed for them:

    ======  ============  ==================================================
    class   verdict       fix replayed
    ======  ============  ==================================================
    input   input-bound   ``data``: batches ready when the step asks
    sync    sync-bound    ``sync``: no host reads in the step; ``copies``:
                          asynchronous, pinned batch copies
    host    host-bound    ``host``: the Python between ops gone
    launch  launch-bound  ``graphs``: one launch per sync-free piece
    gpu     GPU-bound     ``tf32``, ``bf16``, ``fused_optimizer``,
                          ``compile``: faster GPU work
    ======  ============  ==================================================
    """
    INPUT = "input"
    SYNC = "sync"
    HOST = "host"
    LAUNCH = "launch"
    GPU = "gpu"
    DEPENDENCY = "dependency"
    COMMUNICATION = "communication"
    UNKNOWN = "unknown"


#: the verdict each bottleneck class names
CLASSES = {Bottleneck.INPUT: Verdict.INPUT_BOUND, Bottleneck.SYNC: Verdict.SYNC_BOUND,
           Bottleneck.HOST: Verdict.HOST_BOUND, Bottleneck.LAUNCH: Verdict.LAUNCH_BOUND,
           Bottleneck.GPU: Verdict.GPU_BOUND,
           Bottleneck.DEPENDENCY: Verdict.DEPENDENCY_BOUND,
           Bottleneck.COMMUNICATION: Verdict.COMMUNICATION_BOUND,
           Bottleneck.UNKNOWN: Verdict.UNKNOWN}
#: the class of the idle cause each fix addresses (``Edit.cause``: a
#: ``CauseName``, or "gpu" for the GPU-side edits)
_CLASS_OF_CAUSE = {CauseName.DATA: Bottleneck.INPUT, CauseName.SYNC: Bottleneck.SYNC,
                   CauseName.HOST: Bottleneck.HOST, CauseName.LAUNCH: Bottleneck.LAUNCH,
                   "gpu": Bottleneck.GPU}
#: classes no replay removes: their gain is bounded by their own time,
#: the step table's column of it
BOUNDS = {Bottleneck.DEPENDENCY: "dependency_ns", Bottleneck.COMMUNICATION: "communication_ns",
          Bottleneck.UNKNOWN: "unknown_ns"}
MIN_GAIN = THRESHOLDS.min_gain  # why: analysis/thresholds.py
#: the classes a sync may expose (rule 3, ``Judgement.exposes``)
_EXPOSED_BY_SYNC = (Bottleneck.INPUT, Bottleneck.HOST)
EXPOSED_SHARE = THRESHOLDS.exposed_share  # why: analysis/thresholds.py


@dataclass(frozen=True)
class Judgement:
    """The verdict of one window: ``verdict``; the class whose fix gains
    most (``top``, a ``Bottleneck``, "" for GPU-bound and host-only), its
    ``gain`` (of the window's base step time) and ``fix`` (the edit's
    name, or the class's for a bound: plain ``str``, as the tables hold
    it); the runner-up the same (``second``, ``second_gain``,
    ``second_fix``); ``busy`` (the GPU's computing share without the
    recorder); ``exposes`` (rule 3: the class the sync exposes, or "")."""
    verdict: Verdict
    busy: float
    top: Bottleneck | str = ""
    gain: float = 0.0
    fix: str = ""
    second: Bottleneck | str = ""
    second_gain: float = 0.0
    second_fix: str = ""
    exposes: Bottleneck | str = ""
    gains: dict = field(default_factory=dict)  # Bottleneck -> (gain, fix)


def _class_gains(preds: list[Prediction], pick) -> dict[Bottleneck, tuple[float, str]]:
    """Per class, the best gain among its complete fixes and that fix's
    name; ``pick(p)``: a prediction's gain for the window judged."""
    out: dict[str, tuple[float, str]] = {}
    for p in preds:
        cls = _CLASS_OF_CAUSE.get(p.edit.cause)
        if cls is None or not p.edit.complete:
            continue
        g = float(pick(p))
        if cls not in out or g > out[cls][0]:
            out[cls] = (g, p.edit.name.value)  # the word the tables hold (plain str)
    return out


def judge_window(busy: float, gains: dict[Bottleneck, tuple[float, str]], has_gpu: bool = True,
                 gpu_bound_at: float = GPU_BOUND_AT, mixed_margin: float = MIXED_MARGIN,
                 idle: dict | None = None) -> Judgement:
    """The verdict of one window: ``busy`` (the GPU's computing share
    without the recorder), ``gains`` (``Bottleneck`` → (predicted gain,
    the fix's name)), ``idle`` (its idle time by class, for what a sync
    exposes). Classes may be given as their words; the Judgement names
    them by ``Bottleneck``. The rules, by precedence:

    1. host-only: the Timeline has no GPU work.
    2. GPU-bound: the GPU computed for ``gpu_bound_at`` (0.85) of the
       window or more and no fix gains ``1 − gpu_bound_at`` (15 %): the
       host keeps the GPU fed. It names the GPU-side fix that gains most
       (at least ``MIN_GAIN``), the best host-side fix as runner-up.
    3. sync-bound, exposes: the best two gain within ``mixed_margin`` of
       each other, one a sync and the other a fetch or the host's Python:
       without the sync that work overlaps the queued GPU work; without
       the other the sync still drains the queue.
    4. mixed: the best two gain within ``mixed_margin`` (20 %, of the
       best's gain): fixing one leaves the other.
    5. the best fix's class; ``unknown`` when no fix gains ``MIN_GAIN``
       and the GPU idled (GPU-bound if it was busy).

    A sync-bound window whose fetches or host Python hold
    ``EXPOSED_SHARE`` of its idle time says the sync exposes them."""
    gains = {Bottleneck(c): v for c, v in gains.items()}
    j = _rules(busy, gains, has_gpu, gpu_bound_at, mixed_margin)
    if j.verdict == Verdict.SYNC_BOUND and not j.exposes and idle:
        total = sum(idle.values())
        cls = max(_EXPOSED_BY_SYNC, key=lambda c: idle.get(c, 0))
        if total > 0 and idle.get(cls, 0) >= EXPOSED_SHARE * total:
            j = replace(j, exposes=cls)
    return j


def _rules(busy: float, gains: dict[Bottleneck, tuple[float, str]], has_gpu: bool,
           gpu_bound_at: float, mixed_margin: float) -> Judgement:
    gpu = gains.get(Bottleneck.GPU)
    if gpu is not None:  # GPU-side fixes only say what a GPU-bound verdict changes
        gains = {c: v for c, v in gains.items() if c != Bottleneck.GPU}
    j = _host_rules(busy, gains, has_gpu, gpu_bound_at, mixed_margin)
    if j.verdict != Verdict.GPU_BOUND or gpu is None or gpu[0] < MIN_GAIN:
        return j
    return Judgement(Verdict.GPU_BOUND, busy, Bottleneck.GPU, gpu[0], gpu[1], j.top, j.gain,
                     j.fix, gains={**gains, Bottleneck.GPU: gpu})


def _host_rules(busy: float, gains: dict[Bottleneck, tuple[float, str]], has_gpu: bool,
                gpu_bound_at: float, mixed_margin: float) -> Judgement:
    if not has_gpu:  # rule 1
        return Judgement(Verdict.HOST_ONLY, busy)
    ranked = sorted(((g, c, f) for c, (g, f) in gains.items()), key=lambda x: -x[0])
    g1, c1, f1 = ranked[0] if ranked else (0.0, "", "")
    g2, c2, f2 = ranked[1] if len(ranked) > 1 else (0.0, "", "")
    base = dict(busy=busy, top=c1, gain=g1, fix=f1, second=c2, second_gain=g2,
                second_fix=f2, gains=gains)
    if busy >= gpu_bound_at and g1 < 1 - gpu_bound_at:  # rule 2
        return Judgement(Verdict.GPU_BOUND, **base)
    if g1 < MIN_GAIN:  # rule 5's nothing to change
        return Judgement(Verdict.GPU_BOUND if busy >= gpu_bound_at else Verdict.UNKNOWN,
                         **base)
    # a hair of slack: 0.8 × 0.25 is 0.19999999999999998 in floating point
    close = g2 >= (1 - mixed_margin) * g1 - 1e-12 and g2 >= MIN_GAIN
    sync = Bottleneck.SYNC
    if close and {c1, c2} & {sync} and ({c1, c2} - {sync}) <= set(_EXPOSED_BY_SYNC):
        other = c2 if c1 == sync else c1  # rule 3: the sync, which exposes the other
        s_gain, s_fix = gains[sync]
        o_gain, o_fix = gains[other]
        return Judgement(Verdict.SYNC_BOUND, busy, sync, s_gain, s_fix, other, o_gain,
                         o_fix, exposes=other, gains=gains)
    if close:  # rule 4
        return Judgement(Verdict.MIXED, **base)
    return Judgement(CLASSES[c1], **base)  # rule 5


def _bounds(rows: np.ndarray, dur: np.ndarray) -> dict[Bottleneck, np.ndarray]:
    """Per bound class, each row's time in it over its step time (the most
    removing it could save)."""
    out = {}
    for cls, col in BOUNDS.items():
        if col in rows.dtype.names:
            v = rows[col].astype(np.float64)
            if v.any():
                out[cls] = v / np.maximum(dur, 1)
    return out


def judge_steps(rows: np.ndarray, preds: list[Prediction], base_busy: np.ndarray,
                has_gpu: bool, gpu_bound_at: float = GPU_BOUND_AT,
                mixed_margin: float = MIXED_MARGIN) -> list[Judgement]:
    """A ``Judgement`` per row of a step table (``rows``), from the fixes'
    predictions (their ``steps`` in the same order) and each step's base
    GPU busy fraction."""
    out = []
    busy = _computing(rows, base_busy)
    bounds = _bounds(rows, rows["duration_ns"].astype(np.float64))
    kept = {id(p): kept_gains(p.steps) for p in preds}
    for k in range(len(rows)):
        gains = _class_gains(preds, lambda p: kept[id(p)][k])
        for cls, v in bounds.items():
            gains.setdefault(cls, (float(v[k]), cls.value))  # a bound's fix: its class
        out.append(judge_window(float(busy[k]), gains, has_gpu, gpu_bound_at, mixed_margin,
                          _idle(rows[k:k + 1])))
    return out


def judge_run(rows: np.ndarray, preds: list[Prediction], base_busy: np.ndarray,
              has_gpu: bool, gpu_bound_at: float = GPU_BOUND_AT,
              mixed_margin: float = MIXED_MARGIN) -> Judgement:
    """The run's ``Judgement`` over the steady-state rows of ``rows``
    (``predictions.steady``; the whole window as one row when there are
    no steps): the same rules, each fix's gain on their summed step
    time."""
    part = steady(rows)
    b = steady(np.asarray(base_busy, np.float64))
    base_ns = None
    if preds:
        st = steady(preds[0].steps)
        base_ns = st["base_ns"].astype(np.float64)
    dur = part["duration_ns"].astype(np.float64) if base_ns is None else base_ns
    busy = float((_computing(part, b) * dur).sum() / max(dur.sum(), 1))
    gains = _class_gains(preds, lambda p: p.gain)
    total = float(part["duration_ns"].sum())
    for cls, col in BOUNDS.items():
        if col in part.dtype.names and part[col].any():
            gains.setdefault(cls, (float(part[col].sum()) / max(total, 1), cls.value))
    return judge_window(busy, gains, has_gpu, gpu_bound_at, mixed_margin, _idle(part))


def _idle(rows: np.ndarray) -> dict[Bottleneck, int]:
    """The rows' idle time by class, of every idle cause (each cause's
    class has the cause's name, but data's: input)."""
    names = rows.dtype.names
    return {(Bottleneck.INPUT if c == CauseName.DATA else Bottleneck(c)):
            int(rows[f"{c}_ns"].sum()) for c in CAUSES if f"{c}_ns" in names}


def kept_gains(steps: np.ndarray) -> np.ndarray:
    """Per step of a prediction's ``steps`` (``STEP_DTYPE``), the share of
    its base time the fix saves and the run keeps.

    A step shortened only to wait longer in a later one (for the next
    batch of a DataLoader worker already busy, or for a backlog the host
    ran ahead into) gains nothing. The saving by the end of step k, S_k,
    counts as far as it lasts: K_k = min over j ≥ k of S_j, and step k
    keeps K_k − K_(k−1). Where no step loses time K = S; the kept savings
    add up to the run's."""
    base = steps["base_ns"].astype(np.float64)
    saved = np.cumsum(base - steps["predicted_ns"].astype(np.float64))
    lasting = np.minimum.accumulate(saved[::-1])[::-1]
    own = np.diff(lasting, prepend=0.0)
    return np.divide(own, base, out=np.zeros_like(own), where=base > 0)


def _computing(rows: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """The GPU's computing share: busy less collectives running alone."""
    busy = np.asarray(busy, np.float64)
    if "communication_ns" not in rows.dtype.names:
        return busy
    comm = rows["communication_ns"] / np.maximum(rows["duration_ns"], 1)
    return np.maximum(busy - comm, 0.0)
