"""Pixel-resolution reduction: checked against brute force on random rows."""

from __future__ import annotations

import numpy as np
import pytest

from cutimeline.rendering import pixels as px


def brute_cover(lane, begin, end, n_lanes, cols):
    """Boolean (lane, column) coverage: each row paints the columns from
    the one its begin falls in to the one before its end's ceiling, at
    least one, clipped to the window."""
    out = np.zeros((n_lanes, cols.width), bool)
    for g, b, e in zip(lane, begin, end):
        if b >= cols.w1 or max(e, b + 1) <= cols.w0:
            continue
        c0 = min(max((b - cols.w0) * cols.width // cols.span, 0), cols.width)
        c1 = min(max(-((-(e - cols.w0) * cols.width) // cols.span), 0), cols.width)
        c1 = max(c1, min(c0 + 1, cols.width))
        c0 = min(c0, c1 - 1)
        out[g, c0:c1] = True
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_runs_cover_exactly_the_painted_columns(seed, engine):
    rng = np.random.default_rng(seed)
    n, lanes = 3000, 5
    begin = rng.integers(-50_000, 1_050_000, n)
    end = begin + rng.integers(0, 30_000, n) * (rng.random(n) < 0.9)
    lane = rng.integers(0, lanes, n)
    cols = px.Columns(0, 1_000_000, 137)
    g, c0, c1 = px.runs(lane, begin, end, lanes, cols, engine)
    got = np.zeros((lanes, cols.width), bool)
    for gg, a, b in zip(g, c0, c1):
        assert not got[gg, a:b].any()  # runs are disjoint
        got[gg, a:b] = True
    assert (got == brute_cover(lane, begin, end, lanes, cols)).all()
    # runs that touch are merged: every run is followed by a free column
    for k in range(lanes):
        mine = g == k
        assert (c0[mine][1:] > c1[mine][:-1]).all()


def test_runs_engines_agree_and_many_rows_become_few_runs():
    rng = np.random.default_rng(7)
    n = 200_000
    begin = np.sort(rng.integers(0, 10**9, n))
    end = begin + rng.integers(100, 2_000, n)
    lane = rng.integers(0, 3, n)
    cols = px.Columns(0, 10**9, 800)
    a = px.runs(lane, begin, end, 3, cols, "numba")
    b = px.runs(lane, begin, end, 3, cols, "numpy")
    for x, y in zip(a, b):
        assert (x == y).all()
    assert len(a[0]) <= 3 * 800 // 2 + 3


def test_runs_of_nothing():
    g, c0, c1 = px.runs([], [], [], 2, px.Columns(0, 100, 10))
    assert len(g) == len(c0) == len(c1) == 0


def brute_step_max(t, d, cols):
    out = []
    for c in range(cols.width):
        a, b = cols.time(c), cols.time(c + 1)
        # the value at a (last step at or before a), then every step in (a, b)
        before = [v for x, v in zip(t, d) if x <= a]
        at_a = before[-1] if before else 0
        # of several steps at one instant only the last counts
        inside = [v for i, (x, v) in enumerate(zip(t, d))
                  if a < x < b and (i + 1 == len(t) or t[i + 1] != x)]
        out.append(max([at_a] + inside))
    return np.array(out)


@pytest.mark.parametrize("seed", range(3))
def test_step_max_is_the_largest_value_in_each_column(seed):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, 1000, 60))
    d = rng.integers(0, 9, 60)
    cols = px.Columns(100, 900, 23)
    assert (px.step_max(t, d, cols) == brute_step_max(t, d, cols)).all()


def test_step_max_ignores_zero_length_spikes():
    # +1 and −1 at the same instant (a launch as the previous work ends)
    t = np.array([10, 50, 50, 90])
    d = np.array([1, 2, 1, 0])
    assert px.step_max(t, d, px.Columns(0, 100, 10)).tolist() == \
        [0, 1, 1, 1, 1, 1, 1, 1, 1, 0]


def test_envelope_per_column():
    t = np.array([5, 1, 15, 12, 99, 100, -1])
    v = np.array([3, 7, 2, 9, 4, 8, 8])
    c, lo, hi = px.envelope(t, v, px.Columns(0, 100, 10))
    assert c.tolist() == [0, 1, 9]
    assert lo.tolist() == [3, 2, 4] and hi.tolist() == [7, 9, 4]


def test_even_sample():
    assert px.even_sample(5, 10).tolist() == [0, 1, 2, 3, 4]
    s = px.even_sample(1000, 10)
    assert len(s) == 10 and s[0] == 0 and s[-1] == 999
    assert np.ptp(np.diff(s)) <= 1
    assert len(px.even_sample(1000, 0)) == 0


def test_columns_floor_ceil_and_time():
    cols = px.Columns(1000, 2000, 10)  # 100 ns per column
    assert cols.floor([1000, 1099, 1100, 999]).tolist() == [0, 0, 1, -1]
    assert cols.ceil([1000, 1001, 1100]).tolist() == [0, 1, 1]
    assert cols.time([0, 1, 10]).tolist() == [1000, 1100, 2000]
    assert cols.ms([10]).tolist() == pytest.approx([0.001])
    odd = px.Columns(100, 900, 23)  # columns of 34.78 ns: time() is exact
    c = np.arange(24)
    assert (odd.floor(odd.time(c)) == c).all()
    assert (odd.floor(odd.time(c) - 1) == c - 1).all()


@pytest.mark.parametrize("seed", range(5))
def test_coverage_is_the_time_each_column_holds(seed):
    rng = np.random.default_rng(seed)
    cols = px.Columns(1_000, 1_000 + 997_003, int(rng.integers(1, 300)))
    n, lanes = 400, 3
    begin = rng.integers(0, 1_100_000, n)
    end = begin + rng.integers(0, 200_000, n)
    lane = rng.integers(-1, lanes, n)
    got = px.coverage(lane, begin, end, lanes, cols)
    want = np.zeros((lanes, cols.width))
    starts = cols.time(np.arange(cols.width + 1))
    for k, b, e in zip(lane, begin, end):
        if k < 0:
            continue
        want[k] += np.maximum(np.minimum(e, starts[1:]) - np.maximum(b, starts[:-1]), 0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
