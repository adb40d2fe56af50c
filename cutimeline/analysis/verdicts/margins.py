"""Verdicts with a margin: what a window's idle time says, and how surely.

From the busy fraction of a window (usually a step) on its primary device
and its idle time by cause (``gaps.py``):

* **GPU-bound** — busy for at least ``gpu_bound_at`` (``GPU_BOUND_AT``) of the window:
  the host keeps the GPU fed; only faster GPU work shortens the step.
* otherwise the causes are ranked by their share of the idle time. When
  the top share leads the runner-up's by less than ``mixed_margin`` (``MIXED_MARGIN``)
  the verdict is **mixed**: two causes weigh about the same, and fixing
  one alone leaves the other (a 45/40 split must not read like 99/1).
  Else the top cause names it: data → **input-bound**, sync →
  **sync-bound**, launch → **launch-bound**, host → **host-bound**,
  dependency → **dependency-bound** (work queued but waiting on other
  streams or events), unknown → **unknown**. Exposed communication
  (``communication.py``: collectives running with no other work beside
  them) joins the idle causes as **communication-bound**, and the
  GPU-bound test counts only the busy time beside it: a device that
  spends the step in an all-to-all is not feeding compute.
* **unknown** too when the window has no idle time and is not GPU-bound
  (an empty window); **host-only** when the Timeline has no GPU work.
"""

from __future__ import annotations

import enum

import numpy as np

from ..idle.gaps import CAUSES, Cause
from ..words import pct

__all__ = ["Verdict", "VERDICTS", "VERDICT_CAUSES", "BY_CAUSE", "CAUSE_OF", "GPU_BOUND_AT",
           "MIXED_MARGIN", "ON_GPU", "rank_causes", "verdicts", "verdict_text"]

#: busy at least this share of a window, it is GPU-bound: the host keeps the
#: GPU fed, and removing every idle cause could shorten it by 15 % at most
GPU_BOUND_AT = 0.85
#: the top cause's share of the idle time must lead the runner-up's by this
#: much to name the verdict, else "mixed": fixing one of two causes that
#: weigh about the same leaves the other (a 45/40 split must not read 99/1)
MIXED_MARGIN = 0.2



class Verdict(str, enum.Enum):
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

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


VERDICTS = tuple(v.value for v in Verdict)
# the idle causes, then exposed communication: the columns verdicts rank
VERDICT_CAUSES = CAUSES + ("communication",)
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


def verdicts(busy_frac, idle_by_cause, gpu_bound_at: float = GPU_BOUND_AT,
             has_gpu: bool = True, mixed_margin: float = MIXED_MARGIN) -> np.ndarray:
    """Verdict strings from busy fractions and (n, 6) idle ns by cause, or
    (n, 7) with exposed communication last (then ``busy_frac`` is the busy
    time beside it)."""
    n = len(busy_frac)
    if not has_gpu:
        return np.array([Verdict.HOST_ONLY.value] * n, dtype=object)
    r = rank_causes(idle_by_cause)
    width = np.asarray(idle_by_cause).reshape(n, -1).shape[1] if n else len(Cause)
    names = np.array([BY_CAUSE[c].value for c in VERDICT_CAUSES[:width]]
                     + [Verdict.UNKNOWN.value], dtype=object)
    out = names[r["cause"]]  # -1 (no idle at all): the last, unknown
    # a hair of slack: 0.6 − 0.4 is 0.19999999999999996 in floating point
    close = r["share"] - r["runner_up_share"] < mixed_margin - 1e-9
    out[(r["cause"] >= 0) & close] = Verdict.MIXED.value
    out[np.asarray(busy_frac) >= gpu_bound_at] = Verdict.GPU_BOUND.value
    return out


def verdict_text(verdict: str, idle: dict[str, int], busy_frac: float) -> str:
    """The verdict with its margin, as the report says it: "launch-bound —
    62% of idle time, next: sync 21%", "mixed — launch 45%, sync 40% of
    idle time", "GPU-bound — GPU busy 91%"."""
    total = sum(idle.values())
    share = {c: (v / total if total else 0.0) for c, v in idle.items()}
    ranked = sorted(share, key=lambda c: -share[c])  # stable: ties by Cause
    # with collectives alone on the device the shares are of both
    of = "of idle + exposed-communication time" if idle.get("communication") else \
        "of idle time"
    if verdict == Verdict.GPU_BOUND:
        return f"GPU-bound — GPU busy {pct(busy_frac)}"
    if verdict == Verdict.HOST_ONLY:
        return "host-only — no GPU work recorded"
    if total <= 0:
        return f"{verdict} — no idle time measured"
    if verdict == Verdict.MIXED:
        a, b = ranked[:2]
        return f"mixed — {a} {pct(share[a])}, {b} {pct(share[b])} {of}"
    top = CAUSE_OF[verdict]
    rest = [c for c in ranked if c != top and share[c] > 0]
    return f"{verdict} — {pct(share[top])} {of}" + \
        (f", next: {rest[0]} {_some(share[rest[0]])}" if rest else "")


def _some(x: float) -> str:
    """A share that is there but rounds to 0% reads "<1%"."""
    return "<1%" if 0 < x < 0.005 else pct(x)
