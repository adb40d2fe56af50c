"""Step windows: a step is measured over its GPU work, not its host time."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.idle.steps import device_windows
from cutimeline.timeline.schema import NONE

from handmade import timeline


def test_a_step_runs_from_the_previous_steps_last_work_to_its_own():
    launch = [10, 20, 110, 210, NONE]
    begin = [50, 120, 150, 260, 5]
    end = [120, 140, 250, 290, 9]
    b, e = device_windows(launch, begin, end, [0, 100, 200], [100, 200, 300])
    # step 0 from its host begin (0: what came before its first work, 50,
    # is its own) to its last work's end (140); step 1 from there to 250,
    # step 2 to 290; the row without a launch time belongs to no step
    assert b.tolist() == [0, 140, 250] and e.tolist() == [140, 250, 290]


def test_a_step_without_gpu_work_ends_with_its_host_window():
    b, e = device_windows([10, 210], [50, 260], [120, 290], [0, 100, 200],
                          [100, 200, 300])
    assert b.tolist() == [0, 120, 200] and e.tolist() == [120, 200, 290]
    # never before the previous window ends: an empty window then
    b, e = device_windows([10], [150], [170], [0, 100], [100, 130])
    assert b.tolist() == [0, 170] and e.tolist() == [170, 170]
    # work queued before the first step began (launched earlier, outside
    # every step) opens it no later than that work
    b, e = device_windows([-20, 10], [-10, 20], [5, 30], [0], [100])
    assert b.tolist() == [0] and e.tolist() == [30]


def test_the_windows_tile_the_steps_from_the_first_ones_begin():
    rows = [(0, 100 * k + 1, 100 * k + 50, 100 * k + 150) for k in range(4)]
    tl = timeline(rows, steps=[(k, 100 * k, 100 * k + 100) for k in range(4)])
    s = ctl.analyze(tl).steps
    assert s["begin_ns"][0] == s["host_begin_ns"][0] == 0
    np.testing.assert_array_equal(s["end_ns"][:-1], s["begin_ns"][1:])
    assert s["duration_ns"].sum() == s["end_ns"][-1] - s["host_begin_ns"][0]


def test_a_host_a_step_ahead_of_a_busy_gpu_reads_gpu_bound():
    # each host step launches its kernel at once and the GPU, one step
    # behind, runs back to back: over host windows step 0 would be half
    # idle; over its GPU work every step is busy throughout
    rows = [(0, 100 * k + 1, 100 * k + 50, 100 * k + 150) for k in range(4)]
    tl = timeline(rows, steps=[(k, 100 * k, 100 * k + 100) for k in range(4)])
    s = ctl.analyze(tl).steps[1:]  # step 0 opens with the host's first launch
    assert set(s["verdict"]) == {"GPU-bound"} and (s["busy_frac"] == 1.0).all()
    assert s["begin_ns"].tolist() == [150, 250, 350]
    assert s["host_begin_ns"].tolist() == [100, 200, 300]
    np.testing.assert_array_equal(s["end_ns"][:-1], s["begin_ns"][1:])


def test_steps_without_gpu_rows_keep_their_host_windows():
    tl = timeline(ops=[("aten::add", 10, 20, 0)], steps=[(0, 0, 50), (1, 50, 90)])
    s = ctl.analyze(tl).steps
    assert s["begin_ns"].tolist() == s["host_begin_ns"].tolist() == [0, 50]
    assert set(s["verdict"]) == {"host-only"} and set(s["cause"]) == {""}


@pytest.mark.parametrize("seed", range(4))
def test_the_twins_agree_in_launch_order_and_out_of_it(seed):
    rng = np.random.default_rng(seed)
    n = 400
    launch = np.sort(rng.integers(-3 if seed == 2 else 0, 10_000, n))  # 2: some below NONE
    launch[rng.random(n) < 0.1] = NONE
    if seed % 2:  # out of launch order: the kernel declines, the twin's sort runs
        launch = rng.permutation(launch)
    else:
        launch = np.sort(launch)
    begin = np.where(launch == NONE, rng.integers(0, 10_000, n), launch) + \
        rng.integers(0, 500, n)
    end = begin + rng.integers(-50, 800, n)  # some end before they begin
    hb = np.sort(rng.integers(-5, 10_000, 12))
    he = hb + rng.integers(0, 3_000, 12)  # overlapping, some empty
    got = [device_windows(launch, begin, end, hb, he, engine=e) for e in ("numba", "numpy")]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    fb, fe = hb - 7, he + 7
    got = [device_windows(launch, begin, end, hb, he, fb, fe, e) for e in ("numba", "numpy")]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    # the caller's word on the launches' order (numeric/columns.py) gives the same windows
    in_order = bool(np.all(launch[1:] >= launch[:-1]))
    told = device_windows(launch, begin, end, hb, he, fb, fe, "numba", in_order)
    for a, b in zip(told, got[1]):
        np.testing.assert_array_equal(a, b)
