"""The overhead replay: twins agree, and hand-worked cases come out right."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.replay.compensation import launch_queue
from cutimeline.analysis.replay.hostmap import HostShift, shifted
from cutimeline.analysis.replay.replaying import breaks, held, replay
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import OpFlag, SpanKind

from handmade import random_timeline, timeline


def random_inputs(seed, n_op=300, n_g=200, n_sy=12, streams=3):
    rng = np.random.default_rng(seed)
    op_t = np.sort(rng.integers(0, 100_000, n_op))
    flags = np.where(rng.random(n_op) < 0.5, OpFlag.LAUNCH, 0).astype(np.uint8)
    g_launch = np.sort(rng.choice(op_t, n_g))  # launches at op times: ties
    g_grp = rng.integers(0, streams, n_g)
    g_dur = rng.integers(0, 2_000, n_g)
    free = np.zeros(streams, np.int64)
    g_begin = np.zeros(n_g, np.int64)
    for j in range(n_g):
        g_begin[j] = max(free[g_grp[j]], g_launch[j] + 300)
        free[g_grp[j]] = g_begin[j] + g_dur[j]
    sb = np.sort(rng.choice(np.concatenate([op_t, rng.integers(0, 100_000, 50)]), n_sy))
    se = sb + rng.integers(0, 5_000, n_sy)
    covers = rng.random((3, streams)) < 0.6
    s_grp = rng.integers(0, 3, n_sy)
    lam = rng.integers(0, 400, streams)
    cost = 37 + np.where(flags & OpFlag.LAUNCH, 11, 0) + rng.integers(0, 20, n_op)
    return (op_t, cost, sb, se, s_grp, g_launch, g_grp, g_begin, g_begin + g_dur,
            lam, covers)


@pytest.mark.parametrize("seed", range(8))
def test_held_twins_agree(seed):
    args = random_inputs(seed)
    a = held(*args[5:10], engine="numba")
    b = held(*args[5:10], engine="numpy")
    np.testing.assert_array_equal(a, b)
    assert (a > -(2 ** 62)).any() and (a == -(2 ** 62)).any()


@pytest.mark.parametrize("seed", range(8))
def test_replay_twins_agree(seed):
    args = random_inputs(seed, n_sy=0 if seed == 0 else 12)
    a = replay(*args, engine="numba")
    b = replay(*args, engine="numpy")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_gpu_bound_sync_keeps_its_wait():
    # three 100 ns kernels launched at 0, 1, 2 by ops costing 1 ns each of
    # overhead; the host syncs at 5 and wakes 1 ns after the GPU drained at
    # 300. Without overhead the GPU starts 1 ns earlier: it drains at 299,
    # so everything after the sync moves by −1 ns only.
    args = (np.array([0, 1, 2]), np.ones(3, np.int64), np.array([5]), np.array([301]),
            np.array([0]), np.array([0, 1, 2]), np.array([0, 0, 0]), np.array([0, 100, 200]),
            np.array([100, 200, 300]), np.array([0]), np.array([[True]]))
    for engine in ("numba", "numpy"):
        begin, jumps, _ = replay(*args, engine=engine)
        assert begin.tolist() == [-1, 99, 199]
        comp = HostShift(args[0], np.array([0, 1, 2, 3]), args[2], jumps)
        assert shifted([4, 400], comp, engine).tolist() == [1, 399]


def test_a_wait_on_another_stream_is_kept():
    # stream 0: launched at 0, runs 10–110; stream 1: launched at 5, waits
    # for stream 0 (an event) and runs 110–150. With 4 ns of overhead
    # removed before both launches, stream 0 runs 6–106 and stream 1 still
    # follows it, from 106, not from its launch + λ = 11.
    args = (np.array([-1]), np.array([4]), np.zeros(0), np.zeros(0), np.zeros(0),
            np.array([0, 5]), np.array([0, 1]), np.array([10, 110]), np.array([110, 150]),
            np.array([10, 10]), np.zeros((1, 2), bool))
    for engine in ("numba", "numpy"):
        begin, _, _ = replay(*args, engine=engine)
        assert begin.tolist() == [6, 106]
    assert held(*(np.asarray(a) for a in args[5:10])).tolist()[1] == 110
    # queued behind its own stream, or started at launch + λ: not held
    assert held(np.array([0, 1]), np.array([0, 0]), np.array([10, 50]),
                np.array([50, 60]), np.array([10])).tolist() == [-(2 ** 62)] * 2


def test_cpu_only_steps_shrink_by_the_overhead():
    ops = [("aten::add", 100 + 10 * i, 105 + 10 * i, 0) for i in range(10)]
    tl = timeline(ops=ops, steps=[(0, 100, 200)], meta={"overhead_ns_per_op": 3})
    rep = ctl.analyze(tl)
    assert rep.steps["predicted_ns"].tolist() == [100 - 30]
    assert "moved the step from 70 ns to 100 ns" in rep.summary()


def test_launch_overhead_is_removed_from_launching_ops_only():
    ops = [("aten::add", 10 * i, 10 * i + 5, OpFlag.LAUNCH if i % 2 else 0)
           for i in range(1, 11)]
    tl = timeline(ops=ops, steps=[(0, 5, 105)],
                  meta={"overhead_ns_per_op": 2, "overhead_ns_per_launch": 1})
    assert ctl.analyze(tl).steps["predicted_ns"].tolist() == [100 - 20 - 5]


def test_no_measured_overhead_means_no_compensation():
    tl = timeline(ops=[("aten::add", 0, 5, 0)], steps=[(0, 0, 10)])
    rep = ctl.analyze(tl)
    assert rep.compensation is None and rep.steps["predicted_ns"].tolist() == [-1]
    assert rep.to_dict()["compensation"] is None


def test_replayed_gpu_follows_the_faster_host():
    tl = random_timeline(3)
    rep = ctl.analyze(tl)
    c = rep.compensation
    assert c["removed_ns"] == 300 * len(tl.ops) + 100 * len(tl.ops)
    # the replay never starts work before its (shifted) launch, and keeps
    # every stream in order without overlap
    launched = shifted(tl.gpu.launch_ns, c.shift)
    np.testing.assert_array_equal(launched, shifted(tl.gpu.launch_ns, c.shift, "numpy"))
    lead = c["begin_ns"] - launched
    assert lead.min() >= 0
    for s in np.unique(tl.gpu.stream):
        sel = np.flatnonzero(tl.gpu.stream == s)
        order = sel[np.argsort(c["begin_ns"][sel], kind="stable")]
        assert np.all(c["begin_ns"][order][1:] >= c["end_ns"][order][:-1])
    assert (rep.steps["predicted_ns"] <= rep.steps["duration_ns"]).all()


# -- the recorder's cost model: what costs() removes where ------------------------------------

def test_repeats_twins_agree():
    from cutimeline.analysis.replay.costs import repeats
    from cutimeline.recording.selfcost import _repeats
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 12, 400)
    assert repeats(keys).tolist() == _repeats(keys.tolist())
    assert repeats(np.array([1, 2, 1, 3])).tolist() == [False, False, True, False]
    # per thread: a key seen only on another thread is no repeat
    both = repeats(np.array([7, 7, 7, 7]), np.array([0, 1, 0, 1]))
    assert both.tolist() == [False, False, True, True]


@pytest.mark.parametrize("seed", range(6))
def test_op_costs_twins_agree(seed):
    from cutimeline.analysis.replay.costs import op_costs
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    name = rng.integers(-1, 9, n).astype(np.int32)  # NONE too
    shapes = rng.integers(-1, 5, n).astype(np.int32)
    grad_fn = np.where(rng.random(n) < 0.4, rng.integers(0, 3, n), -1)
    # threads: few, far apart ids (renumbered for the last positions), or NONE
    thread = rng.choice([[0], [0, 1, 2], [3, 70_000], [-1, 5]][seed % 4], n)
    launched = rng.random(n) < 0.7
    keys = np.unique(rng.integers(-1, 9, 20) << 32 | rng.integers(-1, 5, 20) & 0xFFFFFFFF)
    table = {"name": (keys >> 32).tolist(), "shapes": (keys & 0xFFFFFFFF).tolist(),
             "ns": rng.uniform(1000, 9000, len(keys)).round(1).tolist()}
    for tab in (table, None):
        for window in (0, 1, 8):
            args = (name, shapes, grad_fn, thread, launched, tab, 1234.5, 321.0,
                    float(rng.uniform(1, 3)), 600, window)
            a, b = op_costs(*args), op_costs(*args, engine="numpy")
            assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b)
            # the threads' range told (recorder_op_costs: the column's facts)
            told = op_costs(*args, thread_range=(int(thread.min()), int(thread.max())))
            assert np.array_equal(told, b)
    # more distinct keys than the first hash holds: it is made again, larger
    many = rng.integers(0, 600, n).astype(np.int32)
    args = (many, shapes, grad_fn, thread, launched, table, 1234.5, 321.0, 2.0, 600)
    assert np.array_equal(op_costs(*args), op_costs(*args, engine="numpy"))


@pytest.mark.parametrize("seed", range(4))
def test_costs_twins_agree_with_module_hooks_and_calibrations(seed):
    from cutimeline.analysis.replay.costs import costs
    rng = np.random.default_rng(seed)
    tl = random_timeline(seed)
    o = tl.ops
    t = np.sort(rng.choice(o.host_begin_ns, 40))  # module bounds at op times: ties
    spans = tl.spans
    mod = dict(kind=np.full(20, int(SpanKind.MODULE)), name=np.zeros(20, np.int32),
               thread=np.zeros(20, np.int32), depth=np.zeros(20, np.int16),
               number=np.full(20, -1), begin_ns=t[::2], end_ns=t[1::2])
    spans = spans.__class__("spans", {c: np.concatenate([spans[c], mod[c]])
                                      for c in mod})
    end = int(o.host_end_ns.max())
    meta = {**tl.meta, "overhead_ns_per_op": 900,
            "overhead_model": {"backward_ns": 50, "module_ns": 700},
            "overhead_calibrations": [[end + 10, end + 500, 1700], [int(t[3]), int(t[3]) + 9, 1500]]}
    tl = tl.replace(spans=spans, meta=meta)
    a, b = costs(tl, "numba"), costs(tl, "numpy")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert len(a[0]) == len(o) + 40 + 2 and (np.diff(a[0]) >= 0).all()


def test_costs_of_several_threads_are_sorted_by_time():
    from cutimeline.analysis.replay.costs import costs
    tl = timeline(ops=[("a", 100, 110, 0), ("b", 300, 310, 0), ("a", 200, 210, 0),
                       ("c", 400, 410, 0)], steps=[(0, 50, 500)],
                  spans=[(SpanKind.MODULE, "net", 150, 350)],
                  meta={"overhead_ns_per_op": 5, "overhead_model": {"module_ns": 8}})
    tl = tl.replace(ops=tl.ops.replace(thread=np.array([0, 1, 0, 1])))
    for engine in ("numba", "numpy"):
        t, c = costs(tl, engine)
        assert list(zip(t.tolist(), c.tolist())) == [
            (100, 5), (150, 4), (200, 5), (300, 5), (350, 4), (400, 5)]


def priced_timeline(meta, spans=()):
    # ops a, b, a, c (names) with shapes ids: a/"s1" twice, b/"s2", c/none
    tl = timeline(ops=[("a", 100, 110, 0), ("b", 200, 210, 0), ("a", 300, 310, 0),
                       ("c", 400, 410, 0)], steps=[(0, 50, 500)], spans=spans, meta=meta)
    return tl


def test_costs_price_each_signature_and_scale_the_cold_ops():
    from cutimeline.analysis.replay.costs import costs
    tl = priced_timeline({"overhead_ns_per_op": 7})
    a, b = tl.string_id("a"), tl.string_id("b")
    table = {"name": [a, b], "shapes": [-1, -1], "ns": [10, 20]}
    t, c = costs(tl.replace(meta={**tl.meta, "overhead_ns_by_signature": table}))
    assert t.tolist() == [100, 200, 300, 400] and c.tolist() == [10, 20, 10, 7]
    # a mix scale of 2 (median of the calibrations' ratios) doubles the ops
    # that repeat none of the last ops; the second "a" repeats the first
    meta = {**tl.meta, "overhead_ns_by_signature": table,
            "overhead_calibrations": [[600, 650, 1500], [700, 710, 2000], [800, 820, 9000]]}
    t, c = costs(tl.replace(meta=meta))
    assert t.tolist() == [100, 200, 300, 400, 600, 700, 800]
    assert c.tolist() == [20, 40, 10, 14, 50, 10, 20]  # calibrations: their own time


def test_costs_add_backward_and_module_hooks():
    from cutimeline.analysis.replay.costs import costs
    tl = priced_timeline({"overhead_ns_per_op": 5,
                          "overhead_model": {"backward_ns": 3, "module_ns": 8}},
                         spans=[(SpanKind.MODULE, "net", 150, 350)])
    o = tl.ops
    tl = tl.replace(ops=o.replace(grad_fn=np.array([-1, 0, 0, -1])))
    t, c = costs(tl)
    assert list(zip(t.tolist(), c.tolist())) == [
        (100, 5), (150, 4), (200, 8), (300, 8), (350, 4), (400, 5)]


def test_old_files_only_have_the_per_op_cost():
    tl = priced_timeline({"overhead_ns_per_op": 10})
    assert ctl.analyze(tl).steps["predicted_ns"].tolist() == [450 - 40]


# -- the bounded launch queue and rows that wait for another row --------------------------------

def queued_inputs(seed, depth):
    """``random_inputs`` with a stream of copies (the last) that rows of the
    others wait for, and busy streams, so that a queue of ``depth`` fills."""
    args = list(random_inputs(seed, n_g=400, streams=3))
    rng = np.random.default_rng(seed + 100)
    n = len(args[5])
    args[7] = args[5] + rng.integers(0, 50_000, n)  # begins far after launch: a backlog
    args[8] = args[7] + rng.integers(500, 3_000, n)
    grp = args[6]
    after = np.full(n, -1)
    src = np.flatnonzero(grp == 2)
    for j in np.flatnonzero(grp != 2):
        k = src[src < j]
        if len(k) and rng.random() < 0.3:
            after[j] = k[-1]
    return args, after


@pytest.mark.parametrize("seed,depth", [(0, 1), (1, 2), (2, 5), (3, 16), (4, 0), (5, 400)])
def test_replay_twins_agree_with_a_queue_and_waits(seed, depth):
    args, after = queued_inputs(seed, depth)
    a = replay(*args, engine="numba", depth=depth, after=after)
    b = replay(*args, engine="numpy", depth=depth, after=after)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    from cutimeline.analysis.replay.replaying import replay_breaks  # no row_j, no sort
    want = (b[0],) + breaks(args[2], b[1], args[5], b[2])
    for x, y in zip(replay_breaks(*args, engine="numba", depth=depth, after=after), want):
        np.testing.assert_array_equal(x, y)
    begin, jumps, row_j = a
    if 0 < depth < 16:  # the queue held the host somewhere
        assert (np.diff(row_j) > 0).any()
    w = after >= 0  # a waiting row starts after the row it waits for ends
    assert (begin[w] >= begin[after[w]] + (args[8] - args[7])[after[w]]).all()


def test_a_full_queue_holds_the_host_until_its_oldest_row_ends():
    # four 100 ns rows launched at 0, 1, 2, 3 into a queue of 2 (λ = 0):
    # the third launch waits for the first row's end (100), the fourth for
    # the second's (200); the device runs as it did.
    z = np.zeros(0, np.int64)
    args = (z, z, z, z, z, np.array([0, 1, 2, 3]), np.zeros(4, np.int64),
            np.array([0, 100, 200, 300]), np.array([100, 200, 300, 400]),
            np.array([0]), np.zeros((1, 1), bool))
    for engine in ("numba", "numpy"):
        begin, jumps, row_j = replay(*args, engine=engine, depth=2)
        assert begin.tolist() == [0, 100, 200, 300] and row_j.tolist() == [0, 0, 98, 197]
        sync_t, js = breaks(z, jumps, args[5], row_j)
        comp = HostShift(z, np.array([0]), sync_t, js)
        # the host's times before the third launch stay, the launches move
        assert shifted([0, 1, 2, 3, 4], comp, engine).tolist() == [0, 1, 100, 200, 201]
        unbounded = replay(*args, engine=engine)
        assert unbounded[2].tolist() == [0, 0, 0, 0]


def test_a_row_waits_for_the_copy_it_consumes():
    # a 50 ns copy on stream 1 launched at 0, the compute on stream 0
    # launched at 1 (λ = 2) waits for it: it starts at 50, not at 3
    z = np.zeros(0, np.int64)
    args = (z, z, z, z, z, np.array([0, 1]), np.array([1, 0]), np.array([2, 50]),
            np.array([52, 150]), np.array([2, 2]), np.zeros((1, 2), bool))
    for engine in ("numba", "numpy"):
        begin, _, _ = replay(*args, engine=engine, after=np.array([-1, 0]),
                             hold=np.full(2, -(2 ** 62)))
        assert begin.tolist() == [2, 52]
    with pytest.raises(CutimelineError, match="earlier row"):
        replay(*args, after=np.array([1, -1]))
    with pytest.raises(CutimelineError, match="depth=-1"):
        replay(*args, depth=-1)


def test_a_fetch_waits_for_its_ready_time_however_early_the_host_comes():
    # host costs of 40 at 10 removed before a sync (a fetch) of [100, 160)
    # that covers no stream and whose batch was ready at 150: the host
    # arrives at 60, waits until 150, then spends its own 10; the launch
    # at 200 after it moves by 0, not by −40. Without the ready time the
    # fetch moves whole, and the launch with it.
    z = np.zeros(0, np.int64)
    args = (np.array([10]), np.array([40]), np.array([100]), np.array([160]),
            np.array([0]), np.array([200]), np.array([0]), np.array([205]),
            np.array([305]), np.array([5]), np.zeros((1, 1), bool))
    for engine in ("numba", "numpy"):
        begin, jumps, _ = replay(*args, engine=engine, ready=np.array([150]))
        assert begin.tolist() == [205] and jumps.tolist() == [0, 40]
        begin, jumps, _ = replay(*args, engine=engine)
        assert begin.tolist() == [165] and jumps.tolist() == [0, 0]
        # a ready time far past is no wait: the same as none
        begin, _, _ = replay(*args, engine=engine, ready=np.array([-(2 ** 62)]))
        assert begin.tolist() == [165]
    with pytest.raises(CutimelineError, match="one per sync"):
        replay(*args, ready=np.array([1, 2]))


@pytest.mark.parametrize("seed,depth", [(0, 0), (1, 3), (2, 16)])
def test_replay_twins_agree_with_ready_times(seed, depth):
    args, after = queued_inputs(seed, depth)
    rng = np.random.default_rng(seed)
    sb, se = args[2], args[3]
    # a third of the syncs wait for a time within their last tenth, or before them
    ready = np.where(rng.random(len(sb)) < 0.3, se - rng.integers(0, 1 + (se - sb) // 10),
                     -(2 ** 62))
    ready[::7] = sb[::7] - 100
    ready[3::5] = se[3::5] + 10**6  # later than the work it covers: it holds the host
    a = replay(*args, engine="numba", depth=depth, after=after, ready=ready)
    b = replay(*args, engine="numpy", depth=depth, after=after, ready=ready)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], replay(*args, engine="numpy", depth=depth,
                                           after=after)[1])


def test_fetch_waits_are_the_launching_threads_waited_fetches():
    from cutimeline.analysis.replay.compensation import fetch_waits, with_fetches
    from cutimeline.timeline.schema import NONE
    fetch = (SpanKind.DATA, "next(DataLoader)")
    tl = timeline(gpu=[(0, 10, 12, 20), (0, 30, 32, 40)],
                  spans=[fetch + (0, 8), fetch + (21, 29), fetch + (50, 60), fetch + (70, 80),
                         (SpanKind.USER, "x", 1, 2)])
    s = tl.spans
    # waits: none measured, 5 ns, 0 (the batch was ready), 2**62 (clamped to
    # its end, no overflow); the second on thread 1, which launched nothing
    tl = tl.replace(spans=s.replace(number=np.array([NONE, 5, 0, 2 ** 62, 3]),
                                    thread=np.array([0, 1, 0, 0, 0])))
    b, e, r = fetch_waits(tl)
    assert (b.tolist(), e.tolist(), r.tolist()) == ([70], [80], [80])
    tl = tl.replace(spans=tl.spans.replace(thread=np.zeros(5, np.int64)))
    b, e, r = fetch_waits(tl)
    assert (b.tolist(), e.tolist(), r.tolist()) == ([21, 70], [29, 80], [26, 80])
    # merged among the syncs by begin, each on a covers row of no stream
    sb, se, grp, cov, ready = with_fetches(np.array([25]), np.array([27]), np.array([0]),
                                           np.ones((1, 1), bool), (b, e, r))
    assert sb.tolist() == [21, 25, 70] and grp.tolist() == [1, 0, 1]
    assert cov.tolist() == [[True], [False]] and ready.tolist() == [26, -(2 ** 62), 80]
    assert with_fetches(sb[:0], se[:0], grp[:0], cov[:1], (b[:0], e[:0], r[:0]))[4] is None


def test_the_queue_depth_comes_from_the_timeline():
    tl = timeline(gpu=[(0, 1, 2, 3)])
    assert launch_queue(tl) == 1024
    assert launch_queue(tl.replace(meta={**tl.meta, "launch_queue": 0})) == 0


@pytest.mark.parametrize("seed,depth", [(0, 0), (1, 1), (2, 3), (3, 16), (4, 1024)])
def test_the_fused_replay_maps_host_times_as_shifted_does(seed, depth):
    # compensate's one kernel: the holds made on the way, the replayed ends,
    # and host times mapped as ``shifted`` maps them with ``breaks``' tables
    from cutimeline.analysis.replay.replaying import replay_args, replay_breaks, replay_nb
    args, _ = queued_inputs(seed, depth)
    rng = np.random.default_rng(seed)
    none = np.zeros(0, np.int64)
    # at and around costs, launches and syncs (ties), and beyond the ends
    qt = np.sort(np.concatenate([args[0][::7], args[5][::5], args[5][::9] - 1,
                                 args[2], args[2] + 1, rng.integers(-10, 200_000, 40)]))
    # a tenth of the costs apart, merged in by the kernel (after ties)
    apart = rng.random(len(args[0])) < 0.1
    own = replay_args(args[0][~apart], args[1][~apart], *args[2:], depth)
    b_r, _, _, e_r, q_jump, q_cost, total = replay_nb(
        *own, none, none, depth, 1, qt, args[0][apart], args[1][apart], none, none)
    want_b, want_j, row_j = replay(*args, engine="numpy", depth=depth)
    sync_t, jumps = breaks(args[2], want_j, args[5], row_j)
    comp = HostShift(args[0], np.concatenate([[0], np.cumsum(args[1])]), sync_t, jumps)
    np.testing.assert_array_equal(b_r, want_b)
    np.testing.assert_array_equal(e_r, want_b + args[8] - args[7])
    np.testing.assert_array_equal(qt + q_jump - q_cost, shifted(qt, comp))
    assert total == args[1].sum() and len(np.unique(q_jump)) > (1 if depth else 0)
    # the breaks the kernel writes as it meets them are ``breaks``' table
    for engine in ("numba", "numpy"):
        got = replay_breaks(*args, engine=engine, depth=depth)
        for x, y in zip(got, (want_b, sync_t, jumps)):
            assert x.dtype == np.int64
            np.testing.assert_array_equal(x, y)
    # the holds made inline are ``held``'s
    given = replay(*args, engine="numba", depth=depth,
                   hold=held(*args[5:10], engine="numpy"))
    for x, y in zip(replay(*args, engine="numba", depth=depth), given):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("calibrated", [False, True])
def test_compensate_maps_times_alike_with_both_engines_and_its_tables(calibrated):
    from cutimeline.analysis.replay.compensation import compensate
    from cutimeline.analysis.idle.activity import host_activity
    from cutimeline.analysis.idle.lanes import lanes
    tl = random_timeline(3, n=400)
    mid = int(np.median(tl.ops.host_begin_ns))  # costs apart from the ops' (Numba)
    more = {"overhead_calibrations": [[mid, mid + 5_000, 1500], [0, 7, 1400]]} \
        if calibrated else {}
    tl = tl.replace(meta={**tl.meta, "overhead_ns_per_op": 700, "launch_queue": 4, **more})
    at = np.sort(np.random.default_rng(0).integers(tl.start_ns, tl.end_ns, 50))
    got = []
    for engine in ("numba", "numpy"):
        act = host_activity(tl, 100_000, engine, 200_000)
        ln = lanes(tl, act, [tl.start_ns], [tl.end_ns], engine)
        comp = compensate(tl, ln, engine, at=at)
        np.testing.assert_array_equal(comp.at, shifted(at, comp.shift))  # lazy tables
        got.append(comp)
    for k in ("at", "begin_ns", "end_ns", "cost_t", "cost_cum", "sync_t", "jumps",
              "removed_ns"):
        np.testing.assert_array_equal(got[0][k], got[1][k])
    assert (got[0]["at"] != at).any()
