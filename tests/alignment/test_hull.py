"""hull.py: the aligner's Numba kernels (upper hull, sync deadlines, host
times of events) against their NumPy twins and against brute force."""

import numpy as np
import pytest

from cutimeline.alignment import hull
from cutimeline.timeline.schema import NONE

BACKENDS = ("numba", "numpy")


def _points(rng, n, ties):
    raw = np.sort(rng.integers(0, 10**9, n)) if not ties else \
        rng.integers(0, 200, n) * 5_000_000
    rng.shuffle(raw)
    host = raw + 10**12 + rng.integers(-50_000, 0, n) + (raw * 3e-5).astype(np.int64)
    return raw.astype(np.int64), host.astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sign", (1.0, -1.0))
def test_hull_twins_agree_and_match_a_plain_monotone_chain(seed, sign):
    rng = np.random.default_rng(seed)
    raw, host = _points(rng, int(rng.integers(1, 40_000)), ties=seed % 2 == 1)
    ref_raw, ref_off = int(raw[0]), int(host[0] - raw[0])
    got = {b: hull.upper_hull(raw, host, ref_raw, ref_off, sign, b) for b in BACKENDS}
    for k in range(2):
        assert np.array_equal(got["numba"][k], got["numpy"][k])
    u = (raw - ref_raw).astype(float)
    v = sign * (host - raw - ref_off).astype(float)
    plain = hull._chain_np(u, v, np.argsort(u, kind="stable"))
    assert np.array_equal(got["numpy"][0], u[plain])
    assert np.array_equal(got["numpy"][1], v[plain])


def test_hull_is_upper_and_convex():
    rng = np.random.default_rng(1)
    raw, host = _points(rng, 20_000, ties=False)
    hu, hv = hull.upper_hull(raw, host, 0, 10**12, 1.0)
    u, v = raw.astype(float), (host - raw - 10**12).astype(float)
    assert np.all(v <= np.interp(u, hu, hv) + 1e-6)
    s = np.diff(hv) / np.diff(hu)
    assert np.all(np.diff(s) < 0) and np.all(np.diff(hu) > 0)


@pytest.mark.parametrize("seed", range(4))
def test_deadline_and_evaluation_twins_agree(seed):
    rng = np.random.default_rng(seed)
    n, m = 5000, 60
    dev = rng.integers(0, 2, n).astype(np.int16)
    stream = rng.integers(0, 4, n) * 7 + 3
    last = rng.integers(-1, n, m)
    sy_dev = dev[np.maximum(last, 0)].astype(np.int64)
    sy_stream = np.where(rng.random(m) < 0.5, NONE, stream[np.maximum(last, 0)])
    end = rng.integers(0, 10**9, m)
    ceil = hull.deadlines(dev, stream, last, sy_dev, sy_stream, end)
    want = np.full(n, np.iinfo(np.int64).max)
    for i in range(m):
        if last[i] < 0:
            continue
        on = (dev == sy_dev[i]) & (np.arange(n) <= last[i])
        if sy_stream[i] != NONE:
            on &= stream == sy_stream[i]
        want[on] = np.minimum(want[on], end[i])
    assert np.array_equal(ceil, want)
    raw = rng.integers(-10**12, 10**15, n)
    floor = np.where(rng.random(n) < 0.3, raw + 10**6, -2**62)
    line = (np.array([10**14, -5]), np.array([3 * 10**14, 7]),
            np.array([1 + 3e-5, 1 - 8e-5]))
    syncs = (last, sy_dev, sy_stream, end)
    got = [hull.host_times(raw, dev, stream, floor, *line, *syncs, backend=b)
           for b in BACKENDS]
    assert np.array_equal(got[0], got[1])
    free = hull.host_times(raw, dev, stream, np.full(n, -2**62), *line,
                           *(a[:0] for a in syncs))
    assert np.array_equal(got[0], np.minimum(np.maximum(free, floor), ceil))
    assert np.any(got[0] != free)


def test_auto_aligns_small_recordings_without_a_kernel(monkeypatch):
    from cutimeline.numeric import engines
    rng = np.random.default_rng(3)
    raw, host = _points(rng, 3000, ties=False)
    args = (raw, np.zeros(3000, np.int16), np.zeros(3000, np.int64), host - 10**6,
            [0], [10**12], [1.0], np.array([2999]), np.array([0]), np.array([NONE]),
            np.array([2 * 10**12]))
    want = (hull.upper_hull(raw, host, 0, 10**12, 1.0, "numba"),
            hull.host_times(*args, backend="numba"))

    def ran(*a):
        raise AssertionError("a Numba kernel ran")
    monkeypatch.setitem(hull._KERNELS, "numba", (ran,) * 4)
    monkeypatch.setattr(hull, "_host_times_nb", ran)
    got = hull.upper_hull(raw, host, 0, 10**12, 1.0), hull.host_times(*args)  # "auto"
    for a, b in zip(got[0], want[0]):
        assert np.array_equal(a, b)
    assert np.array_equal(got[1], want[1])
    monkeypatch.setattr(engines, "AUTO_NUMBA_ROWS", 1000)  # from 1000 rows: the kernels
    with pytest.raises(AssertionError, match="kernel ran"):
        hull.upper_hull(raw, host, 0, 10**12, 1.0)
    with pytest.raises(AssertionError, match="kernel ran"):
        hull.host_times(*args)
