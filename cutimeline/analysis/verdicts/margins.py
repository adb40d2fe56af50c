"""Verdict words, the thresholds that decide them, and the idle-time
evidence a verdict is read beside.

A window's verdict is the bottleneck whose removal gains most
(``causal.py``); this module names the verdicts (``Verdict``, whose
values every surface prints), holds the two thresholds the rules use
(``GPU_BOUND_AT``, ``MIXED_MARGIN``), ranks a window's idle time by cause
(``rank_causes``: the evidence columns ``cause``/``share``/``runner_up``
of the step table) and says a verdict with its gain (``verdict_text``):
"sync-bound — no host reads of GPU values inside the step −48%",
"mixed — batches ready when the step asks −21%, the Python between ops
moved out of the step −19%", "GPU-bound — GPU busy 97%".
"""

from __future__ import annotations

import numpy as np

from ...text import Word, pct
from ..idle.gaps import CAUSES, Cause, CauseName
from ..replay.edits import EDITS
from ..thresholds import THRESHOLDS

__all__ = ["Verdict", "VERDICTS", "VERDICT_CAUSES", "BY_CAUSE", "CAUSE_OF", "GPU_BOUND_AT",
           "MIXED_MARGIN", "ON_GPU", "rank_causes", "verdict_text", "fix_words"]

GPU_BOUND_AT = THRESHOLDS.gpu_bound_at  # why: analysis/thresholds.py
MIXED_MARGIN = THRESHOLDS.mixed_margin  # why: analysis/thresholds.py



class Verdict(Word):
    """A window's verdict (see the module doc). Its value is the word every
    surface prints (tables, ``summary()``, ``to_dict()``, figures, the
    CLI); a member equals, hashes and formats as that word, and the tables
    hold the words themselves (plain ``str``)."""
    GPU_BOUND = "GPU-bound"
    INPUT_BOUND = "input-bound"
    SYNC_BOUND = "sync-bound"
    LAUNCH_BOUND = "launch-bound"
    HOST_BOUND = "host-bound"
    DEPENDENCY_BOUND = "dependency-bound"
    COMMUNICATION_BOUND = "communication-bound"
    MIXED = "mixed"
    UNKNOWN = "unknown"
    HOST_ONLY = "host-only"


VERDICTS = tuple(v.value for v in Verdict)
# the idle causes, then exposed communication: the columns verdicts rank
VERDICT_CAUSES = CAUSES + (CauseName.COMMUNICATION.value,)
#: the verdict each cause names when it leads
BY_CAUSE = {"data": Verdict.INPUT_BOUND, "sync": Verdict.SYNC_BOUND,
            "launch": Verdict.LAUNCH_BOUND, "host": Verdict.HOST_BOUND,
            "dependency": Verdict.DEPENDENCY_BOUND, "unknown": Verdict.UNKNOWN,
            "communication": Verdict.COMMUNICATION_BOUND}
CAUSE_OF = {v: c for c, v in BY_CAUSE.items()}
#: verdicts whose evidence is GPU work (over a step's device window); the
#: others' is host work (over its host window)
ON_GPU = frozenset({Verdict.GPU_BOUND, Verdict.DEPENDENCY_BOUND, Verdict.COMMUNICATION_BOUND})


def rank_causes(idle_by_cause) -> dict[str, np.ndarray]:
    """Per row of (n, 6) idle ns by Cause (or (n, 7): exposed
    communication last, ``VERDICT_CAUSES``): the top cause's index and
    share of the total, and the runner-up's (index −1 and share 0 when no
    other cause has any); ties go to the earlier column."""
    idle = np.asarray(idle_by_cause, np.float64)
    idle = idle.reshape(-1, idle.shape[-1] if idle.ndim == 2 else len(Cause))
    total = idle.sum(axis=1, keepdims=True)
    share = np.divide(idle, total, out=np.zeros_like(idle), where=total > 0)
    order = np.argsort(-share, axis=1, kind="stable")
    rows = np.arange(len(idle))
    top, second = order[:, 0], order[:, 1]
    s1, s2 = share[rows, top], share[rows, second]
    return {"cause": np.where(s1 > 0, top, -1), "share": s1,
            "runner_up": np.where(s2 > 0, second, -1), "runner_up_share": s2}


def fix_words(fix: str, gain: float) -> str:
    """A fix with its predicted gain: "no host reads of GPU values inside
    the step −48%"; a bound class (``causal.BOUNDS``) as "dependency up to
    −12%"."""
    edit = EDITS.get(fix)
    if edit is None:
        return f"{fix} up to −{pct(gain)}" if fix else ""
    return f"{edit.remedy} −{pct(gain)}"


def verdict_text(verdict: str, fix: str, gain: float, busy_frac: float,
                 runner: str = "", runner_gain: float = 0.0) -> str:
    """A verdict with what decides it, as a range of steps says it: the
    fix that gains most (both, for "mixed"); the busy share for
    GPU-bound."""
    if verdict == Verdict.GPU_BOUND:
        return f"GPU-bound — GPU busy {pct(busy_frac)}"
    if verdict == Verdict.HOST_ONLY:
        return "host-only — no GPU work recorded"
    if not fix or not gain > 0:
        return f"{verdict} — GPU busy {pct(busy_frac)}, no fix predicted to gain"
    if verdict == Verdict.MIXED:
        return f"mixed — {fix_words(fix, gain)}, {fix_words(runner, runner_gain)}"
    return f"{verdict} — {fix_words(fix, gain)}"


def _some(x: float) -> str:
    """A share that is there but rounds to 0% reads "<1%"."""
    return "<1%" if 0 < x < 0.005 else pct(x)
