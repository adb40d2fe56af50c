"""Lanes: grouping by stream and device, and window measures that add up."""

import numpy as np
import pytest

from cutimeline.analysis.idle.activity import host_activity
from cutimeline.analysis.idle.lanes import busy_in, idle_in, lanes, queue_depth
from cutimeline.timeline.schema import NONE

from handmade import random_timeline, timeline


def test_streams_and_devices():
    tl = timeline([(0, 0, 5, 10, "a", 0), (1, 0, 8, 20, "b", 0), (0, 0, 30, 40, "c", 1)])
    ln = lanes(tl, host_activity(tl), [tl.start_ns], [tl.end_ns])
    assert ln.stream_keys.tolist() == [[0, 0], [0, 1], [1, 0]]
    assert ln.device_keys.tolist() == [0, 1]
    assert ln.devices.n == 2 and ln.streams.n == 3
    d0 = ln.devices
    assert list(zip(d0.ib.tolist(), d0.ie.tolist())) == [(5, 20), (30, 40)]


@pytest.mark.parametrize("seed", range(3))
def test_busy_and_idle_tile_every_window(seed):
    tl = random_timeline(seed, n=400, streams=3)
    act = host_activity(tl)
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(tl.start_ns, tl.end_ns, 10))
    w0 = np.concatenate([[tl.start_ns], cuts[:-1]])
    w1 = np.concatenate([[tl.end_ns], cuts[1:]])
    ln = lanes(tl, act, w0, w1)
    for grp in (ln.streams, ln.devices):
        np.testing.assert_array_equal(grp.busy, busy_in(grp, w0, w1))
        np.testing.assert_array_equal(grp.idle, idle_in(grp, w0, w1, act))
        assert (grp.busy + grp.idle.sum(axis=2) == (w1 - w0)[None]).all()
        # steps (windows 1..) tile part of window 0
        np.testing.assert_array_equal(grp.busy[:, 1:].sum(axis=1),
                                      busy_in(grp, [w0[1]], [w1[-1]])[:, 0])


def test_queue_depth_and_lead():
    tl = timeline([(0, 0, 10, 20), (0, 1, 20, 30), (0, 2, 30, 40)])
    ln = lanes(tl, host_activity(tl), [tl.start_ns], [tl.end_ns])
    t, d = queue_depth(ln, ln.streams, 0)
    assert t.tolist() == [0, 1, 2, 20, 30, 40] and d.tolist() == [1, 2, 3, 2, 1, 0]
    assert ln.lead.tolist() == [10, 19, 28]
    assert ln.streams.lead[0, 3] == 28
    unknown = timeline([(0, NONE, 10, 20), (0, 5, 30, 40)])
    ln = lanes(unknown, host_activity(unknown), [unknown.start_ns], [unknown.end_ns])
    assert ln.lead.tolist() == [NONE, 25]
    t, d = queue_depth(ln, ln.streams, 0)
    assert d.tolist() == [1, 0]   # the row without a launch time is left out


def test_rows_ending_before_they_begin_are_clamped():
    tl = timeline([(0, 0, 10, 5), (0, 0, 20, 30)])
    ln = lanes(tl, host_activity(tl), [tl.start_ns], [tl.end_ns])
    assert ln.end.tolist() == [10, 30]
    assert tl.gpu.end_ns.tolist() == [5, 30]  # the Timeline itself is untouched


@pytest.mark.parametrize("seed", range(3))
def test_gap_rows_twins_agree(seed):
    from cutimeline.analysis.idle.lanes import _gap_rows, _gap_rows_np
    rng = np.random.default_rng(seed)
    n = 200
    launch = np.where(rng.random(n) < 0.1, NONE, rng.integers(0, 10**6, n))
    gnext = np.where(rng.random(150) < 0.1, NONE, rng.integers(0, n, 150))
    gprev = np.where(rng.random(150) < 0.1, NONE, rng.integers(0, n, 150))
    for sync_row in (rng.random(n) < 0.3, np.zeros(0, bool)):
        for x, y in zip(_gap_rows(gnext, gprev, launch, sync_row),
                        _gap_rows_np(gnext, gprev, launch, sync_row)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("seed", range(4))
def test_prepare_twins_agree(seed):
    from cutimeline.analysis.idle.lanes import _prepare, _prepare_np
    rng = np.random.default_rng(seed)
    n = 300
    begin = rng.integers(0, 10**6, n)
    launch = np.where(rng.random(n) < 0.1, NONE, begin - rng.integers(-50, 5_000, n))
    end = begin + rng.integers(-30, 8_000, n)  # some end before they begin
    for b, e, la in ((begin, end, launch), (begin, np.maximum(end, begin), begin - 7),
                     (begin[:0], end[:0], launch[:0])):
        a, want = _prepare(b, e, la), _prepare_np(b, e, la)
        assert a[2] is want[2]  # whether a launch is unknown
        for x, y in zip(a[:2], want[:2]):
            assert x.dtype == y.dtype == np.int64
            np.testing.assert_array_equal(x, y)
        for w0, w1 in ((0, 0), (200_000, 700_000), (-1, 10**7)):
            got = _prepare(b, e, la, w0, w1)[3]  # the leads counted in [w0, w1)
            assert got == _prepare_np(b, e, la, w0, w1)[3]
            lead = a[1]
            ok = (lead != NONE) & (b >= w0) & (b < w1)
            assert got[1] == ok.sum() and got[0] == lead[ok].sum()
            assert got[2] == (lead[ok].max() if ok.any() else -(2 ** 63))


@pytest.mark.parametrize("seed", range(3))
def test_one_stream_read_in_place_or_gathered_alike(seed):
    # one stream: rows in time order are read in place (numeric/columns.py says they
    # are sorted); ends or launches out of order are gathered and sorted
    from cutimeline.numeric.columns import column_facts
    tl = random_timeline(seed, n=300, streams=1)
    g = tl.gpu
    rng = np.random.default_rng(seed)
    variants = {"as recorded": g}
    end = g.end_ns.copy()
    k = int(rng.integers(1, len(end) - 1))
    end[k] = end[k - 1] + 10 ** 6  # a long row: the next ends before it
    variants["ends out of order"] = g.replace(end_ns=end)
    launch = g.launch_ns.copy()
    launch[k - 1], launch[k] = launch[k], launch[k - 1]
    variants["launches out of order"] = g.replace(launch_ns=launch)
    for name, gv in variants.items():
        t = tl.replace(gpu=gv)
        act = host_activity(t)
        got = {e: lanes(t, act, [t.start_ns], [t.end_ns], e) for e in ("numba", "numpy")}
        a, b = got["numba"].streams, got["numpy"].streams
        for x, y in ((a.P, b.P), (a.M, b.M), (a.lead, b.lead), (a.queue["mean"],
                     b.queue["mean"]), (a.queue["p95"], b.queue["p95"]), (a.order, b.order)):
            np.testing.assert_array_equal(x, y, err_msg=name)
        assert np.array_equal(a.P, np.sort(np.asarray(gv.launch_ns)))
        assert column_facts(gv, "begin_ns").sorted


def test_pairs_from_facts_are_pair_ids():
    from cutimeline.analysis.idle.lanes import _pairs
    from cutimeline.numeric.ids import pair_ids
    one = random_timeline(0, n=200, streams=1).gpu
    many = random_timeline(1, n=200, streams=3).gpu
    for g in (one, one.replace(device=np.full(len(one), 3), stream=np.full(len(one), 7)),
              many):
        for engine in ("numba", "numpy"):
            got, want = _pairs(g, engine), pair_ids(g.device, g.stream, engine)
            for x, y in zip(got, want):
                assert x.dtype == y.dtype == np.int64
                np.testing.assert_array_equal(x, y)
