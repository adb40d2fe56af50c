"""kernels on a real GPU: stamps land in stream order, a spin lasts what it
was asked to by globaltimer and by CUDA events, and globaltimer ticks finely
enough to be useful.

What to expect from the probe: %globaltimer counts nanoseconds, but how often
it updates is up to the GPU and driver. Steps of 32 ns are commonly seen on
recent GPUs and steps of about 1 µs on others (or with other driver
settings); on H100/H200 (sm_90) the step should be at most about 1 µs. The
bounds below are loose on purpose: they catch a kernel that does not spin,
stamps out of order or a frozen timer, not a slow machine.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("cupy")

import cutimeline.devices.cuda.kernels as K

pytestmark = pytest.mark.gpu

SPIN_NS = 2_000_000  # 2 ms: long against launch latency and event resolution


def test_stamps_are_monotone_on_one_stream():
    stamper = K.Stamper(64)
    for slot in range(64):
        stamper.stamp(slot)
    got = stamper.read()
    assert got.written.all()
    assert (np.diff(got.globaltimer_ns) >= 0).all()
    # clock64 is per SM: compare only stamps taken on the same SM
    for sm in np.unique(got.sm):
        assert (np.diff(got.clock[got.sm == sm]) > 0).all()


def test_unwritten_slots_read_minus_one_and_reset_clears():
    stamper = K.Stamper(4)
    stamper.stamp(2)
    got = stamper.read()
    assert got.written.tolist() == [False, False, True, False]
    assert got.globaltimer_ns[0] == -1 and got.globaltimer_ns[2] > 0
    stamper.reset()
    assert not stamper.read().written.any()


def test_stamps_follow_the_work_between_them():
    stamper = K.Stamper(2)
    stamper.stamp(0)
    K.spin(SPIN_NS)
    stamper.stamp(1)
    got = stamper.read()
    assert got.globaltimer_ns[1] - got.globaltimer_ns[0] >= SPIN_NS


def test_stamps_go_to_the_stream_they_are_given():
    side = torch.cuda.Stream()
    stamper = K.Stamper(3)
    with torch.cuda.stream(side):  # torch's current stream is now `side`
        K.spin(SPIN_NS)
        stamper.stamp(0)
    stamper.stamp(1, stream=side)  # the same stream, named explicitly
    stamper.stamp(2, stream=side.cuda_stream)  # ... or by raw handle
    got = stamper.read()
    assert got.written.all()
    assert (np.diff(got.globaltimer_ns) >= 0).all()


def test_spin_lasts_its_duration_by_globaltimer_and_by_events():
    stamper = K.Stamper(2)
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    K.spin(10_000)  # first launch pays for loading the module
    begin.record()
    K.spin(SPIN_NS, stamper=stamper, begin_slot=0, end_slot=1)
    end.record()
    end.synchronize()
    got = stamper.read()
    by_timer = int(got.globaltimer_ns[1] - got.globaltimer_ns[0])
    assert by_timer >= SPIN_NS  # by construction of the loop
    assert by_timer < SPIN_NS + 100_000  # overshoot: about one timer step
    by_events = begin.elapsed_time(end) * 1e6  # ms -> ns
    # events are ~0.5 µs resolution; the upper bound allows launch latency
    assert SPIN_NS - 2_000 <= by_events < SPIN_NS + 1_000_000


def test_spin_of_zero_returns():
    stamper = K.Stamper(2)
    K.spin(0)  # without a stamper too (and the first launch loads the module)
    K.spin(0, stamper=stamper, begin_slot=0, end_slot=1)
    torch.cuda.synchronize()
    got = stamper.read()
    assert got.written.all()  # it ran to its end and wrote its last reading
    # at once: within the overshoot any spin may have (about one timer step)
    assert 0 <= got.globaltimer_ns[1] - got.globaltimer_ns[0] < 100_000


def test_the_buffer_is_shared_with_cupy():
    import cupy
    stamper = K.Stamper(2)
    stamper.stamp(1)
    view = stamper.as_cupy()
    torch.cuda.synchronize()
    assert view.shape == (2, 3) and view.dtype == cupy.int64
    assert int(view[1, 0]) == int(stamper.buffer[1, 0])
    view[0, 0] = 42  # same memory: torch sees the write
    cupy.cuda.Device().synchronize()
    assert int(stamper.buffer[0, 0]) == 42


def test_probe_granularity_is_sane():
    got = K.probe_granularity(200)
    assert len(got.steps_ns) == 200
    assert got.min_step_ns > 0  # the timer never stood still or went back
    assert got.min_step_ns <= got.typical_step_ns <= got.max_step_ns
    if torch.cuda.get_device_capability() >= (9, 0):  # H100, H200 and later
        assert got.typical_step_ns <= 1_100
    print(f"globaltimer step: min {got.min_step_ns} ns, typical "
          f"{got.typical_step_ns} ns, max {got.max_step_ns} ns, "
          f"{got.reads_per_step:g} reads per step")
