"""Gap causes on hand-built Timelines whose answers are known."""

import numpy as np
import pytest

from cutimeline.analysis.idle.activity import host_activity, host_compute, subtract, sync_chains
from cutimeline.analysis.idle.gaps import classify
from cutimeline.analysis.idle.lanes import idle_in, lanes as _lanes
from cutimeline.numeric.engines import ENGINES
from cutimeline.timeline.schema import NONE, OpFlag, SpanKind

from handmade import random_timeline, timeline


def lanes(tl, act, engine="numba"):
    return _lanes(tl, act, [tl.start_ns], [tl.end_ns], engine)


def device_gaps(tl, engine="numba"):
    act = host_activity(tl, engine=engine)
    ln = lanes(tl, act, engine)
    d = ln.devices
    return list(zip(d.gb.tolist(), d.ge.tolist(), d.amounts.tolist())), ln, act


@pytest.mark.parametrize("engine", ENGINES)
def test_host_gap_split_by_data_and_launch(engine):
    # work [10,20) and [30,40), launched at 5 and 25 (latency 5 both times);
    # the host loads data over [21,28): the gap [20,30) is 7 data, 3 launch
    tl = timeline([(0, 5, 10, 20), (0, 25, 30, 40)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 21, 28)])
    gaps, _, _ = device_gaps(tl, engine)
    assert (20, 30, [7, 0, 3, 0, 0, 0]) in gaps


@pytest.mark.parametrize("engine", ENGINES)
def test_queued_work_is_dependency(engine):
    # stream 1's second op was launched at 15, before stream 1 went idle at
    # 20, and starts at 60 (it waited on stream 0): 40 ns of dependency
    tl = timeline([(0, 2, 10, 60), (1, 3, 12, 20), (1, 15, 60, 70)])
    act = host_activity(tl, engine=engine)
    st = lanes(tl, act, engine).streams
    s1 = [(b, e, a) for g, b, e, a in zip(st.gg, st.gb, st.ge, st.amounts.tolist())
          if g == 1]
    assert (20, 60, [0, 0, 0, 0, 40, 0]) in s1


@pytest.mark.parametrize("engine", ENGINES)
def test_sync_drains_then_post_sync_time_is_sync(engine):
    # host blocked in a sync [50,61) until the stream drained at 60; next
    # launch at 70 starts at 75: the whole gap [60,75) is the sync's (the
    # host dispatched on from the sync to the launch: the queue's refill)
    tl = timeline([(0, 45, 50, 60), (0, 70, 75, 80)], syncs=[(50, 61, 0)])
    gaps, _, _ = device_gaps(tl, engine)
    assert (60, 75, [0, 15, 0, 0, 0, 0]) in gaps


@pytest.mark.parametrize("engine", ENGINES)
def test_a_short_read_then_long_python_is_host_time_not_the_syncs(engine):
    # a read blocks the host for 10 µs, [15,25) µs, while the queue drains
    # at 20 µs; then 1 ms of Python without ops, and the next launch at
    # 1,025 µs starts 5 µs later. The read made the host 10 µs late: that
    # much of the gap is the sync's; the GPU would have waited out the
    # Python anyway (host, [30, 1024) µs), and the last 6 µs are launching
    # (the op's dispatch, then its 5 µs latency)
    us = 1_000
    tl = timeline([(0, 1 * us, 6 * us, 20 * us), (0, 1025 * us, 1030 * us, 1040 * us)],
                  ops=[("a", 0, 1 * us, OpFlag.LAUNCH),
                       ("item", 15 * us, 25 * us, OpFlag.SYNC),
                       ("b", 1024 * us, 1025 * us, OpFlag.LAUNCH)],
                  syncs=[(15 * us, 25 * us, 0)])
    gaps, _, _ = device_gaps(tl, engine)
    assert (20 * us, 1030 * us, [0, 10 * us, 6 * us, 994 * us, 0, 0]) in gaps


@pytest.mark.parametrize("engine", ENGINES)
def test_two_reads_in_a_row_delay_the_host_by_both_waits(engine):
    # pred.cpu() waits 13 ms for the queue (busy until 13,000 µs), its copy
    # runs [13,000, 13,010); 300 µs of Python (.tolist()); y.cpu() waits
    # 10 µs on an idle GPU, copy [13,310, 13,315); then 5 ms of Python and
    # the next launch. Without the reads the host would have been 13 ms
    # earlier: the whole gap after the second read is theirs, not the host's
    us = 1_000
    tl = timeline([(0, 0, 5 * us, 13000 * us), (0, 1 * us, 13000 * us, 13010 * us),
                   (0, 13300 * us, 13310 * us, 13315 * us),
                   (0, 18400 * us, 18405 * us, 18500 * us)],
                  ops=[("mm", 0, 1 * us, OpFlag.LAUNCH),
                       ("cpu", 1 * us, 13011 * us, OpFlag.LAUNCH | OpFlag.SYNC),
                       ("cpu", 13300 * us, 13316 * us, OpFlag.LAUNCH | OpFlag.SYNC),
                       ("mm", 18399 * us, 18400 * us, OpFlag.LAUNCH)],
                  syncs=[(1 * us, 13011 * us, 0), (13300 * us, 13316 * us, 0)])
    gaps, _, act = device_gaps(tl, engine)
    np.testing.assert_array_equal(act.chain(), [13010 * us, 13026 * us])
    g = {(b, e): a for b, e, a in gaps}
    assert g[(13315 * us, 18405 * us)] == [0, 5090 * us, 0, 0, 0, 0]


def test_sync_chains_restart_after_launched_work():
    # segments [0,10) [20,25) [40,42) [60,70): work launched at 30 (between
    # the 2nd and 3rd) starts a new chain
    sb, se = np.array([0, 20, 40, 60]), np.array([10, 25, 42, 70])
    assert sync_chains(sb, se, np.array([30])).tolist() == [10, 15, 2, 12]
    assert sync_chains(sb, se, np.array([], np.int64)).tolist() == [10, 15, 17, 27]
    assert sync_chains(sb, se, np.array([5, 75])).tolist() == [10, 15, 17, 27]
    assert sync_chains(sb[:1], se[:1], np.array([])).tolist() == [10]


@pytest.mark.parametrize("engine", ENGINES)
def test_gap_after_a_sync_ops_own_row_is_the_syncs(engine):
    # the sync op (flag SYNC) has a gpu row of its own, [55,300), whose
    # closing event ran long after the host returned at 61: the gap after
    # it is still the sync's, though it begins 239 ns after the sync ended
    # (λ = 1 ns, so [300, 401) is host time, the rest dependency)
    tl = timeline([(0, 45, 50, 60), (0, 54, 55, 300), (0, 400, 405, 410)],
                  ops=[("a", 40, 46, OpFlag.LAUNCH), ("item", 50, 61, OpFlag.SYNC),
                       ("b", 399, 401, OpFlag.LAUNCH)], syncs=[(50, 61, 0)])
    act = host_activity(tl, slack_ns=10, engine=engine)
    ln = _lanes(tl, act, [tl.start_ns], [tl.end_ns], engine)
    d = ln.devices
    assert (300, 405, [0, 101, 0, 0, 4, 0]) in list(zip(d.gb.tolist(), d.ge.tolist(),
                                                     d.amounts.tolist()))


@pytest.mark.parametrize("engine", ENGINES)
def test_post_sync_time_stops_at_the_next_fetch(engine):
    tl = timeline([(0, 45, 50, 60), (0, 100, 105, 110)], syncs=[(50, 61, 0)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 70, 95)])
    gaps, _, _ = device_gaps(tl, engine)
    # [60,70) sync; [70,95) data; [95,105) launch (λ = 5 included)
    assert (60, 105, [25, 10, 10, 0, 0, 0]) in gaps


@pytest.mark.parametrize("engine", ENGINES)
def test_late_launch_then_long_wait_is_split(engine):
    # launched at 80 after the stream went idle at 78; λ = 5, so [78,85) is
    # host side (launch) and [85,100) dependency
    tl = timeline([(0, 0, 5, 78), (0, 80, 100, 110)])
    gaps, _, _ = device_gaps(tl, engine)
    assert (78, 100, [0, 0, 7, 0, 15, 0]) in gaps


def test_unknown_launch_and_tail():
    tl = timeline([(0, 0, 5, 10), (0, NONE, 30, 40)],
                  ops=[("a", 0, 1, OpFlag.LAUNCH), ("b", 41, 60, 0)])
    gaps, _, _ = device_gaps(tl)
    assert (10, 30, [0, 0, 0, 0, 0, 20]) in gaps
    assert (40, 60, [0, 0, 20, 0, 0, 0]) in gaps  # the tail: host time


def test_sync_inside_data_counts_as_data():
    tl = timeline([(0, 0, 5, 10), (0, 50, 55, 60)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 10, 40)],
                  syncs=[(20, 30, 0)])
    gaps, _, _ = device_gaps(tl)
    assert (10, 55, [30, 0, 15, 0, 0, 0]) in gaps


def test_profiler_dataloader_spans_count_as_data():
    tl = timeline([(0, 0, 5, 10), (0, 50, 55, 60)],
                  spans=[(SpanKind.USER, "enumerate(DataLoader)#_Iter.__next__", 12, 40)])
    gaps, _, _ = device_gaps(tl)
    assert (10, 55, [28, 0, 17, 0, 0, 0]) in gaps


def test_subtract():
    a = (np.array([0, 20, 50]), np.array([10, 40, 60]))
    b = (np.array([5, 25, 35]), np.array([8, 30, 45]))
    sb, se = subtract(a, b)
    assert list(zip(sb.tolist(), se.tolist())) == [(0, 5), (8, 10), (20, 25),
                                                   (30, 35), (50, 60)]
    assert subtract(a, (np.zeros(0, int), np.zeros(0, int)))[0].tolist() == [0, 20, 50]


@pytest.mark.parametrize("seed", range(4))
def test_windows_that_tile_the_trace_add_up(seed):
    # clipping gaps to windows is exact: windows that tile the trace give
    # the whole trace's idle time, cause by cause
    tl = random_timeline(seed)
    act = host_activity(tl)
    ln = lanes(tl, act)
    cuts = np.sort(np.random.default_rng(seed).integers(ln.lo, ln.hi, 25))
    edges = np.concatenate([[ln.lo], cuts, [ln.hi]])
    for grp in (ln.streams, ln.devices):
        parts = idle_in(grp, edges[:-1], edges[1:], act).sum(axis=1)
        whole = idle_in(grp, [ln.lo], [ln.hi], act)[:, 0]
        np.testing.assert_array_equal(parts, whole)
        per_group = [grp.amounts[a:b].sum(axis=0)
                     for a, b in zip(grp.gstart[:-1], grp.gstart[1:])]
        np.testing.assert_array_equal(whole, per_group)


@pytest.mark.parametrize("seed", range(4))
def test_classify_twins_agree(seed):
    tl = random_timeline(seed, n=500)
    act_nb = host_activity(tl, engine="numba")
    act_np = host_activity(tl, engine="numpy")
    a, b = lanes(tl, act_nb, "numba"), lanes(tl, act_np, "numpy")
    for x, y in ((a.streams, b.streams), (a.devices, b.devices)):
        for f in ("gb", "ge", "gnext", "amounts", "idle", "busy", "ib", "ie", "lead"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
        for k in x.queue:
            np.testing.assert_array_equal(x.queue[k], y.queue[k])
    rng = np.random.default_rng(seed)
    g = a.devices
    qa = g.gb + rng.integers(0, 50, len(g.gb))
    qb = g.ge - rng.integers(0, 50, len(g.gb))
    args = (g.gb, g.ge, g.nl, g.gnext != NONE, g.lam[g.gg], act_nb, qa, qb)
    np.testing.assert_array_equal(classify(*args, engine="numba"),
                                  classify(*args, engine="numpy"))


# -- launch or host: what the host did in the host part of a gap ----------------

def _idle_host(second_launch, extra_ops=(), threads=None, devices=None, **kw):
    # work [1100, 2000) launched at 1000 and the next launched at
    # ``second_launch`` (λ = 100); ops only around the launches (±1)
    rows = [(0, 1000, 1100, 2000), (0, second_launch, second_launch + 100,
                                    second_launch + 1000)]
    ops = [("a", 999, 1001, OpFlag.LAUNCH), ("b", second_launch - 1, second_launch + 1,
                                            OpFlag.LAUNCH)] + list(extra_ops)
    tl = timeline(rows, ops=ops)
    if threads is not None:
        tl = tl.replace(ops=tl.ops.replace(thread=np.asarray(threads)))
    if devices is not None:
        tl = tl.replace(ops=tl.ops.replace(device=np.asarray(devices, np.int16)))
    act = host_activity(tl, **kw)
    d = lanes(tl, act).devices
    return {(b, e): a for b, e, a in zip(d.gb.tolist(), d.ge.tolist(), d.amounts.tolist())}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_op_free_stretch_is_the_hosts(engine):
    # no op over [1001, 499_999), 498,998 ns ≥ host_gap_ns: host; the op
    # that launches, and its latency [500_000, 500_100), are launch
    gaps = _idle_host(500_000, engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 101, 497_999, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_short_op_free_stretch_is_launch_overhead(engine):
    # 148,998 ns between two ops of a thread: framework glue, launch
    assert _idle_host(150_000, engine=engine)[(2000, 150_100)] == [0, 0, 148_100, 0, 0, 0]
    # and host_gap_ns moves the line
    assert _idle_host(150_000, engine=engine, host_gap_ns=100_000)[(2000, 150_100)] == \
        [0, 0, 101, 147_999, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_op_on_any_thread_counts_as_launching(engine):
    # a worker thread dispatches over [100_000, 300_000): launch there,
    # host in the stretches without any op on either side of it
    gaps = _idle_host(500_000, extra_ops=[("c", 100_000, 300_000, 0)],
                      threads=[0, 0, 1], engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 200_101, 297_999, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_op_on_host_tensors_is_the_host_computing_not_launching(engine):
    # op c runs on CPU tensors (no device) over [100_000, 400_000), 300 µs
    # ≥ host_gap_ns, launching nothing: the host preprocessing a batch, so
    # the stretch from a to b is the host's, as if c were Python
    cpu = ("c", 100_000, 400_000, 0)
    gaps = _idle_host(500_000, extra_ops=[cpu], devices=[0, 0, NONE], engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 101, 497_999, 0, 0]
    # the same op on the device (a dispatch that launched nothing) is launch
    gaps = _idle_host(500_000, extra_ops=[cpu], devices=[0, 0, 0], engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 498_100, 0, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_host_ops_at_any_length_are_the_hosts_and_ops_around_a_launch_dispatch(engine):
    # a 50 µs CPU op (torch on a CPU tensor) is the host's own work, and so
    # is the glue around it: the whole stretch to the next launch is host
    gaps = _idle_host(500_000, extra_ops=[("c", 100_000, 150_000, 0)],
                      devices=[0, 0, NONE], engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 101, 497_999, 0, 0]
    # ... also where the stretch is short: 148 µs between two launches that
    # hold a 5 µs CPU op (an optimizer's CPU step counter) is the host's,
    # where without it the same stretch is launch overhead
    gaps = _idle_host(150_000, extra_ops=[("c", 60_000, 65_000, 0)],
                      devices=[0, 0, NONE], engine=engine)
    assert gaps[(2000, 150_100)] == [0, 0, 101, 147_999, 0, 0]
    assert _idle_host(150_000, engine=engine)[(2000, 150_100)] == [0, 0, 148_100, 0, 0, 0]
    # a long host-only op with a launch inside (a parent op, an annotation)
    # is dispatching
    gaps = _idle_host(500_000, extra_ops=[("c", 100_000, 400_000, 0),
                                          ("d", 200_000, 200_010, OpFlag.LAUNCH)],
                      devices=[0, 0, NONE, 0], engine=engine)
    assert gaps[(2000, 500_100)] == [0, 0, 498_100, 0, 0, 0]


def test_the_hosts_time_before_the_first_op_is_the_hosts():
    # the trace begins at a data span; the first op comes at 4: [0, 4) is
    # host (nothing was dispatching), [4, 10) the op and its latency
    tl = timeline([(0, 5, 10, 20), (0, 25, 30, 40)],
                  spans=[(SpanKind.USER, "setup", 0, 3)])
    gaps, _, _ = device_gaps(tl)
    assert (0, 10, [0, 0, 6, 4, 0, 0]) in gaps


def test_an_imported_trace_blames_an_idle_host_on_the_host():
    import os

    import cutimeline as ctl
    path = os.path.join(os.path.dirname(__file__), "..", "..", "data", "kineto",
                        "trace_filter", "sampled_rank-0.json.gz")
    rep = ctl.analyze(ctl.load(path))
    o = rep.overall
    assert o["host_ns"] > 0.2 * o["idle_ns"]
    # with no line between glue and an idle host, the stretches between ops
    # read launch (only the time before a thread's first op stays the host's)
    every = ctl.analyze(ctl.load(path), host_gap_ns=10**15).overall
    assert every["host_ns"] < 0.2 * o["host_ns"] and every["launch_ns"] > o["launch_ns"]


@pytest.mark.parametrize("seed", range(4))
def test_launch_and_host_twins_agree_with_short_host_gaps(seed):
    # host_gap_ns within the random ops' spacing: both causes in play
    tl = random_timeline(seed, n=500)
    out = []
    for engine in ENGINES:
        act = host_activity(tl, engine=engine, host_gap_ns=3_000)
        ln = _lanes(tl, act, [tl.start_ns], [tl.end_ns], engine)
        cuts = np.sort(np.random.default_rng(seed).integers(ln.lo, ln.hi, 12))
        win = idle_in(ln.devices, cuts[:-1], cuts[1:], act, engine)
        out.append((ln.devices.amounts, ln.streams.amounts, ln.streams.idle, win))
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)
    am = out[0][0]
    assert am[:, 2].sum() > 0 and am[:, 3].sum() > 0


@pytest.mark.parametrize("seed", range(6))
def test_launching_segments_agree_between_the_twins(seed):
    from cutimeline.analysis.idle.activity import launching
    rng = np.random.default_rng(seed)
    n = 500
    begin = np.cumsum(rng.integers(0, 3_000, n))
    if seed % 3 == 2:  # a few ops out of order: the kernel declines, the union sorts
        begin[rng.integers(0, n, 5)] -= 4_000
    end = begin + rng.integers(-200, 2_500, n)  # some end before they begin
    thread = np.zeros(n, np.int32) if seed % 2 == 0 else rng.integers(0, 3, n)
    for gap in (1, 500, 2_000, 0):
        a = launching(begin, end, thread, gap, "numba")
        b = launching(begin, end, thread, gap, "numpy")
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_sync_chains_of_host_activity_take_launches_in_any_order():
    """Ops out of time order (two threads interleaved): their launch begins
    are sorted before the chains are read (a recording's one launching
    thread needs no sort). A launch between two reads starts a new chain;
    none between them sums their waits."""
    L = OpFlag.LAUNCH
    tl = timeline(ops=[("a", 0, 10, L), ("b", 50, 60, L), ("c", 40, 45, L), ("d", 95, 99, L)],
                  syncs=[(20, 30), (70, 80), (84, 90)])
    assert host_activity(tl).chain().tolist() == [10, 10, 16]


@pytest.mark.parametrize("seed", range(3))
def test_host_compute_reads_the_same_in_time_order_or_shuffled(seed):
    # the same ops are the host computing in time order or shuffled, at any
    # length
    rng = np.random.default_rng(seed)
    n = 3000
    begin = np.cumsum(rng.integers(1, 300_000, n))
    end = begin + np.where(rng.random(n) < 0.05, rng.integers(200_000, 900_000, n),
                           rng.integers(0, 9_000, n))
    device = np.where(rng.random(n) < 0.5, NONE, 0).astype(np.int16)
    flags = rng.choice([0, int(OpFlag.LAUNCH), int(OpFlag.VIEW), int(OpFlag.SYNC)], n,
                       p=[0.5, 0.3, 0.1, 0.1]).astype(np.uint8)
    mine = host_compute(begin, end, device, flags)
    assert 0 < mine.sum() < ((device == NONE) & (flags == 0)).sum()  # some, not every one
    p = rng.permutation(n)
    np.testing.assert_array_equal(host_compute(begin[p], end[p], device[p], flags[p]),
                                  mine[p])
    # and by the definition, op by op
    lb = begin[(flags & int(OpFlag.LAUNCH)) != 0]
    want = [d == NONE and f == 0 and not ((lb >= b) & (lb < e)).any()
            for b, e, d, f in zip(begin, end, device, flags)]
    np.testing.assert_array_equal(mine, want)


def test_the_rules_table_is_stated_once_in_the_doc_and_mirrored_in_code():
    import re

    from cutimeline.analysis.idle import gaps
    from cutimeline.analysis.idle.gaps import RULES, Cause
    rows = re.findall(r"^ (\d)  (\S.*?)  +(\w+) ", gaps.__doc__, re.M)
    assert [(int(n), name.strip(), cause) for n, name, cause in rows] == \
        [(r.number, r.name, r.cause.name.lower()) for r in RULES]
    assert [r.number for r in RULES] == list(range(1, len(RULES) + 1))
    assert {r.cause for r in RULES} == set(Cause)  # every cause has its rule
