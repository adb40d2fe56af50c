"""Row orders: the Numba kernels of ordering.py and their NumPy twins agree."""

import numpy as np
import pytest

from cutimeline.numeric import ordering


def assert_same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("seed", range(4))
def test_group_order_twins_agree(seed):
    rng = np.random.default_rng(seed)
    n = 500
    group = rng.integers(0, 6, n)  # group 6 of 7 stays empty
    key = rng.integers(0, 40, n)   # ties: the order among them is the rows'
    grouped = np.sort(key)         # sorted already: the kernel moves nothing
    for k in (key, grouped, key[:0]):
        # one group: the kernel, or the check that finds it sorted already
        for n_groups, gg in ((7, group[:len(k)]), (1, np.zeros(len(k), np.int64))):
            got = ordering.group_order(gg, k, n_groups, engine="numba")
            want = ordering.group_order(gg, k, n_groups, engine="numpy")
            assert_same(got[0], want[0])
            assert_same(got[1], want[1])


@pytest.mark.parametrize("seed", range(4))
def test_sortedness_twins_agree(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, 300)
    cases = [x, np.sort(x), np.sort(x)[::-1], np.zeros(7, np.int64), x[:1], x[:0]]
    late = np.sort(x)
    late[100] = late[101] + 1  # one step down in the middle
    cases.append(late)
    long = np.sort(rng.integers(-2**62, 2**62, 10_000))  # blocks of 4096
    for at in (1, 4095, 4096, 4097, 8192, 9_999):  # a step down at each edge
        c = long.copy()
        c[at] = c[at - 1] - 1
        cases.append(c)
    cases += [long, long.astype(np.int32)[::-1].copy()]
    for c in cases:
        want = bool(np.all(c[1:] >= c[:-1]))
        assert ordering.is_sorted_nb(c) is want
        assert ordering.is_sorted(c, "numba") is ordering.is_sorted(c, "numpy") is want
        a, b = ordering.sort_order(c, "numba"), ordering.sort_order(c, "numpy")
        assert (a is None) is (b is None) is want
        if a is not None:
            assert_same(a, b)
        assert_same(ordering.sorted_copy(c, "numba"), ordering.sorted_copy(c, "numpy"))
