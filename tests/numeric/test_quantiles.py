"""Quantiles per group: selection and sorting agree, and match numpy."""

import numpy as np
import pytest

from cutimeline.numeric.quantiles import group_quantiles, quantile_inplace, quantile_pair_inplace


@pytest.mark.parametrize("seed", range(5))
def test_twins_agree_and_match_numpy(seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 50, 400).astype(float)  # many ties
    g = rng.integers(0, 4, 400)
    qs = [0, 0.25, 0.5, 0.95, 1]
    a = group_quantiles(v, g, 5, qs, engine="numba")
    b = group_quantiles(v, g, 5, qs, engine="numpy")
    np.testing.assert_array_equal(a, b)
    for k in range(4):
        np.testing.assert_allclose(a[k], np.quantile(v[g == k], qs))
    assert np.isnan(a[4]).all()


def test_quantile_inplace_single_and_sorted():
    assert quantile_inplace(np.array([5.0]), 0.95) == 5.0
    v = np.arange(101, dtype=float)
    assert quantile_inplace(v, 0.95) == 95.0


@pytest.mark.parametrize("n", [1, 2, 3, 20, 21, 400, 131_072, 200_003])
def test_quantile_pair_is_two_quantiles(n):
    rng = np.random.default_rng(n)
    v = rng.integers(0, 30, n).astype(float)  # ties
    if n > 1000:  # large: read through a sample's bracket; skewed, then sorted
        v = np.floor(rng.pareto(1.5, n) * 1000) if n % 2 else np.sort(v)
    for q1, q2 in ((0.5, 0.95), (0.25, 0.5), (0.5, 0.5), (0, 1)):
        got = quantile_pair_inplace(v.copy(), q1, q2)
        assert got == (quantile_inplace(v.copy(), q1), quantile_inplace(v.copy(), q2))
        # the NumPy twin (a sort), exactly
        assert got == tuple(group_quantiles(v, np.zeros(n, np.int64), 1, [q1, q2],
                                            engine="numpy")[0])
        np.testing.assert_allclose(got, np.quantile(v, [q1, q2]))


@pytest.mark.parametrize("seed", range(4))
def test_selection_agrees_with_a_sort(seed):
    from cutimeline.numeric.quantiles import _rank_pair, _select
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 20, int(rng.integers(1, 300))).astype(float)  # ties
    s = np.sort(v)
    for k in (0, len(v) // 3, len(v) - 1):
        w = v.copy()
        _select(w, k)
        assert w[k] == s[k] and (w[:k] <= w[k]).all() and (w[k + 1:] >= w[k]).all()
        np.testing.assert_array_equal(np.sort(w), s)
        assert _rank_pair(v.copy(), k) == (s[k], s[min(k + 1, len(v) - 1)])
    for q in (0, 0.3, 0.5, 0.95, 1):
        assert quantile_inplace(v.copy(), q) == \
            group_quantiles(v, np.zeros(len(v)), 1, [q], engine="numpy")[0, 0]


def test_a_bracket_gives_its_counts_and_the_value_just_above_it():
    from cutimeline.numeric.quantiles import _bracket_pass, _bracketed
    rng = np.random.default_rng(7)
    v = rng.permutation(np.repeat(np.arange(40.0), 3))  # ties at both ends
    b1, b2 = np.empty(len(v)), np.empty(len(v))
    c1, c2 = _bracket_pass(v, 10.0, 20.0, b1, 30.0, 30.0, b2)
    assert c1 == (30, 3, 3, 27) and c2 == (90, 3, 0, 0)
    assert sorted(b1[:27]) == sorted(np.repeat(np.arange(11.0, 20.0), 3))
    s = np.sort(v)
    for r in (30, 58, 62, 32):  # at lo, at hi, the value after hi, between
        assert _bracketed(v, r, 10.0, 20.0, b1.copy(), c1) == (s[r], s[r + 1])
    assert np.isnan(_bracketed(v, 70, 10.0, 20.0, b1.copy(), c1)[0])  # outside: select
