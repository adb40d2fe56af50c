"""numeric/queuedepth.py: the one queue-depth model (issue 47), its
helpers against NumPy, and ``stream_depths`` (the Chrome export's counter)
against a count by hand on both engines."""

from __future__ import annotations

import numpy as np
import pytest

from cutimeline.numeric.engines import ENGINES
from cutimeline.numeric.queuedepth import (ascending_nb, held_points, merge_counts_nb,
                                           queue_series, stream_depths)
from cutimeline.timeline.schema import NONE


@pytest.mark.parametrize("seed", range(3))
def test_the_kernels_helpers_agree_with_numpy(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, 200)  # ties between p and m
    s = np.sort(x)
    for v in (x, s):  # sorted already: returned as it is
        np.testing.assert_array_equal(ascending_nb(v), s)
    p, m = np.sort(x[:120]), np.sort(rng.integers(0, 50, 90))
    before_p, before_m = merge_counts_nb(p, m)
    np.testing.assert_array_equal(before_p, np.searchsorted(m, p, side="left"))
    np.testing.assert_array_equal(before_m, np.searchsorted(p, m, side="right"))


def test_held_points_keep_the_last_entry_of_each_time():
    t = np.array([1, 1, 2, 5, 5, 5])
    assert held_points(t).tolist() == [False, True, True, False, False, True]
    group = np.array([0, 0, 0, 0, 1, 1])
    assert held_points(t, group).tolist() == [False, True, True, True, False, True]
    assert held_points(t[:0]).tolist() == []


@pytest.mark.parametrize("engine", ENGINES)
def test_stream_depths_count_launched_unfinished_work(engine):
    rng = np.random.default_rng(5)
    n = 600
    device, stream = rng.integers(0, 2, n), rng.integers(0, 3, n) * 7
    begin = rng.integers(0, 10_000, n)
    end = begin + rng.integers(-5, 500, n)          # a few end before they begin
    launch = begin - rng.integers(0, 2_000, n)
    launch[rng.random(n) < 0.1] = NONE               # not counted: when unknown
    dev, st, t, d = stream_depths(device, stream, launch, begin, end, engine)
    keys = list(dict.fromkeys(zip(dev.tolist(), st.tolist())))
    assert keys == sorted(keys)
    for k in keys:
        mine = (device == k[0]) & (stream == k[1]) & (launch != NONE)
        at = (dev == k[0]) & (st == k[1])
        tk, dk = t[at], d[at]
        assert np.all(np.diff(tk) > 0)               # one point per time
        for probe in rng.integers(-2_000, 11_000, 40):
            want = int(((launch[mine] <= probe) &
                        (np.maximum(end, begin)[mine] > probe)).sum())
            j = np.searchsorted(tk, probe, side="right") - 1
            assert (dk[j] if j >= 0 else 0) == want


def test_queue_series_engines_agree():
    rng = np.random.default_rng(2)
    plus = rng.integers(0, 1_000, 300)
    minus = plus + rng.integers(0, 200, 300)
    order, starts = np.argsort(plus % 3, kind="stable"), np.array([0, 100, 200, 300])
    got = [queue_series(plus, minus, order, starts, e) for e in ENGINES]
    for t, d in got[1:]:
        np.testing.assert_array_equal(t, got[0][0])
        np.testing.assert_array_equal(d, got[0][1])
