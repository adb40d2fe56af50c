"""Idle time by cause per window: the kernel and its twin agree, and a
window's amounts are exactly those of the gaps' parts inside it."""

import numpy as np
import pytest

from cutimeline.analysis.idle.attribution import attribute
from cutimeline.analysis.idle.activity import host_activity
from cutimeline.analysis.idle.gaps import classify
from cutimeline.analysis.idle.lanes import lanes
from cutimeline.timeline.schema import NONE

from handmade import random_timeline


def gaps_of(tl):
    act = host_activity(tl)
    d = lanes(tl, act, [tl.start_ns], [tl.end_ns]).streams
    return act, d, (d.gb, d.ge, d.nl, d.gnext != NONE, d.lam[d.gg], d.gstart)


@pytest.mark.parametrize("seed", range(4))
def test_twins_agree_on_any_windows(seed):
    tl = random_timeline(seed, n=400, streams=3)
    act, d, args = gaps_of(tl)
    rng = np.random.default_rng(seed)
    w0 = rng.integers(tl.start_ns, tl.end_ns, 30)  # overlapping, unsorted
    w1 = w0 + rng.integers(0, (tl.end_ns - tl.start_ns) // 3, 30)
    after = rng.random(len(d.gb)) < 0.2
    a = attribute(*args, act, w0, w1, "numba", after)
    b = attribute(*args, act, w0, w1, "numpy", after)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_window_amounts_are_those_of_the_parts_inside():
    tl = random_timeline(5, n=300, streams=2)
    act, d, args = gaps_of(tl)
    w0, w1 = np.array([tl.start_ns + 12_345]), np.array([tl.end_ns - 54_321])
    _, win = attribute(*args, act, w0, w1)
    for g in range(d.n):
        s, e = d.gstart[g], d.gstart[g + 1]
        part = classify(d.gb[s:e], d.ge[s:e], d.nl[s:e], d.gnext[s:e] != NONE,
                        d.lam[d.gg[s:e]], act, np.full(e - s, w0[0]),
                        np.full(e - s, w1[0]), engine="numpy")
        np.testing.assert_array_equal(win[g, 0], part.sum(axis=0))


def test_after_sync_turns_host_time_into_sync():
    tl = random_timeline(2, n=200, streams=1)
    act, d, args = gaps_of(tl)
    plain, _ = attribute(*args, act, [tl.start_ns], [tl.end_ns])
    marked, _ = attribute(*args, act, [tl.start_ns], [tl.end_ns], "numba",
                          np.ones(len(d.gb), bool))
    host = plain[:, :3].sum(axis=1)
    assert (marked[:, :3].sum(axis=1) == host).all()     # host time stays host
    assert (marked[:, 1] >= plain[:, 1]).all()           # but more of it is sync
    np.testing.assert_array_equal(marked[:, 3:], plain[:, 3:])


@pytest.mark.parametrize("seed", range(4))
def test_twins_agree_on_steps(seed):
    # window 0 anywhere, then sorted disjoint windows (the steps: the
    # kernel sums them on its pass over the gaps), some empty, some touching
    tl = random_timeline(seed + 10, n=400, streams=3)
    act, d, args = gaps_of(tl)
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(tl.start_ns - 5_000, tl.end_ns + 5_000, 24))
    w0 = np.concatenate([[rng.integers(tl.start_ns, tl.end_ns)], cuts[0::2]])
    w1 = np.concatenate([[tl.end_ns - rng.integers(0, 50_000)], cuts[1::2]])
    w1[3] = w0[3]                # an empty step
    w0[5] = w1[4]                # steps that touch
    after = rng.random(len(d.gb)) < 0.2
    a = attribute(*args, act, w0, w1, "numba", after)
    b = attribute(*args, act, w0, w1, "numpy", after)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_windows_alone_are_the_same():
    tl = random_timeline(4, n=300, streams=2)
    act, d, args = gaps_of(tl)
    w0, w1 = [tl.start_ns, tl.start_ns + 5_000], [tl.end_ns, tl.end_ns - 7_000]
    full = attribute(*args, act, w0, w1)
    bare = attribute(*args, act, w0, w1, amounts=False)
    assert bare[0] is None
    np.testing.assert_array_equal(bare[1], full[1])
    # the lanes keep the windows only and classify the gaps when asked
    assert d._amounts is None
    np.testing.assert_array_equal(d.amounts, full[0])


@pytest.mark.parametrize("seed", range(3))
def test_the_kernels_walks_agree_with_numpy(seed):
    from cutimeline.analysis.idle.attribution import _count_from, _covered
    rng = np.random.default_rng(seed)
    b = np.unique(rng.integers(0, 10_000, 100)) * 3  # sorted, disjoint segments
    e = b + rng.integers(0, 3, len(b))
    pre = np.concatenate([[0], np.cumsum(e - b)])  # as ``attribute`` makes it
    t = np.sort(rng.integers(-10, 31_000, 80))
    h = 0
    for x in t:  # forward, a few rows or many (past 16: a bisection)
        h = _count_from(b, x, h)
        assert h == np.searchsorted(b, x, side="right")
    for x in t[::7]:
        c = np.searchsorted(b, x, side="right")
        want = (np.clip(np.minimum(e, x) - b, 0, None))[:c].sum()
        assert _covered(b, e, pre, x, c) == want
