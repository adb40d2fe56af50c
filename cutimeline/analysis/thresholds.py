"""The analysis's policy figures in one place: ``THRESHOLDS``, each with
its reason.

Every module that decides with one of these reads it from here (under its
old name, e.g. ``verdicts.margins.GPU_BOUND_AT``, which stays public);
``analyze(gpu_bound_at=, mixed_margin=, host_gap_ns=, sync_slack_ns=)``
take theirs as defaults. ``tests/analysis/test_thresholds.py`` holds the
README's and docs/ARCHITECTURE.md's figures (85 %, 15 %, 200 µs, ...) to
these values. CUDA's own figures (the 1,024-launch queue) are facts, not
policy: ``cutimeline.timeline.gpus``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Thresholds", "THRESHOLDS"]


@dataclass(frozen=True)
class Thresholds:
    """The figures the analysis decides by; fractions are of a step (or
    window) unless said otherwise."""

    # -- the verdict (verdicts/margins.py, verdicts/causal.py) --
    #: computing for at least this share of a window, and no fix predicted to
    #: save ``1 − gpu_bound_at`` of it, it is GPU-bound: the host keeps the GPU
    #: fed, and removing every idle cause could shorten it by 15 % at most
    gpu_bound_at: float = 0.85
    #: the best fix's gain must lead the runner-up's by this share of itself to
    #: name the verdict, else "mixed": fixing one of two bottlenecks that weigh
    #: about the same leaves the other (−45 % and −40 % must not read like one)
    mixed_margin: float = 0.2
    #: a predicted gain below this is within the replay's own error
    #: (``bench_whatif.py``: median 0.5 %, worst 4.7 % of the step): no fix
    #: is named on less
    min_gain: float = 0.05
    #: a sync-bound window whose fetches or host Python hold this share of its
    #: idle time or more says that the sync exposes them: the idle-time view
    #: would blame them, and the replay says the sync is why they show
    exposed_share: float = 0.25

    # -- idle causes (idle/activity.py, idle/gaps.py) --
    #: op-free host stretches this long are the host's own time (rule 8,
    #: cause "host"), shorter ones between a thread's ops the cost of
    #: launching (rule 6; the rules: ``idle/gaps.py``): it sits above any
    #: framework glue between ops (~5–30 µs per module call on current
    #: CPUs), so a host that sat idle is not read as launch overhead
    host_gap_ns: int = 200_000
    #: a gap that begins this soon after a sync returned is still the sync's
    #: (``gaps.py``, rule 3): it absorbs the clock alignment error between
    #: host and device
    sync_slack_ns: int = 100_000

    # -- the replay (replay/) --
    #: a row that began this soon after a row of another stream ended may
    #: have waited for it: a cross-stream event wait resumes within a few µs
    #: on current GPUs; one that began later waited for something else (an
    #: event the host recorded late, another device)
    wait_latency_ns: int = 20_000
    #: an op whose key is one of the ops this many before it on its thread
    #: runs the recorder's code warm in the CPU's caches (the start-up
    #: model's price); ``recording/selfcost._repeats`` uses the same window
    #: (recording cannot import analysis)
    repeat_window: int = 8
    #: a copy that is no sync yet took the host more than this many launches
    #: staged pageable memory on the way in (a copy to the host stages nothing)
    staged_launches: int = 2
    #: convolutions' share of GPU time from which their settings are worth advice
    conv_advice_share: float = 0.3

    # -- one-off costs (tables/oneoff.py) --
    #: a first call this many times its signature's typical call pays for
    #: what the later calls reuse; a call's ordinary spread (caches,
    #: contention, the allocator) stays well under it
    oneoff_factor: int = 20
    #: and it exceeds the typical call by this share of the window: enough
    #: to move the window's verdict, where smaller first-call costs are noise
    oneoff_share: float = 0.02

    # -- the summary's words (summary.py) --
    #: a cause's share of idle time that would read "0%": left out
    shown_share: float = 0.005
    #: one-off costs that take this share of the steady steps or more
    #: measure warm-up, and the summary says so
    warm_up_share: float = 0.2


#: the figures every module reads
THRESHOLDS = Thresholds()
