"""The interval kernels: Numba and NumPy twins agree, and both are right."""

import numpy as np
import pytest

from cutimeline.errors import CutimelineError
from cutimeline.numeric import engines, intervals as iv, ordering
from cutimeline.timeline.schema import NONE


def random_rows(seed, n=400, groups=4, ties=True, negative=False):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, n)
    grid = 7 if ties else 1  # a coarse grid makes equal begins common
    begin = rng.integers(0, 3000, n) * grid + 10_000
    dur = rng.integers(0 if not negative else -20, 60, n) * grid
    end = begin + dur
    launch = begin - rng.integers(0, 40, n) * grid
    launch[rng.random(n) < 0.2] = NONE
    return group, begin, end, launch


def both(f, *args, **kw):
    a = f(*args, engine="numba", **kw)
    b = f(*args, engine="numpy", **kw)
    return a, b


def assert_same(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("seed", range(6))
def test_twins_agree_on_random_rows(seed):
    group, begin, end, launch = random_rows(seed, negative=seed % 2 == 1)
    order, starts = ordering.group_order(group, begin, 4, engine="numba")
    assert_same((order, starts), ordering.group_order(group, begin, 4, engine="numpy"))
    assert_same(*both(iv.merge, begin, end, launch, order, starts, 9_000, 40_000))
    lean = both(iv.merge_lean, begin, end, launch, order, starts, 9_000, 40_000)
    assert_same(*lean)
    full = iv.merge(begin, end, launch, order, starts, 9_000, 40_000, engine="numba")
    assert_same(lean[0][1:], full[1:3] + full[4:])
    assert_same([lean[0][0]], [np.searchsorted(full[0], np.arange(5))])
    sb, se = iv.union(begin[:50], end[:50], engine="numba")
    assert_same((sb, se), iv.union(begin[:50], end[:50], engine="numpy"))
    sel = order[starts[1]:starts[2]]  # some rows, in begin order
    sub = iv.union(begin[sel], end[sel], engine="numba")
    assert_same(sub, iv.union(begin, end, engine="numba", rows=sel))
    assert_same(sub, iv.union(begin, end, engine="numpy", rows=sel))
    assert_same(*both(iv.union, np.sort(begin), end))
    t = np.sort(np.random.default_rng(seed).integers(0, 40_000, 300))
    t[::7] = t[::-7]  # not all increasing: the walk must restart correctly
    assert_same(*both(iv.count_le, sb, t))
    assert_same(*both(iv.coverage, sb, se, t, t + 500))


def test_merge_by_hand():
    # group 0: [0,10) [5,12) touch [12,20) -> one interval; [30,40)
    begin = np.array([0, 5, 12, 30, 100])
    end = np.array([10, 12, 20, 40, 150])
    launch = np.array([-1, 1, 2, 25, 90])
    group = np.array([0, 0, 0, 0, 1])
    order, starts = ordering.group_order(group, begin, 3)
    for engine in engines.ENGINES:
        ig, ib, ie, first, gg, gb, ge, gn, gp, lam = iv.merge(
            begin, end, launch, order, starts, -5, 200, engine=engine)
        assert ib.tolist() == [0, 30, 100] and ie.tolist() == [20, 40, 150]
        assert first.tolist() == [0, 3, 4]
        # gaps: lead-in, between, tail; group 1 lead-in/tail; group 2 empty
        assert list(zip(gg.tolist(), gb.tolist(), ge.tolist(), gn.tolist())) == [
            (0, -5, 0, 0), (0, 20, 30, 3), (0, 40, 200, NONE),
            (1, -5, 100, 4), (1, 150, 200, NONE), (2, -5, 200, NONE)]
        assert gp.tolist() == [NONE, 2, 3, NONE, 4, NONE]
        assert lam.tolist() == [4, 10, NONE]


def test_merge_tie_prefers_earliest_launch():
    begin = np.array([10, 10, 10])
    end = np.array([20, 15, 30])
    launch = np.array([8, 3, NONE])
    order, starts = ordering.group_order(np.zeros(3), begin, 1)
    for engine in engines.ENGINES:
        r = iv.merge(begin, end, launch, order, starts, 0, 30, engine=engine)
        assert r[3].tolist() == [1] and r[2].tolist() == [30]


def test_coverage_and_count_le():
    sb, se = np.array([10, 30]), np.array([20, 35])
    for engine in engines.ENGINES:
        assert iv.coverage(sb, se, [0, 15, 21, 0], [12, 32, 29, 100],
                           engine=engine).tolist() == [2, 7, 0, 15]
        assert iv.count_le(sb, [9, 10, 31, 5, 40], engine=engine).tolist() == \
            [0, 1, 2, 0, 2]
    assert iv.coverage([], [], [0], [5]).tolist() == [0]


def test_unknown_engine_is_an_error():
    with pytest.raises(CutimelineError, match="engine='cuda' is not known"):
        engines.check_engine("cuda")


def test_large_outputs_come_from_numpy_and_the_twins_still_agree():
    # past _BIG rows the kernels allocate through NumPy (huge pages)
    n = 2 * engines._BIG + 11
    for f, dtype in ((engines.empty_i64, np.int64), (engines.empty_f64, np.float64),
                     (engines.empty_bool, np.bool_)):
        for k in (5, n):
            a = f(k)
            assert a.dtype == dtype and a.shape == (k,) and a.flags.writeable
    group, begin, end, launch = random_rows(7, n=n)
    order, starts = ordering.group_order(group, begin, 4, engine="numba")
    assert_same((order, starts), ordering.group_order(group, begin, 4, engine="numpy"))
    assert_same(*both(iv.merge, begin, end, launch, order, starts, 9_000, 40_000))
    assert_same(*both(iv.union, np.sort(begin), end))

