"""Step windows: a step is measured over its GPU work, not its host time."""

import numpy as np

import cutimeline as ctl
from cutimeline.analysis.steps import device_windows
from cutimeline.timeline.schema import NONE

from handmade import timeline


def test_a_step_runs_from_its_first_work_to_the_next_steps_first_work():
    launch = [10, 20, 110, 210, NONE]
    begin = [50, 120, 150, 260, 5]
    end = [120, 140, 250, 290, 9]
    b, e = device_windows(launch, begin, end, [0, 100, 200], [100, 200, 300])
    # step 1's first work starts at 150; the last step ends with its host
    # window at 300, after its work (290); the row without a launch time
    # belongs to no step
    assert b.tolist() == [50, 150, 260] and e.tolist() == [150, 260, 300]
    b, e = device_windows(launch, begin, [120, 140, 250, 390, 9], [0, 100, 200],
                          [100, 200, 300])
    assert e.tolist() == [150, 260, 390]  # ... or with its work, if later


def test_a_step_without_gpu_work_keeps_its_host_window():
    b, e = device_windows([10, 210], [50, 260], [120, 290], [0, 100, 200],
                          [100, 200, 300])
    assert b.tolist() == [50, 100, 260] and e.tolist() == [100, 260, 300]
    # the step before one without work ends at that step's host begin,
    # unless that would end it before it began: then with its own work
    b, e = device_windows([10], [150], [170], [0, 100], [100, 200])
    assert b.tolist() == [150, 100] and e.tolist() == [170, 200]


def test_a_host_a_step_ahead_of_a_busy_gpu_reads_gpu_bound():
    # each host step launches its kernel at once and the GPU, one step
    # behind, runs back to back: over host windows step 0 would be half
    # idle; over its GPU work every step is busy throughout
    rows = [(0, 100 * k + 1, 100 * k + 50, 100 * k + 150) for k in range(4)]
    tl = timeline(rows, steps=[(k, 100 * k, 100 * k + 100) for k in range(4)])
    s = ctl.analyze(tl).steps
    assert set(s["verdict"]) == {"GPU-bound"} and (s["busy_frac"] == 1.0).all()
    assert s["begin_ns"].tolist() == [50, 150, 250, 350]
    assert s["host_begin_ns"].tolist() == [0, 100, 200, 300]
    np.testing.assert_array_equal(s["end_ns"][:-1], s["begin_ns"][1:])


def test_steps_without_gpu_rows_keep_their_host_windows():
    tl = timeline(ops=[("aten::add", 10, 20, 0)], steps=[(0, 0, 50), (1, 50, 90)])
    s = ctl.analyze(tl).steps
    assert s["begin_ns"].tolist() == s["host_begin_ns"].tolist() == [0, 50]
    assert set(s["verdict"]) == {"host-only"} and set(s["cause"]) == {""}
