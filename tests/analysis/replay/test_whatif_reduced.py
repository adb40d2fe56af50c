"""The what-if replay's fast paths: the fused time map's kernel against its
NumPy twin, and predictions from the lean replay (ops not moved) equal to
a reference that replays every column and finds each step's work by
hand."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.replay.hostmap import HostShift, moved, moved_range, shifted, snapped
from cutimeline.analysis.idle.steps import step_windows
from cutimeline.analysis.replay.predictions import predict
from cutimeline.analysis.replay.whatif import replayed
from cutimeline.numeric import intervals as iv
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


def reference(rep, pred):
    """The prediction's per-step times by hand: the whole replay (every
    column moved, ``replayed``), each step's work the rows its recorded
    host window launched, its window from the previous one's end (the
    first from its replayed host begin) to its own last end."""
    tl = rep.timeline
    t2 = replayed(rep, pred.edit.name)
    keep = np.ones(len(tl.gpu), bool)
    if len(t2.gpu) < len(tl.gpu):  # a gone op's rows went with it
        ch = changes(tl, pred.edit, rep.activity)
        keep = ~ch.drop_ops[tl.gpu.op]
    launch = tl.gpu.launch_ns[keep]
    b, e = t2.gpu.begin_ns, np.maximum(t2.gpu.end_ns, t2.gpu.begin_ns)
    numbers, hb, he = step_windows(tl)
    _, fb, fe = step_windows(t2)
    ends, start = [], None
    for k in range(len(hb)):
        mine = (launch >= hb[k]) & (launch < he[k])
        last = e[mine].max() if mine.any() else fe[k]
        ends.append(max([last] + ends[-1:]))
        if k == 0:
            start = min(fb[0], b[mine].min() if mine.any() else fb[0], ends[0])
    w1 = np.array(ends)
    w0 = np.concatenate([[start], w1[:-1]])
    mine = t2.gpu.device == rep.lanes.device_keys[rep.primary]
    ub, ue = iv.union(b[mine], e[mine], "numpy")
    busy = iv.coverage(ub, ue, w0, w1, "numpy") / np.maximum(w1 - w0, 1)
    at = {int(n): i for i, n in enumerate(numbers)}
    pick = [at[int(n)] for n in rep.steps["number"]]
    return (w1 - w0)[pick], busy[pick]


def check_same(rep):
    """Every fix's prediction from the lean replay equals the reference."""
    preds = predict(rep)
    assert preds
    for p in preds:
        d, busy = reference(rep, p)
        np.testing.assert_array_equal(p.steps["predicted_ns"], d, err_msg=p.edit.name)
        np.testing.assert_allclose(p.steps["predicted_busy_frac"], busy, rtol=1e-12,
                                   err_msg=p.edit.name)
    return preds


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_lean_predictions_equal_the_reference(seed, engine):
    tl = random_timeline(seed, n=600, streams=1 + seed % 3, steps=6)
    check_same(ctl.analyze(tl, engine=engine))


def test_lean_predictions_on_two_devices():
    tl = random_timeline(11, n=800, streams=3, steps=6)
    g = tl.gpu
    # stream 2 on a second device: the busier device is measured
    two = tl.replace(gpu=g.replace(device=np.where(g.stream == 2, 1, 0)))
    check_same(ctl.analyze(two))


def test_without_steps_the_window_is_one_step():
    tl = random_timeline(11, n=800, streams=3, steps=6)
    from cutimeline.timeline.schema import SpanKind
    no_steps = tl._take({"spans": tl.spans.kind != SpanKind.STEP}, dict(tl.meta))
    rep = ctl.analyze(no_steps)
    assert len(rep.steps) == 0
    for p in predict(rep):  # the whole window, host and device alike
        assert len(p.steps) == 1 and p.steps["number"][0] == NONE
        # the base: the window without the recorder's cost
        assert p.steps["base_ns"][0] == rep.overall["predicted_ns"] <= \
            rep.overall["duration_ns"]
        assert 0 < p.predicted_step_ns <= p.step_ns
    kineto = no_steps._take({}, dict(no_steps.meta, source="kineto"))
    rep = ctl.analyze(kineto)
    assert rep.settings["window"] == "first to last device activity"
    for p in predict(rep):  # first to last device activity, in the replay
        t2 = replayed(rep, p.edit.name)
        assert p.predicted_step_ns == t2.gpu.end_ns.max() - t2.gpu.begin_ns.min()


def reference_cuts(tl, how, act):
    """The launch edits' cuts by hand (no one-off calls here): ``launch``
    the second half of every device op's host time; ``graphs`` the
    dispatching (``act.launch_only``) of each piece of a step between two
    host syncs, from the end of its first launch to the end of its last."""
    from cutimeline.analysis.idle.steps import step_windows
    from cutimeline.timeline.schema import OpFlag
    o = tl.ops
    if how == "launch":
        dev = np.flatnonzero((o.device != NONE) & ((o.flags & OpFlag.SYNC) == 0))
        b, e = o.host_begin_ns[dev].astype(np.int64), o.host_end_ns[dev].astype(np.int64)
        cut = (e - b) // 2
        order = np.argsort(e - cut, kind="stable")
        return (e - cut)[order], e[order]
    dev = [i for i in range(len(o)) if o.device[i] != NONE
           and o.flags[i] & (OpFlag.SYNC | OpFlag.LAUNCH) == OpFlag.LAUNCH]
    _, hb, _ = step_windows(tl)
    sb = act.sync[0]
    pieces: dict = {}
    for i in sorted(dev, key=lambda i: o.host_begin_ns[i]):
        key = (int(np.searchsorted(hb, o.host_begin_ns[i], side="right")),
               int(np.searchsorted(sb, o.host_begin_ns[i], side="right")))
        first, last = pieces.get(key, (int(o.host_end_ns[i]), int(o.host_end_ns[i])))
        pieces[key] = (first, max(last, int(o.host_end_ns[i])))
    cb, ce = [], []
    for first, last in pieces.values():
        for lb, le in zip(*act.launch_only):
            a, z = max(lb, first), min(le, last)
            if z > a:
                cb.append(a)
                ce.append(z)
    return np.array(cb, np.int64), np.array(ce, np.int64)


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
    b, e = reference_cuts(tl, how, rep.activity)
    keep = e > b
    want = iv.union(b[keep], e[keep], "numpy")
    for engine in ("numba", "numpy"):
        ch = changes(tl, EDITS[how], rep.activity, engine)
        np.testing.assert_array_equal(ch.cut_b, want[0])
        np.testing.assert_array_equal(ch.cut_e, want[1])
    assert len(want[0])


@pytest.mark.parametrize("seed", range(3))
def test_extent_from_facts_is_the_timelines(seed):
    from cutimeline.numeric.columns import extent
    tl = random_timeline(seed, n=300, streams=2, steps=4)
    assert extent(tl)[:2] == (tl.start_ns, tl.end_ns)
    unaligned = tl._take({}, dict(tl.meta, aligned=False))
    assert extent(unaligned)[:2] == (unaligned.start_ns, unaligned.end_ns)
