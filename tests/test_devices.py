"""CudaDevice without a GPU: a fake stands in for torch.cuda's events and
streams (``devices._cuda_api``), with a fake host clock and a device clock of
its own, read only as float32-millisecond elapsed times, as CUDA allows."""

import threading

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline import CutimelineError, devices
from cutimeline.devices import CudaDevice
from cutimeline.timeline import NONE, EventKind, OpFlag

OFFSET, DRIFT_PPM = 3_000_000_000_000, 40.0


class FakeEvent:
    def __init__(self):
        self.dev_ns = None   # device clock when it ran
        self.done_ns = None  # host time when it ran


class FakeCuda:
    """torch.cuda as CudaDevice uses it. Host time moves only by ``advance``
    (and synchronize, to the last event); an event runs ``lag_ns`` after it
    is recorded, at device time offset + (1 + drift)·host."""

    def __init__(self, lag_ns=2_000):
        self.t = 1_000_000_000
        self.lag_ns = lag_ns
        self.created = self.records = self.syncs = 0
        self.capture = False
        self.stream = 0
        self.last_done = 0

    def now(self):
        return self.t

    def advance(self, ns):
        self.t += int(ns)

    def device_ns(self, host_ns):
        return OFFSET + host_ns + int(host_ns * DRIFT_PPM * 1e-6)

    def current_device(self):
        return 0

    def device_name(self, index):
        return "Fake GPU"

    def current_stream(self, index):
        return self.stream

    def capturing(self):
        return self.capture

    def new_event(self):
        self.created += 1
        return FakeEvent()

    def record(self, event, stream, index):
        self.records += 1
        event.done_ns = self.t + self.lag_ns
        event.dev_ns = self.device_ns(event.done_ns)
        self.last_done = max(self.last_done, event.done_ns)

    def stream_id(self, stream, index):
        return self.stream if stream is None else stream

    def query(self, event):
        return event.done_ns is not None and event.done_ns <= self.t

    def elapsed_ms(self, a, b):
        assert self.query(a) and self.query(b), "elapsed of an event not done"
        return float(np.float32((b.dev_ns - a.dev_ns) / 1e6))

    def synchronize(self, index):
        self.syncs += 1
        self.t = max(self.t, self.last_done)


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
    assert h.meta["device_name"] == "Fake GPU"


def test_no_event_while_the_stream_captures_a_graph(fake):
    dev = CudaDevice(pings=1)
    dev.start()
    fake.capture = True
    records = fake.records
    assert dev.begin(0, 0) == NONE and fake.records == records
    fake.capture = False
    assert dev.begin(0, 1) >= 0
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


# -- under the recorder ----------------------------------------------------------------

class CpuAsCuda(CudaDevice):
    """The fake GPU 'runs' CPU tensors, so the recorder drives it end to end."""

    def owns(self, device):
        return device.type == "cpu"


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
