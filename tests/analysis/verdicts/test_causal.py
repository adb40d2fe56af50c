"""The causal verdict: the fix that gains most names it (verdicts/causal.py)."""

import numpy as np
import pytest

from cutimeline.analysis.verdicts.causal import judge_window


def g(**gains):
    """class -> (gain, the fix's name)."""
    fixes = {"input": "data", "sync": "sync", "host": "host", "launch": "graphs"}
    return {c: (v, fixes.get(c, c)) for c, v in gains.items()}


def test_the_fix_that_gains_most_names_the_verdict_whatever_the_idle_shares_say():
    # a sync's removal gains −48 %, the fetch's −19 %: sync-bound, though the
    # fetch holds most of the idle time (it is what the sync exposes)
    j = judge_window(0.66, g(sync=0.48, input=0.19, launch=0.01),
                     idle={"input": 57, "sync": 12, "launch": 30, "host": 1})
    assert (j.verdict, j.fix, j.second_fix, j.exposes) == ("sync-bound", "sync", "data",
                                                           "input")
    for cls, verdict in (("input", "input-bound"), ("host", "host-bound"),
                         ("launch", "launch-bound")):
        assert judge_window(0.3, g(**{cls: 0.6, "sync": 0.1})).verdict == verdict


@pytest.mark.parametrize("busy, best, verdict", [
    (0.97, 0.10, "GPU-bound"),     # busy, nothing saves 15 %
    (0.90, 0.20, "sync-bound"),    # busy, but a fix saves 20 % (it removes GPU work too)
    (0.60, 0.20, "sync-bound"),
    (0.60, 0.03, "unknown"),       # idle 40 %, and no fix the replay knows gains 5 %
    (0.90, 0.03, "GPU-bound"),
])
def test_gpu_bound_is_busy_with_no_fix_worth_it(busy, best, verdict):
    assert judge_window(busy, g(sync=best, host=best / 4)).verdict == verdict


@pytest.mark.parametrize("a, b, margin, verdict", [
    (0.45, 0.40, 0.2, "mixed"),         # within 20 % of the best: both matter
    (0.45, 0.30, 0.2, "input-bound"),   # a third less: the best leads
    (0.50, 0.40, 0.2, "mixed"),         # exactly 20 % less: still mixed
    (0.51, 0.49, 0.0, "input-bound"),   # margin 0: never mixed
    (0.99, 0.01, 0.2, "input-bound"),
])
def test_two_fixes_within_the_margin_are_mixed(a, b, margin, verdict):
    j = judge_window(0.3, g(input=a, launch=b), mixed_margin=margin)
    assert j.verdict == verdict
    if verdict == "mixed":
        assert (j.fix, j.gain, j.second_fix, j.second_gain) == ("data", a, "graphs", b)


@pytest.mark.parametrize("other", ["input", "host"])
def test_a_sync_tied_with_what_it_exposes_is_the_verdict(other):
    # without the read the fetch (or the Python) overlaps queued GPU work;
    # without the fetch the read still drains the queue: the sync is why
    j = judge_window(0.6, g(sync=0.18, **{other: 0.19}))
    assert (j.verdict, j.exposes, j.fix) == ("sync-bound", other, "sync")
    # a sync tied with launch cost is mixed: neither exposes the other
    assert judge_window(0.6, g(sync=0.18, launch=0.19)).verdict == "mixed"


def test_bounds_stand_beside_the_replayed_fixes_and_no_gpu_is_host_only():
    gains = {"launch": (0.2, "graphs"), "dependency": (0.5, "dependency")}
    j = judge_window(0.4, gains)
    assert (j.verdict, j.fix) == ("dependency-bound", "dependency")
    assert judge_window(0.0, {}, has_gpu=False).verdict == "host-only"
    assert judge_window(0.9, {}).verdict == "GPU-bound"
    assert judge_window(0.5, {}).verdict == "unknown"


def test_classes_are_one_enum_that_reads_as_its_words():
    from cutimeline.analysis.verdicts.causal import BOUNDS, CLASSES, Bottleneck
    assert set(CLASSES) == set(Bottleneck) and set(BOUNDS) <= set(Bottleneck)
    # plain strings name the classes in, members come out, each the word
    j = judge_window(0.6, g(sync=0.18, input=0.19), idle={"input": 5, "sync": 1})
    assert (j.top, j.second, j.exposes) == (Bottleneck.SYNC, Bottleneck.INPUT, "input")
    assert isinstance(j.exposes, Bottleneck) and f"{j.exposes}" == str(j.exposes) == "input"
    # a bound's fix is its class's word, a plain str as the tables hold it
    j = judge_window(0.4, {"dependency": (0.5, "dependency")})
    assert type(j.fix) is str and j.top is Bottleneck.DEPENDENCY


def _steps(base, predicted):
    from cutimeline.analysis.replay.predictions import STEP_DTYPE
    t = np.zeros(len(base), STEP_DTYPE)
    t["base_ns"], t["predicted_ns"] = base, predicted
    return t


def test_a_step_keeps_only_the_saving_the_run_keeps():
    from cutimeline.analysis.verdicts.causal import kept_gains
    # every step saves 2 of 10: each keeps its own
    assert kept_gains(_steps([10] * 4, [8] * 4)).tolist() == [0.2] * 4
    # steps alternate: one saves 4, the next waits 4 longer for what it
    # could not have sooner (a worker's batch): none keeps anything, but
    # the last, whose saving nothing after it takes back
    assert kept_gains(_steps([10, 20, 10, 20, 10], [6, 24, 6, 24, 6])).tolist() == \
        [0.0, 0.0, 0.0, 0.0, 0.4]
    # a backlog: three steps save 3 each, the last pays 6 of it back; the
    # 3 the run keeps was saved first in step 0, and the kept savings add
    # up to the run's
    got = kept_gains(_steps([10, 10, 10, 10], [7, 7, 7, 16]))
    assert np.allclose(got, [0.3, 0, 0, 0]) and np.isclose((got * 10).sum(), 40 - 37)
    # a step that loses with no saving before it keeps its loss
    assert kept_gains(_steps([10, 10], [12, 10])).tolist() == [-0.2, 0.0]
    assert kept_gains(_steps([0, 10], [0, 5])).tolist() == [0.0, 0.5]
