"""The what-if replay's fast paths: the fused time map's kernel against its
NumPy twin, and predictions from the reduced reading of each replay equal
to those of a full ``ctl.analyze`` of it."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.replay.hostmap import HostShift, moved, moved_range, shifted, snapped
from cutimeline.analysis.replay.whatif import _replay_steps, predict
from cutimeline.analysis.replay.edits import EDITS, changes
from cutimeline.timeline.schema import NONE

from handmade import random_timeline


def map_inputs(seed, n=2_000, sorted_t=True, cuts=True):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 1_000_000, n)
    if sorted_t:
        t = np.sort(t)
    t[rng.random(n) < 0.05] = NONE
    if cuts:
        edges = np.sort(rng.choice(1_000_000, 40, replace=False))
        cut_b, cut_e = edges[0::2], edges[1::2]
    else:
        cut_b = cut_e = np.zeros(0, np.int64)
    cost_t = np.sort(rng.integers(0, 1_000_000, 300))
    cost = rng.integers(0, 2_000, 300)
    comp = HostShift(cost_t, np.concatenate([[0], np.cumsum(cost)]),
                     np.sort(rng.integers(0, 1_000_000, 25)),
                     np.concatenate([[0], rng.integers(-5_000, 5_000, 25)]))
    # ties: times equal to cut edges, costs and breaks
    pick = rng.integers(0, n, 60)
    if len(cut_b):
        t[pick[:20]] = rng.choice(np.concatenate([cut_b, cut_e]), 20)
    t[pick[20:40]] = rng.choice(cost_t, 20)
    t[pick[40:]] = rng.choice(comp.sync_t, 20)
    if sorted_t:
        t = np.sort(t)
    return t, cut_b, cut_e, comp


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sorted_t", [True, False])
@pytest.mark.parametrize("cuts", [True, False])
@pytest.mark.parametrize("keep_none", [True, False])
def test_moved_kernel_equals_its_twin_and_the_two_maps(seed, sorted_t, cuts, keep_none):
    t, cut_b, cut_e, comp = map_inputs(seed, sorted_t=sorted_t, cuts=cuts)
    a = moved(t, cut_b, cut_e, comp, "numba", keep_none)
    b = moved(t, cut_b, cut_e, comp, "numpy", keep_none)
    np.testing.assert_array_equal(a, b)
    ref = shifted(snapped(t, cut_b, cut_e), comp)
    if keep_none:
        ref = np.where(t != NONE, ref, NONE)
        assert (a[t == NONE] == NONE).all()
    np.testing.assert_array_equal(a, ref)
    assert not np.array_equal(a, t)  # the map moved something


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sorted_t", [True, False])
def test_moved_range_twins_agree_over_the_kept_rows(seed, sorted_t):
    t, cut_b, cut_e, comp = map_inputs(seed, sorted_t=sorted_t)
    keep = np.random.default_rng(seed).random(len(t)) < 0.3
    a = moved_range(t, keep, cut_b, cut_e, comp, "numba")
    b = moved_range(t, keep, cut_b, cut_e, comp, "numpy")
    m = moved(t, cut_b, cut_e, comp, "numba")[keep]
    assert a == b == (m.min(), m.max())
    assert moved_range(t, np.zeros(len(t), bool), cut_b, cut_e, comp) is None


def test_moved_on_nearly_sorted_times_steps_back_right():
    # a column that steps back now and then (several threads' ops)
    t, cut_b, cut_e, comp = map_inputs(9)
    t = t.copy()
    t[::97] -= 300_000
    np.testing.assert_array_equal(moved(t, cut_b, cut_e, comp, "numba"),
                                  moved(t, cut_b, cut_e, comp, "numpy"))


def check_same(rep):
    """Every edit's prediction from the reduced reading equals the full
    analysis' (bit for bit), and so does each replay's reduced table."""
    fast = predict(rep, ctl.analyze)
    full = predict(rep, ctl.analyze, full=True)
    assert [p.edit.name for p in fast] == [p.edit.name for p in full] and fast
    for x, y in zip(fast, full):
        assert (x.step_ns, x.predicted_step_ns, x.busy_frac, x.predicted_busy_frac,
                x.gain) == (y.step_ns, y.predicted_step_ns, y.busy_frac,
                            y.predicted_busy_frac, y.gain), x.edit.name
        np.testing.assert_array_equal(x.steps, y.steps)
    return fast


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_reduced_reading_equals_the_full_analysis(seed, engine):
    tl = random_timeline(seed, n=600, streams=1 + seed % 3, steps=6)
    check_same(ctl.analyze(tl, engine=engine))


def test_reduced_reading_on_two_devices_and_without_steps():
    tl = random_timeline(11, n=800, streams=3, steps=6)
    g = tl.gpu
    # stream 2 on a second device: the busier device is measured
    two = tl.replace(gpu=g.replace(device=np.where(g.stream == 2, 1, 0)))
    check_same(ctl.analyze(two))
    from cutimeline.timeline.schema import SpanKind
    s = tl.spans
    no_steps = tl._take({"spans": s.kind != SpanKind.STEP}, dict(tl.meta))
    rep = ctl.analyze(no_steps)
    assert len(rep.steps) == 0
    check_same(rep)
    # an imported trace without steps: first to last device activity
    kineto = no_steps._take({}, dict(no_steps.meta, source="kineto"))
    rep = ctl.analyze(kineto)
    assert rep.settings["window"] == "first to last device activity"
    check_same(rep)


def test_replay_steps_reads_window_zero_and_each_step():
    tl = random_timeline(3, n=500, streams=2, steps=5)
    rep = ctl.analyze(tl)
    from cutimeline.analysis.replay.whatif import _apply
    ch = changes(tl, EDITS["data"], rep.activity, "numba")
    t2 = _apply(tl, rep.lanes, ch, EDITS["data"], "numba")
    got, new = _replay_steps(t2, "numba"), ctl.analyze(t2)
    np.testing.assert_array_equal(got["number"][1:], new.steps["number"])
    np.testing.assert_array_equal(got["duration_ns"][1:], new.steps["duration_ns"])
    np.testing.assert_array_equal(got["busy_frac"][1:], new.steps["busy_frac"])
    assert got["duration_ns"][0] == new.overall["duration_ns"]
    assert got["busy_frac"][0] == new.overall["busy_frac"]


def reference_cuts(tl, how):
    """``_launch_cuts`` as it was first written: every device op's cut,
    sorted, with the steps found per op (no one-off calls here)."""
    from cutimeline.analysis.idle.steps import step_windows
    from cutimeline.timeline.schema import OpFlag
    o = tl.ops
    dev = np.flatnonzero((o.device != NONE) & ((o.flags & OpFlag.SYNC) == 0))
    b, e = o.host_begin_ns[dev].astype(np.int64), o.host_end_ns[dev].astype(np.int64)
    cut = (e - b) // 2 if how == "launch" else e - b
    if how == "graphs":
        _, hb, _ = step_windows(tl)
        order = np.argsort(b, kind="stable")
        step = np.searchsorted(hb, b[order], side="right")
        first = np.concatenate([[True], step[1:] != step[:-1]])
        cut[order[first]] = 0
    order = np.argsort(e - cut, kind="stable")
    return (e - cut)[order], e[order]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("how", ["launch", "graphs"])
@pytest.mark.parametrize("shuffled", [False, True])
def test_launch_cuts_unite_to_the_reference(seed, how, shuffled):
    from cutimeline.numeric import intervals as iv
    tl = random_timeline(seed, n=700, streams=2, steps=7)
    if shuffled:  # ops out of time order (several threads' rows interleaved)
        perm = np.random.default_rng(seed).permutation(len(tl.ops))
        o = tl.ops
        tl = tl.replace(ops=o.replace(host_begin_ns=o.host_begin_ns[perm],
                                      host_end_ns=o.host_end_ns[perm]))
    rep = ctl.analyze(tl)
    b, e = reference_cuts(tl, how)
    keep = e > b
    want = iv.union(b[keep], e[keep], "numpy")
    for engine in ("numba", "numpy"):
        ch = changes(tl, EDITS[how], rep.activity, engine)
        np.testing.assert_array_equal(ch.cut_b, want[0])
        np.testing.assert_array_equal(ch.cut_e, want[1])
    assert len(want[0])


@pytest.mark.parametrize("seed", range(3))
def test_extent_from_facts_is_the_timelines(seed):
    from cutimeline.analysis.facts import extent
    tl = random_timeline(seed, n=300, streams=2, steps=4)
    assert extent(tl)[:2] == (tl.start_ns, tl.end_ns)
    unaligned = tl._take({}, dict(tl.meta, aligned=False))
    assert extent(unaligned)[:2] == (unaligned.start_ns, unaligned.end_ns)
