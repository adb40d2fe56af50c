"""Sorted runs: merges and gathers, Numba and NumPy twins agree and both
are right."""

import numpy as np
import pytest

from cutimeline.numeric import runs
from cutimeline.numeric.ordering import group_order


def assert_same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("seed", range(3))
def test_merge_runs_and_gather_sorted(seed):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 4, 300)
    key = rng.integers(0, 50, 300)  # ties across runs
    order, starts = group_order(group, key, 4)
    v = key[order]
    for members in ([0, 2, 3], [1], []):
        a = runs.merge_runs(v, order, starts, members, engine="numba")
        np.testing.assert_array_equal(a, runs.merge_runs(v, order, starts, members,
                                                       engine="numpy"))
        rows = order[a]
        want = np.flatnonzero(np.isin(group, members))
        np.testing.assert_array_equal(rows, want[np.lexsort((want, key[want]))])
        m = runs.merge_values(v, starts, members, engine="numba")
        np.testing.assert_array_equal(m, runs.merge_values(v, starts, members, engine="numpy"))
        np.testing.assert_array_equal(m, np.sort(key[want]))
    # many runs (merged four at a time, on several levels), some empty
    group2 = rng.integers(0, 23, 2_000)
    key2 = rng.integers(0, 300, 2_000)
    order2, starts2 = group_order(group2, key2, 25)
    v2 = key2[order2]
    for members in (np.arange(25), np.arange(0, 25, 3)[::-1], [24, 3, 7, 0, 1, 2]):
        a = runs.merge_runs(v2, order2, starts2, members, engine="numba")
        np.testing.assert_array_equal(a, runs.merge_runs(v2, order2, starts2, members,
                                                       engine="numpy"))
        want = np.flatnonzero(np.isin(group2, members))
        np.testing.assert_array_equal(order2[a], want[np.lexsort((want, key2[want]))])
        np.testing.assert_array_equal(runs.merge_values(v2, starts2, members, "numba"),
                                      np.sort(key2[want]))
        for engine in ("numba", "numpy"):  # the runs read through the rows
            np.testing.assert_array_equal(runs.merge_rows(key2, order2, starts2, members,
                                                        engine), order2[a])
            assert runs.runs_sorted(key2, order2, starts2, members, engine)
    shuffled = order2.copy()
    shuffled[starts2[4]:starts2[5]] = shuffled[starts2[4]:starts2[5]][::-1]
    for engine in ("numba", "numpy"):
        assert not runs.runs_sorted(key2, shuffled, starts2, [1, 4], engine)
        assert runs.runs_sorted(key2, shuffled, starts2, [1, 5], engine)
    # full ties (equal value and tie) keep the earlier run first
    pos = runs.merge_runs(np.zeros(6, np.int64), np.zeros(6, np.int64), np.array([0, 2, 4, 6]),
                        [0, 1, 2], engine="numba")
    np.testing.assert_array_equal(pos, np.arange(6))
    x = rng.integers(0, 1000, 300)
    assert_same(runs.gather_sorted(x, order, starts, "numba"), runs.gather_sorted(x, order, starts,
                                                                     engine="numpy"))
    s = np.sort(x)
    for engine in ("numba", "numpy"):   # already sorted: the values themselves
        np.testing.assert_array_equal(
            runs.gather_sorted(s, np.arange(300), np.array([0, 300]), engine), s)


@pytest.mark.parametrize("at", [1, 4095, 4096, 5000, 9_998])
def test_gather_sorted_sees_an_order_that_is_not_the_identity(at):
    # the identity is checked in blocks of 4096: a swap at each edge
    x = np.sort(np.random.default_rng(at).integers(0, 10**9, 10_000))
    order = np.arange(10_000)
    order[at - 1], order[at] = at, at - 1
    starts = np.array([0, at, 10_000])  # the swap moves a row between groups
    assert not runs._is_identity(order) and runs._is_identity(np.arange(10_000))
    assert_same(runs.gather_sorted(x, order, starts, "numba"),
                runs.gather_sorted(x, order, starts, "numpy"))
    assert not np.array_equal(runs.gather_sorted(x, order, starts, "numba"), x)
