"""eventclock.py: the event pool never makes the host wait, and the event
tick is measured at start; on the fake GPU of ``tests/fakecuda.py``, whose
calls cost host time (``call_ns``) and whose device can fall behind."""

import numpy as np
import pytest

from cutimeline.devices.cuda import gpu as devices
from cutimeline.devices.cuda import CudaDevice
from cutimeline.devices.cuda.eventclock import EVENT_TICK_NS, TICK_BURST
from cutimeline.devices.clockread import read_error_ns
from cutimeline.timeline.schema import EventKind

from fakecuda import FakeCuda

CALL_NS = 500  # what each call into the fake costs the host


@pytest.fixture
def fake(monkeypatch):
    api = FakeCuda()
    api.call_ns = CALL_NS
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    return api


def drive(dev, api, n, gap_ns, streams=(0, 1)):
    """``n`` ops, each BEGIN, ``gap_ns`` of launch, END, on alternating
    streams; the host time each begin/end call took, and the true device
    time each of their events ran at, in record order."""
    calls, ran = [], []
    record = api.record

    def logged(event, stream, index):
        record(event, stream, index)
        ran.append(api.event_ns(event.done_ns))
    api.record = logged
    try:
        for i in range(n):
            s = streams[i % len(streams)]
            t0 = api.t
            dev.begin(s, i)
            calls.append((t0, api.t))
            api.advance(gap_ns)
            t0 = api.t
            dev.end(s, i, None, (), {}, None)
            calls.append((t0, api.t))
    finally:
        del api.record
    return np.array(calls, np.int64), np.array(ran, np.int64)


def unexplained(calls, pauses, limit_ns):
    """The calls longer than ``limit_ns`` that no pause covers."""
    long = calls[calls[:, 1] - calls[:, 0] > limit_ns]
    return [c for c in long.tolist()
            if not any(p0 >= c[0] and p1 <= c[1] and (c[1] - c[0]) - (p1 - p0) <= limit_ns
                       for p0, p1 in pauses)]


def test_a_slow_device_never_stalls_the_host_and_each_refill_is_a_pause(fake):
    # the device runs an event every 30 µs while the host launches one op
    # (two events) every ~6 µs: it falls ever further behind (180 ms by the
    # end), so the events it has run are far fewer than those in flight
    fake.spacing_ns = 30_000
    dev = CudaDevice(chunk=64, pings=1)
    seen = []
    dev.on_pause = lambda t0, t1: seen.append((t0, t1))
    dev.start()
    syncs = fake.syncs
    calls, ran = drive(dev, fake, 3000, gap_ns=5_000)
    assert fake.syncs == syncs  # nothing waited for the device while recording
    assert fake.queries > 0     # it was asked, never waited for
    h = dev.harvest()
    cuda = h.meta["cuda"]
    pauses = [tuple(p) for p in cuda["pool_pauses"]]
    assert pauses == seen and len(pauses) >= 10
    # it grew by whole chunks instead of waiting, one pause a chunk
    grown = (cuda["events_created"] - 64) // 64
    assert cuda["events_created"] == 64 * (1 + grown) and len(pauses) == grown
    assert cuda["pool_pause_ns"] == sum(b - a for a, b in pauses)
    # every begin/end is a few calls long, but for those a pause explains
    per_call = 8 * CALL_NS  # capture check, upkeep's queries and reads, record
    assert unexplained(calls, pauses, per_call) == []
    assert np.median(calls[:, 1] - calls[:, 0]) <= 4 * CALL_NS
    # what the device ran is what was read, relative to the first event
    ev = h.events
    ops_ev = np.flatnonzero(np.isin(ev["kind"], [EventKind.BEGIN, EventKind.END]))
    assert len(ops_ev) == len(ran) == 6000
    got = ev["raw_ns"][ops_ev] - ev["raw_ns"][ops_ev[0]]
    assert np.abs(got - (ran - ran[0])).max() <= 64  # float32 over < 0.2 s


def test_a_device_that_keeps_up_reads_as_it_goes_with_no_growth_and_no_pause(fake):
    dev = CudaDevice(chunk=64, pings=1)
    dev.start()
    syncs = fake.syncs
    calls, _ = drive(dev, fake, 5000, gap_ns=10_000)
    assert fake.syncs == syncs
    h = dev.harvest()
    cuda = h.meta["cuda"]
    assert cuda["events_created"] == 64 and cuda["pool_pauses"] == []
    assert cuda["events_read_inline"] >= 10_000 - 64  # read a few per launch
    assert (calls[:, 1] - calls[:, 0]).max() <= 8 * CALL_NS


def test_a_stalled_stream_does_not_keep_the_others_events_from_being_read(fake):
    dev = CudaDevice(chunk=32, pings=1)
    dev.start()
    stuck = dev.begin(7, 0)  # stream 7's event does not run (the GPU is stuck there)
    event = dev._pending[stuck][0]
    event.done_ns = 2**62
    drive(dev, fake, 2000, gap_ns=10_000, streams=(0,))
    cuda = dev._pool_meta()
    assert cuda["events_created"] == 32 and cuda["pool_pauses"] == []
    assert list(dev._queues[7]) == [stuck]  # unread, still first on its stream
    event.done_ns = fake.t                  # it ran at last: the harvest reads it
    h = dev.harvest()
    assert h.events["raw_ns"][stuck] > 0


@pytest.mark.parametrize("tick", [500, 1000, 4096])
def test_the_event_tick_is_measured_at_start(fake, tick):
    fake.tick_ns, fake.spacing_ns = tick, 40  # back to back: 40 ns apart
    dev = CudaDevice(pings=1, anchor_interval_ns=10**8)
    dev.start()
    assert fake.holds == 1
    h = dev.harvest()
    cuda = h.meta["cuda"]
    assert cuda["event_tick_measured_ns"] == tick and cuda["event_tick_ns"] == tick
    # the bound allows for it: the tick plus half a float32 step at 100 ms
    assert h.meta["clock_resolution_ns"] == {"0": read_error_ns(tick, 10**8)}
    assert dev.resolution_ns()["events"] == tick + 4
    # the burst's events are no rows, and went back to the pool
    assert (h.events["kind"] == EventKind.ANCHOR).sum() == 1
    assert cuda["events_created"] == dev.chunk


def test_a_tick_finer_than_the_documented_one_is_floored(fake):
    fake.tick_ns, fake.spacing_ns = 1, 40  # steps of 40 ns: the spacing, not a tick
    dev = CudaDevice(pings=1)
    dev.start()
    cuda = dev.harvest().meta["cuda"]
    assert cuda["event_tick_measured_ns"] == 40 and cuda["event_tick_ns"] == EVENT_TICK_NS


def test_a_burst_within_one_tick_measures_nothing_and_keeps_the_floor(fake):
    fake.tick_ns, fake.spacing_ns = 10**6, 1  # 64 events inside 1 ms
    dev = CudaDevice(pings=1)
    dev.start()
    cuda = dev.harvest().meta["cuda"]
    assert cuda["event_tick_measured_ns"] is None and cuda["event_tick_ns"] == EVENT_TICK_NS
    assert TICK_BURST * fake.spacing_ns < fake.tick_ns


def test_stamps_alone_measure_no_event_tick(monkeypatch):
    from fakecuda import FakeStampCuda
    api = FakeStampCuda()
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    dev = CudaDevice(pings=1, timing="stamps")
    dev.start()
    assert api.holds == 0
    dev.harvest()
