"""Queue depth and CPU lead statistics: twins agree, and by hand."""

import numpy as np
import pytest

from cutimeline.analysis.idle.queues import lead_stats, queue_series, sample_stats, window_stats
from cutimeline.numeric.engines import ENGINES
from cutimeline.numeric.ordering import group_order
from cutimeline.timeline.schema import NONE


def random_queue(seed, n=300, groups=3):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, n)
    launch = rng.integers(0, 20_000, n) * 3  # a coarse grid: ties
    begin = launch + rng.integers(0, 600, n) * 3
    end = begin + rng.integers(0, 300, n) * 3
    order, starts = group_order(group, begin, groups + 1)  # one group empty
    return launch, begin, end, order, starts


def same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_queue_series_by_hand():
    # launched at 0, 1, 2; finished at 5, 6, 7: depth 1,2,3 then 2,1,0
    plus, minus = np.array([0, 1, 2]), np.array([5, 6, 7])
    order, starts = group_order(np.zeros(3), plus, 1)
    for engine in ENGINES:
        t, q = queue_series(plus, minus, order, starts, engine=engine)
        assert t.tolist() == [0, 1, 2, 5, 6, 7]
        assert q.tolist() == [1, 2, 3, 2, 1, 0]
    # a tie: the +1 comes first
    t, q = queue_series([0, 5], [5, 9], *group_order([0, 0], [0, 5], 1))
    assert q.tolist() == [1, 2, 1, 0]


@pytest.mark.parametrize("seed", range(5))
def test_twins_agree(seed):
    launch, begin, end, order, starts = random_queue(seed)
    same(queue_series(launch, end, order, starts, engine="numba"),
         queue_series(launch, end, order, starts, engine="numpy"))
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, 62_000, 12))
    w0 = np.concatenate([[-100], cuts[:-1]])       # window 0, then disjoint steps
    w1 = np.concatenate([[70_000], cuts[1:]])
    same(window_stats(launch, end, order, starts, w0, w1, engine="numba"),
         window_stats(launch, end, order, starts, w0, w1, engine="numpy"))
    same([sample_stats(launch, begin, order, starts, engine="numba")],
         [sample_stats(launch, begin, order, starts, engine="numpy")])
    lead = np.where(rng.random(len(begin)) < 0.1, NONE, begin - launch)
    same([lead_stats(lead, begin, order, starts, 1_000, 50_000, engine="numba")],
         [lead_stats(lead, begin, order, starts, 1_000, 50_000, engine="numpy")])
    of_row = np.empty(len(order), np.int64)  # the group of each row, given
    of_row[order] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    same([lead_stats(lead, begin, order, starts, 1_000, 50_000, engine="numba",
                     of_row=of_row)],
         [lead_stats(lead, begin, order, starts, 1_000, 50_000, engine="numpy")])
    part = order[::2]  # rows left out of every group
    ps = np.array([0, len(part)])
    same([lead_stats(lead, begin, part, ps, 1_000, 50_000, engine="numba")],
         [lead_stats(lead, begin, part, ps, 1_000, 50_000, engine="numpy")])
    every = np.argsort(begin, kind="stable")  # one group of all rows
    for given in (None, np.zeros(len(begin), np.int64)):
        same([lead_stats(lead, begin, every, ps * 0 + [0, len(begin)], 1_000, 50_000,
                         engine="numba", of_row=given)],
             [lead_stats(lead, begin, every, [0, len(begin)], 1_000, 50_000,
                         engine="numpy")])
    for lo, hi in ((1_000, 50_000), (-10**9, 10**9)):  # some rows left out, then none
        ok = (lead != NONE) & (begin >= lo) & (begin < hi)
        summary = (lead[ok].sum(), ok.sum(), lead[ok].max())
        same([lead_stats(lead, begin, every, [0, len(begin)], lo, hi, engine="numba",
                         summary=summary)],
             [lead_stats(lead, begin, every, [0, len(begin)], lo, hi, engine="numpy")])


def test_window_stats_by_hand():
    # depth 1 on [0,10), 2 on [10,20), 1 on [20,30), 0 after
    plus, minus = np.array([0, 10]), np.array([20, 30])
    order, starts = group_order(np.zeros(2), plus, 1)
    for engine in ENGINES:
        mean, lo, hi, q = window_stats(plus, minus, order, starts, [0, 0, 15],
                                       [40, 15, 25], engine=engine)
        assert mean[0].tolist() == [40 / 40, 20 / 15, 15 / 10]
        assert lo[0].tolist() == [0, 1, 1] and hi[0].tolist() == [2, 2, 2]
        # over [0,40): depth 0 for 10 ns, 1 for 20, 2 for 10: median 1, p95 2
        assert q[0].tolist() == [1, 2]


@pytest.mark.parametrize("seed", range(4))
def test_window_stats_deep_late_and_negative(seed):
    # window 0 opens when the queue is already deep (the kernel's histogram
    # meets its first depths there) and some work ends before its launch
    # (negative depths: min and max come from outside the histogram)
    rng = np.random.default_rng(seed)
    n = 400
    plus = np.sort(rng.integers(0, 10_000, n))
    minus = np.sort(plus + rng.integers(-300 if seed % 2 else 0, 3_000, n))
    order, starts = group_order(np.zeros(n, np.int64), plus, 1)
    for a0, b0 in ((5_000, 9_000), (-10, 20_000), (12_500, 12_600)):
        cuts = np.sort(rng.integers(a0, b0, 6))
        w0, w1 = np.concatenate([[a0], cuts[:-1]]), np.concatenate([[b0], cuts[1:]])
        got = window_stats(plus, minus, order, starts, w0, w1, engine="numba")
        same(got, window_stats(plus, minus, order, starts, w0, w1, engine="numpy"))
    t, d = queue_series(plus, minus, order, starts, engine="numpy")
    held = d[np.searchsorted(t, 5_000, side="right") - 1]  # the depth at 5,000
    assert window_stats(plus, minus, order, starts, [5_000], [5_001])[1][0, 0] == held


def test_overlapping_steps_fall_back_to_the_twin():
    plus, minus = np.array([0, 10]), np.array([20, 30])
    order, starts = group_order(np.zeros(2), plus, 1)
    a = window_stats(plus, minus, order, starts, [0, 0, 5], [40, 15, 25])
    b = window_stats(plus, minus, order, starts, [0, 0, 5], [40, 15, 25], engine="numpy")
    same(a, b)
    assert a[0][0].tolist() == [1.0, 20 / 15, 30 / 20]


def test_sample_stats_match_pandas_describe():
    pd = pytest.importorskip("pandas")
    launch, begin, end, order, starts = random_queue(7, groups=1)
    t, d = queue_series(launch, begin, order, starts)
    want = pd.Series(d[:2 * starts[1]]).describe()
    got = sample_stats(launch, begin, order, starts)[0]
    np.testing.assert_allclose(got, want.values, rtol=1e-12)


def test_lead_stats_by_hand():
    lead = np.array([10, 20, 30, NONE, 1000])
    begin = np.array([1, 2, 3, 4, 99])
    order, starts = group_order(np.zeros(5), begin, 1)
    for engine in ENGINES:
        out = lead_stats(lead, begin, order, starts, 0, 50, engine=engine)
        np.testing.assert_allclose(out[0], [20, 20, 29, 30])


@pytest.mark.parametrize("seed", range(3))
def test_the_kernels_helpers_agree_with_numpy(seed):
    from cutimeline.analysis.idle.queues import _rank
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, 200)
    s = np.sort(x)
    hist = np.bincount(x)
    for r in (0, 1, 57, len(x) - 1):
        assert _rank(hist, r) == s[r]


@pytest.mark.parametrize("n", [5, 300, 200_003])
def test_one_group_read_in_place_agrees_and_is_left_as_it_was(n):
    # every row counts: the kernel selects on the leads themselves (ints,
    # negative ones too), without a buffer, and must not reorder them
    rng = np.random.default_rng(n)
    begin = np.sort(rng.integers(0, 10 ** 9, n))
    lead = rng.integers(-50, 3_000, n) * (1 + (rng.random(n) < 0.01) * 1000)
    lead[lead == NONE] = 0
    kept = lead.copy()
    every, starts = np.arange(n), np.array([0, n])
    got = lead_stats(lead, begin, every, starts, 0, 10 ** 9, engine="numba")
    np.testing.assert_array_equal(lead, kept)
    np.testing.assert_array_equal(
        got, lead_stats(lead, begin, every, starts, 0, 10 ** 9, engine="numpy"))
    assert got[0, 3] == lead.max() and got[0, 0] == lead.sum() / n
    low = -np.abs(lead) - 2  # all below NONE: the max is still theirs
    np.testing.assert_array_equal(
        lead_stats(low, begin, every, starts, 0, 10 ** 9, engine="numba"),
        lead_stats(low, begin, every, starts, 0, 10 ** 9, engine="numpy"))
