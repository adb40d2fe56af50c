"""CudaDevice without a GPU: a fake (``tests/fakecuda.py``, put in for
``gpu._cuda_api``) stands in for torch.cuda's events and streams, with a
fake host clock and a device clock of its own, read only as
float32-millisecond elapsed times, as CUDA allows."""

import threading
import time
import types

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.cuda import gpu as devices
from cutimeline.devices.cuda import CudaDevice
from cutimeline.devices.cuda.eventclock import EVENT_TICK_NS, TICK_BURST
from cutimeline.devices.cuda.stampclock import GLOBALTIMER_STEP_NS
from cutimeline.timeline.schema import NONE, EventKind, OpFlag

from fakecuda import GT_OFFSET, CpuAsCuda, FakeCuda, FakeEvent, FakeStampCuda


@pytest.fixture
def fake(monkeypatch):
    api = FakeCuda()
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    return api


def ops(dev, api, n, stream=0, gap_ns=10_000, seq0=0):
    out = []
    for i in range(n):
        b = dev.begin(stream, seq0 + i)
        api.advance(gap_ns)
        out.append((b, dev.end(stream, seq0 + i, None, (), {}, None)))
    return out



# -- pool, anchors, pings ---------------------------------------------------------

def test_events_come_from_a_pool_grown_in_chunks_and_reused(fake):
    dev = CudaDevice(chunk=64, pings=1)
    dev.start()
    assert fake.created == 64
    fake.lag_ns = 10**9  # the GPU lags a second behind: no event completes
    ops(dev, fake, 100)  # 200 events in flight: the pool grows by whole chunks
    assert fake.created == 64 * 4
    created = fake.created
    fake.advance(2 * 10**9)  # everything ran: reading frees the events
    fake.lag_ns = 2_000
    ops(dev, fake, 1000)
    assert fake.created <= created + 2 * 64  # reused, not 2000 new ones
    h = dev.harvest()
    kinds = np.bincount(h.events["kind"], minlength=4)
    assert list(kinds) == [1100, 1100, 2, 2]  # BEGIN, END, ANCHOR (2 s apart), PING
    dev.start()  # a second recording reuses the same pool
    assert fake.created <= created + 2 * 64 + 1
    dev.harvest()


def test_raw_times_are_chained_from_anchors_within_float32_precision(fake):
    dev = CudaDevice(pings=1, chunk=16)  # anchors every 1 s; a small pool:
    dev.start()                            # most events are read while recording
    rng = np.random.default_rng(5)
    idx = []
    for k in range(600):  # 100 s, an op every ~167 ms
        b, e = ops(dev, fake, 1, seq0=k, gap_ns=int(rng.integers(1_000, 100_000)))[0]
        idx += [b, e]
        fake.advance(int(rng.integers(100_000_000, 233_000_000)))
    h = dev.harvest()
    ev = h.events
    kind = ev["kind"]
    anchors = np.flatnonzero(kind == EventKind.ANCHOR)
    assert 80 <= len(anchors) <= 101 and ev["raw_ns"][anchors[0]] == 0
    assert (np.diff(ev["host_record_ns"][anchors]) >= 10**9).all()
    # the fake's true device time of each event, against anchor 0's; each
    # link adds at most half a float32 ulp (31 ns at 1 s), as a random walk
    t0 = fake.device_ns(ev["host_record_ns"][anchors[0]] + fake.lag_ns)
    true = np.array([fake.device_ns(ev["host_record_ns"][i] + fake.lag_ns) - t0
                     for i in idx])
    err = ev["raw_ns"][idx] - true
    assert np.abs(err).max() < 1_000
    assert fake.created <= 3 * 16 + len(anchors)  # anchors are kept till harvest
    # read against anchor 0 alone, float32 would have lost microseconds
    lone = [round(float(np.float32(t / 1e6)) * 1e6) - t for t in true]
    assert np.abs(lone).max() > 1_000


def test_pings_at_start_and_stop(fake):
    dev = CudaDevice(pings=3)
    dev.start()
    ops(dev, fake, 5)
    h = dev.harvest()
    kind = h.events["kind"]
    pings = np.flatnonzero(kind == EventKind.PING)
    assert len(pings) == 6 and list(pings[:3]) == [1, 2, 3] and pings[3] > 3 + 10
    y = h.syncs
    is_ping = np.array([k == "ping" for k in y["kind"]])
    assert list(y["last_event"][is_ping]) == list(pings)
    assert (y["host_begin_ns"][is_ping] == h.events["host_record_ns"][pings]).all()
    assert (y["host_end_ns"][is_ping] >= y["host_begin_ns"][is_ping] + fake.lag_ns).all()
    assert (y["stream"][is_ping] == NONE).all() and (h.events["op"][pings] == NONE).all()
    assert (y["ident"] == threading.get_ident()).all()  # who waited, for syncs.thread
    assert h.meta["device_name"] == "Fake GPU"


def test_no_event_while_the_stream_captures_a_graph(fake):
    dev = CudaDevice(pings=1)
    dev.start()
    fake.capture = True
    records = fake.records
    assert dev.begin(0, 0) == NONE and fake.records == records
    fake.capture = False
    assert dev.begin(0, 1) >= 0
    assert fake.capture_checked == 0     # this device's stream, not the current one's
    dev.harvest()


# -- what a sync covers ---------------------------------------------------------------

def test_a_sync_covers_its_own_threads_newest_event(fake):
    dev = CudaDevice(pings=1)
    dev.start()
    fake.stream = 5
    (b5, e5), = ops(dev, fake, 1, stream=5)
    (b9, _), = ops(dev, fake, 1, stream=9, seq0=1)
    dev.note_sync("stream_synchronize", 5, NONE, fake.t, fake.t + 10)
    dev.note_sync("synchronize", None, NONE, fake.t, fake.t + 10)
    other = []
    t = threading.Thread(target=lambda: other.append(ops(dev, fake, 1, stream=5, seq0=2)))
    t.start()
    t.join()
    # another thread's events are not covered by this thread's syncs
    dev.note_sync("stream_synchronize", 5, NONE, fake.t, fake.t + 10)
    h = dev.harvest()
    y = h.syncs
    mine = [i for i, k in enumerate(y["kind"]) if k != "ping"]
    assert list(y["last_event"][mine]) == [e5, b9 + 1, e5]
    assert list(y["stream"][mine]) == [5, NONE, 5]


def test_event_synchronize_covers_what_preceded_the_event(fake):
    dev = CudaDevice(pings=1)
    dev.start()
    (b, e), = ops(dev, fake, 1)
    user = FakeEvent()
    dev.note_user_event(user, None)
    ops(dev, fake, 2, seq0=1)
    dev.note_event_sync(user, 1, 2)
    dev.note_event_sync(FakeEvent(), 3, 4)  # never seen recorded: no bound
    h = dev.harvest()
    y = h.syncs
    mine = [i for i, k in enumerate(y["kind"]) if k == "event_synchronize"]
    assert list(y["last_event"][mine]) == [e, NONE]
    assert list(y["stream"][mine]) == [0, NONE]


# -- misuse --------------------------------------------------------------------------------

def test_misuse(fake):
    dev = CudaDevice()
    with pytest.raises(CutimelineError, match="not recording"):
        dev.harvest()
    dev.start()
    with pytest.raises(CutimelineError, match="already recording"):
        dev.start()
    dev.harvest()
    for bad in ({"chunk": 1}, {"pings": 0}, {"anchor_interval_ns": 0.5}):
        with pytest.raises(CutimelineError, match=list(bad)[0]):
            CudaDevice(**bad)


def test_owns_only_its_own_gpu(fake):
    dev = CudaDevice(0)
    assert dev.owns(torch.device("cuda", 0))
    assert not dev.owns(torch.device("cuda", 1)) and not dev.owns(torch.device("cpu"))
    # factory ops (torch.zeros(..., device="cuda")) pass an unindexed device:
    # the current one
    assert dev.owns(torch.device("cuda"))
    fake.current_device = lambda: 1
    assert not dev.owns(torch.device("cuda"))
    assert CudaDevice(1).owns(torch.device("cuda"))


def test_user_events_on_another_gpu_bound_nothing(fake):
    dev = CudaDevice(0, pings=1)
    dev.start()
    ops(dev, fake, 1)
    theirs, current = FakeEvent(), FakeEvent()
    dev.note_user_event(theirs, types.SimpleNamespace(device_index=1, stream_id=0))
    fake.current_device = lambda: 1
    dev.note_user_event(current, None)      # recorded on device 1's stream
    dev.note_event_sync(theirs, 1, 2)
    dev.note_event_sync(current, 3, 4)
    y = dev.harvest().syncs
    mine = [i for i, k in enumerate(y["kind"]) if k == "event_synchronize"]
    assert list(y["last_event"][mine]) == [NONE, NONE]


# -- under the recorder ----------------------------------------------------------------

def test_recorder_drives_the_cuda_device_end_to_end(fake, monkeypatch):
    monkeypatch.setattr(fake, "now", __import__("time").perf_counter_ns)
    fake.lag_ns = 0  # the device runs each event as it is recorded
    dev = CpuAsCuda(pings=2)
    before = (torch.cuda.synchronize, torch.cuda.Event.__dict__["record"],
              torch.cuda.Stream.__dict__["synchronize"],
              torch.cuda.CUDAGraph.__dict__["replay"])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    with ctl.record(device=dev) as rec:
        assert torch.cuda.synchronize is not before[0]  # the CUDA hooks are on
        net(torch.randn(3, 4)).sum().item()
    assert before == (torch.cuda.synchronize, torch.cuda.Event.__dict__["record"],
                      torch.cuda.Stream.__dict__["synchronize"],
                      torch.cuda.CUDAGraph.__dict__["replay"])
    tl = rec.timeline
    launched = (tl.ops.flags & OpFlag.LAUNCH) != 0
    assert launched.sum() == len(tl.gpu) > 3
    assert tl.aligned and len(tl.clocks) == 1
    item = list(tl.decode(tl.ops["name"])).index("aten::_local_scalar_dense")
    assert tl.ops.flags[item] & OpFlag.SYNC
    assert rec.timeline.meta["overhead_ns_per_launch"] >= 0
    assert tl.meta["devices"][0]["name"] == "Fake GPU"
    g = tl.gpu
    assert (g.begin_ns <= g.end_ns).all() and (g.begin_ns >= g.launch_ns - 10_000).all()


# -- timing="stamps" and "both": globaltimer stamps instead of or beside events -------

@pytest.fixture
def fake_stamps(monkeypatch):
    api = FakeStampCuda()
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    return api


def true_globaltimer(api, h):
    return np.array([api.globaltimer(int(t) + api.lag_ns) for t in h["host_record_ns"]])


def test_stamps_time_every_point_by_globaltimer_without_events_or_anchors(fake_stamps):
    dev = CudaDevice(pings=2, timing="stamps")
    assert fake_stamps.checked == [0]  # the kernel is compiled before recording
    dev.start()
    ops(dev, fake_stamps, 40)
    fake_stamps.advance(3 * 10**9)  # long enough for anchors, were there any
    ops(dev, fake_stamps, 10, seq0=40)
    h = dev.harvest()
    assert fake_stamps.created == fake_stamps.records == 0
    kinds = np.bincount(h.events["kind"], minlength=4)
    assert list(kinds) == [50, 50, 0, 4]  # BEGIN, END, no ANCHOR, PING
    assert fake_stamps.stamps == len(h.events["kind"])
    # raw_ns is the globaltimer itself: exact, absolute, no chaining
    assert (h.events["raw_ns"] == true_globaltimer(fake_stamps, h.events)).all()
    assert h.alternates == {} and h.meta["timing"] == "stamps"
    # 64-bit ns read once: the read error is globaltimer's update step alone
    assert h.meta["clock_resolution_ns"] == {"0": GLOBALTIMER_STEP_NS}
    assert h.meta["cuda"]["stamp_chunks"] == 1 and repr(dev).endswith("timing='stamps')")


def test_stamp_buffer_grows_in_chunks_and_slots_map_across_them(fake_stamps):
    dev = CudaDevice(pings=1, timing="stamps", stamp_slots=16)
    dev.start()
    fake_stamps.t += 1  # the clock moves between chunks' points
    ops(dev, fake_stamps, 50)
    h = dev.harvest()
    n = len(h.events["kind"])
    assert n == 102 and len(fake_stamps.stampers) == -(-n // 16)
    assert h.meta["cuda"]["stamp_chunks"] == len(fake_stamps.stampers)
    assert h.meta["cuda"]["stamp_chunk_wait_ns"] >= 0
    assert (h.events["raw_ns"] == true_globaltimer(fake_stamps, h.events)).all()
    dev.start()  # a second recording starts with one fresh chunk
    assert len(fake_stamps.stampers) == -(-n // 16) + 1
    dev.harvest()


def test_both_records_an_event_and_a_stamp_at_every_point(fake_stamps):
    dev = CudaDevice(pings=1, timing="both", anchor_interval_ns=10**8)
    dev.start()
    for k in range(20):
        ops(dev, fake_stamps, 1, seq0=k)
        fake_stamps.advance(30_000_000)
    h = dev.harvest()
    ev = h.events
    n = len(ev["kind"])
    assert (ev["kind"] == EventKind.ANCHOR).sum() >= 5
    # anchors too; and the burst that measured the event tick at start
    assert fake_stamps.records - TICK_BURST == fake_stamps.stamps == n
    assert h.meta["timing"] == "events" and h.meta["cuda"]["timing"] == "both"
    # each clock states its own read error: the event tick plus half a
    # float32 step at the anchor interval (100 ms: 4 ns); the stamps' step
    assert h.meta["clock_resolution_ns"] == {"0": EVENT_TICK_NS + 4}
    assert h.alternate_resolution_ns == {"stamps": GLOBALTIMER_STEP_NS}
    stamps = h.alternates["stamps"]
    assert (stamps == true_globaltimer(fake_stamps, ev)).all()
    # the events keep their own clock, chained from anchor 0 (raw 0)
    t0 = fake_stamps.device_ns(ev["host_record_ns"][0] + fake_stamps.lag_ns)
    true = np.array([fake_stamps.device_ns(t + fake_stamps.lag_ns) - t0
                     for t in ev["host_record_ns"]])
    assert np.abs(ev["raw_ns"] - true).max() < 1_000


def test_no_stamp_while_the_stream_captures_a_graph(fake_stamps):
    dev = CudaDevice(pings=1, timing="stamps")
    dev.start()
    fake_stamps.capture = True
    stamps = fake_stamps.stamps
    assert dev.begin(0, 0) == NONE and fake_stamps.stamps == stamps
    fake_stamps.capture = False
    dev.harvest()


def test_a_stamp_that_never_landed_fails_the_harvest_by_name(fake_stamps):
    dev = CudaDevice(pings=1, timing="stamps")
    dev.start()
    ops(dev, fake_stamps, 3)
    fake_stamps.drop = (fake_stamps.stampers[0], 7)  # after a ping and 3 ops
    ops(dev, fake_stamps, 1, seq0=3)
    with pytest.raises(CutimelineError, match=r"1 of 10 globaltimer stamps .* point 7"):
        dev.harvest()
    dev.start()  # the failed harvest still ended the recording
    dev.harvest()


def test_launch_cost_is_measured_on_what_the_timing_records(fake_stamps):
    # with events, one more: the completed event the pool's upkeep reads
    for timing, records, stamps in (("events", 129, 0), ("stamps", 0, 128),
                                    ("both", 129, 128)):
        fake_stamps.records = fake_stamps.stamps = 0
        assert CudaDevice(timing=timing).measure_launch_ns(64) >= 0
        assert (fake_stamps.records, fake_stamps.stamps) == (records, stamps), timing


def test_stamp_timing_without_cupy_fails_when_the_device_is_made(fake_stamps, monkeypatch):
    def missing(index):
        raise CutimelineError("CuPy is not installed ...: pip install cupy-cuda13x.")
    monkeypatch.setattr(fake_stamps, "check_stamps", missing)
    with pytest.raises(CutimelineError, match="cupy-cuda13x"):
        CudaDevice(timing="both")
    CudaDevice(timing="events")  # events need no CuPy


def test_timing_misuse(fake_stamps):
    with pytest.raises(CutimelineError, match="timing='globaltimer'.*'events', 'stamps', 'both'"):
        CudaDevice(timing="globaltimer")
    with pytest.raises(CutimelineError, match="stamp_slots"):
        CudaDevice(timing="stamps", stamp_slots=1)
    with pytest.raises(CutimelineError, match="timing='fast'.*'events', 'stamps', 'both'"):
        ctl.record(timing="fast")
    for device in ("cpu", ctl.SimGPU(), CudaDevice(timing="both")):
        with pytest.raises(CutimelineError, match="applies to the CUDA device"):
            ctl.record(device=device, timing="stamps")
    assert ctl.record(device=CudaDevice(timing="stamps"), timing="stamps").device.timing == "stamps"
    if not torch.cuda.is_available():  # "auto" without CUDA records no device
        assert ctl.record(device="auto", timing="stamps").device is None


def test_recorder_with_both_timings_gives_two_aligned_timelines(fake_stamps, monkeypatch):
    clock = __import__("time").perf_counter_ns
    monkeypatch.setattr(fake_stamps, "now", clock)
    monkeypatch.setattr(fake_stamps, "synchronize",
                        lambda index: setattr(fake_stamps, "t", clock()))
    monkeypatch.setattr(fake_stamps, "hold", lambda index, ns: None)  # no time to hold
    fake_stamps.lag_ns = 0  # every point runs as it is recorded
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    with ctl.record(device=CpuAsCuda(pings=2, timing="both"), timing="both") as rec:
        for _ in range(3):
            net(torch.randn(3, 4)).sum().item()
    tls = rec.timelines
    assert set(tls) == {"events", "stamps"} and tls["events"] is rec.timeline
    ev, st = tls["events"], tls["stamps"]
    assert ev.meta["timing"] == "events" and st.meta["timing"] == "stamps"
    assert ev.meta["options"]["timing"] == "both"
    assert ev.aligned and st.aligned and len(st.clocks) == 1
    assert st.meta["clock_resolution_ns"] == {"0": GLOBALTIMER_STEP_NS}
    assert ev.meta["clock_resolution_ns"]["0"] > EVENT_TICK_NS  # and float32
    assert ev.ops.seq is st.ops.seq and ev.syncs.host_end_ns is st.syncs.host_end_ns
    assert (st.events.raw_ns > GT_OFFSET // 2).all() and (ev.events.raw_ns < 10**12).all()
    # one instant, two clocks: each estimate lies within its own bound of it,
    # so they differ by at most the two bounds together (+1 ns of rounding each)
    slack = ev.clocks.bound_max_ns[0] + st.clocks.bound_max_ns[0] + 2
    for col in ("begin_ns", "end_ns"):
        assert np.abs(ev.gpu[col] - st.gpu[col]).max() <= slack


def test_single_timing_recordings_list_one_timeline(fake):
    with ctl.record(device="cpu") as rec:
        torch.ones(2).sum()
    assert rec.timelines == {"events": rec.timeline}


def test_an_anchor_that_opens_a_stamp_chunk_does_not_deadlock(fake_stamps):
    # points 0–3 fill chunk 0 (anchor, ping, one op); after 2 s the next op
    # lays an anchor, point 4: the first of chunk 1, made while the anchor
    # holds the device's lock
    dev = CudaDevice(pings=1, timing="both", stamp_slots=4)
    dev.start()
    ops(dev, fake_stamps, 1)
    fake_stamps.advance(2 * 10 ** 9)
    done = []
    t = threading.Thread(target=lambda: done.append(ops(dev, fake_stamps, 1, seq0=1)),
                         daemon=True)
    t.start()
    t.join(30)
    assert done, "recording hung when an anchor opened a new stamp chunk"
    h = dev.harvest()
    assert h.meta["cuda"]["stamp_chunks"] >= 2
    kinds = h.events["kind"].tolist()
    assert kinds.count(int(EventKind.ANCHOR)) == 2


def test_stamp_ids_follow_the_order_stamps_are_enqueued(fake_stamps):
    # many threads at once: every point's id order is its stamp's order
    dev = CudaDevice(pings=1, timing="stamps", stamp_slots=64)
    dev.start()
    order = []
    stamp = fake_stamps.stamp

    def logged(stamper, slot, stream, index):
        # let other threads run between a point's id and its stamp
        time.sleep(0.0005 if slot % 3 == 0 else 0)
        order.append(fake_stamps.stampers.index(stamper) * 64 + slot)
        stamp(stamper, slot, stream, index)
    fake_stamps.stamp = logged
    threads = [threading.Thread(target=ops, args=(dev, fake_stamps, 50),
                                kwargs={"seq0": 100 * k}) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dev.harvest()
    assert order == sorted(order)
