"""hooks/cuda.py: the CUDA calls it wraps note syncs of the right kind, for
the right device only; the event pool's pauses become the recorder's own
spans. On the fake GPU (tests/fakecuda.py), with torch.cuda's functions and
methods replaced by stand-ins before the recording wraps them."""

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.devices.cuda import gpu as devices
from cutimeline.devices.cuda.eventclock import POOL_SPAN
from cutimeline.recording.hooks.cuda import _cuda_index
from cutimeline.timeline.schema import EventKind, SpanKind

from fakecuda import CpuAsCuda, FakeCuda

ACCELERATOR = getattr(torch, "accelerator", None)  # torch >= 2.6
HAS_ACCELERATOR = ACCELERATOR is not None and hasattr(ACCELERATOR, "synchronize")


def test_cuda_index_follows_torch_cuda_conventions(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert _cuda_index(torch, None) == 3                   # the current device
    assert _cuda_index(torch, 1) == 1
    assert _cuda_index(torch, "cuda:2") == 2
    assert _cuda_index(torch, torch.device("cuda")) == 3   # unindexed: current
    assert _cuda_index(torch, torch.device("cuda", 0)) == 0
    assert _cuda_index(torch, "cpu") == -1                 # no CUDA GPU at all


@pytest.fixture
def fake(monkeypatch):
    api = FakeCuda()
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    monkeypatch.setattr(api, "now", __import__("time").perf_counter_ns)
    api.lag_ns = 0
    return api


def test_synchronize_is_noted_only_for_the_recorded_device(fake, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with ctl.record(device=CpuAsCuda(0, pings=1), measure=False) as rec:
        torch.ones(3).sum()
        torch.cuda.synchronize()            # the current device: ours
        torch.cuda.synchronize(device=1)    # another GPU's queue
        torch.cuda.synchronize(1)
        torch.cuda.synchronize("cuda:0")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
        torch.cuda.synchronize()            # now the current device is another
    assert calls == [None, 1, 1, "cuda:0", None]
    tl = rec.timeline
    kinds = list(tl.decode(tl.syncs.kind))
    assert kinds.count("synchronize") == 2


def test_a_graph_replay_is_a_launch_or_captured(fake, monkeypatch):
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", lambda self: None)
    with ctl.record(device=CpuAsCuda(0, pings=1), measure=False) as rec:
        torch.cuda.CUDAGraph.replay(object())
        fake.capture = True                   # replayed inside another capture
        torch.cuda.CUDAGraph.replay(object())
        fake.capture = False
    tl = rec.timeline
    names = list(tl.decode(tl.ops["name"]))
    rows = [i for i, n in enumerate(names) if n == "cudagraph::replay"]
    from cutimeline.timeline.schema import GpuKind, OpFlag
    assert [int(tl.ops.flags[i]) for i in rows] == [int(OpFlag.LAUNCH), int(OpFlag.CAPTURED)]
    assert tl.gpu.kind.tolist().count(int(GpuKind.GRAPH)) == 1


def test_no_event_is_queried_while_any_thread_captures_a_graph(fake, monkeypatch):
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", lambda self, **kw: None)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", lambda self: None)
    queried = []
    query = fake.query
    monkeypatch.setattr(fake, "query", lambda ev: queried.append(ev) or query(ev))
    dev = CpuAsCuda(0, pings=1, chunk=8)
    x = torch.ones(2)
    with ctl.record(device=dev, measure=False):
        torch.cuda.CUDAGraph.capture_begin(object())  # another thread's capture
        assert dev.captures == 1
        for _ in range(40):                           # far past the pool
            x = x + 1
        assert queried == [] and dev._created > 8     # grown, never reaped
        torch.cuda.CUDAGraph.capture_end(object())
        assert dev.captures == 0
        for _ in range(40):
            x = x + 1
    assert queried                                    # reaped again after it


def syncs_of(tl, kind):
    y = tl.syncs
    return np.flatnonzero(np.array([k == kind for k in tl.decode(y.kind)], bool))


def spans_named(tl, name):
    s = tl.spans
    return np.flatnonzero(np.array([n == name for n in tl.decode(s["name"])], bool))


def test_empty_cache_is_a_host_wait_that_bounds_no_event(fake, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda"))
    if HAS_ACCELERATOR and hasattr(ACCELERATOR, "empty_cache"):
        monkeypatch.setattr(ACCELERATOR, "empty_cache", lambda: calls.append("accelerator"))
    with ctl.record(device=CpuAsCuda(0, pings=1), measure=False) as rec:
        torch.ones(3).sum()
        torch.cuda.empty_cache()
        if HAS_ACCELERATOR and hasattr(ACCELERATOR, "empty_cache"):
            ACCELERATOR.empty_cache()
    n = len(calls)
    assert n == 1 + (HAS_ACCELERATOR and hasattr(ACCELERATOR, "empty_cache"))
    tl = rec.timeline
    rows = syncs_of(tl, "empty_cache")
    assert len(rows) == n
    # it may not have drained the device: the aligner is told nothing
    assert (tl.syncs.last_event[rows] == -1).all() and (tl.syncs.stream[rows] == -1).all()
    sp = spans_named(tl, "empty_cache")  # but the host was in it
    assert len(sp) == n and (tl.spans.kind[sp] == SpanKind.SYNC).all()
    assert torch.cuda.empty_cache.__name__ == "<lambda>"  # restored at stop


@pytest.mark.skipif(not HAS_ACCELERATOR, reason="torch.accelerator arrived in torch 2.6")
def test_accelerator_synchronize_is_noted_for_the_recorded_gpu_only(fake, monkeypatch):
    calls = []
    monkeypatch.setattr(ACCELERATOR, "synchronize", lambda device=None: calls.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with ctl.record(device=CpuAsCuda(0, pings=1), measure=False) as rec:
        torch.ones(3).sum()
        torch.accelerator.synchronize()                       # the current GPU: ours
        torch.accelerator.synchronize(torch.device("cuda", 0))
        torch.accelerator.synchronize("cuda:1")               # another GPU's queue
        torch.accelerator.synchronize(device=1)
    assert calls == [None, torch.device("cuda", 0), "cuda:1", 1]
    tl = rec.timeline
    rows = syncs_of(tl, "synchronize")
    assert len(rows) == 2 and (tl.syncs.last_event[rows] >= 0).all()  # device-wide bounds
    assert len(spans_named(tl, "synchronize")) == 4  # the host waited in each


class Event:  # a stand-in torch.cuda.Event: weakly referenced, like the real one
    pass


class Stream:
    def __init__(self, device_index, stream_id=0):
        self.device_index, self.stream_id = device_index, stream_id


def test_a_query_that_returns_true_is_a_sync_without_a_span(fake, monkeypatch):
    answers = iter([False, False, True])
    monkeypatch.setattr(torch.cuda.Event, "record", lambda self, stream=None: None)
    monkeypatch.setattr(torch.cuda.Event, "query", lambda self: next(answers))
    monkeypatch.setattr(torch.cuda.Stream, "query", lambda self: True)
    ev = Event()
    with ctl.record(device=CpuAsCuda(0, pings=1), measure=False) as rec:
        torch.ones(3).sum()
        torch.cuda.Event.record(ev)              # after the sum, on stream 0
        while not torch.cuda.Event.query(ev):    # a polling loop
            pass
        assert torch.cuda.Stream.query(Stream(0)) and torch.cuda.Stream.query(Stream(1))
    tl = rec.timeline
    y, kinds = tl.syncs, tl.events.kind
    (e,) = syncs_of(tl, "event_query")           # the True answer only
    assert kinds[y.last_event[e]] == EventKind.END and y.stream[e] == 0
    (s,) = syncs_of(tl, "stream_query")          # stream 0 of our GPU, not GPU 1's
    assert y.stream[s] == 0 and kinds[y.last_event[s]] == EventKind.END
    assert len(spans_named(tl, "event_query")) == len(spans_named(tl, "stream_query")) == 0


def test_our_own_queries_are_not_the_users():
    """The device queries its events through TorchCuda, never through the
    wrapped torch.cuda.Event.query (cudaapi calls the C method)."""
    import inspect

    from cutimeline.devices.cuda import api as cudaapi
    src = inspect.getsource(cudaapi.TorchCuda.query)
    assert "self._query(event)" in src and "event.query()" not in src


def test_each_refill_of_the_event_pool_is_a_span_of_the_recorder(fake, monkeypatch):
    monkeypatch.setattr(fake, "query", lambda event: False)  # the GPU is far behind
    dev = CpuAsCuda(0, pings=1, chunk=8)
    x = torch.ones(2)
    with ctl.record(device=dev, measure=False) as rec:
        for _ in range(40):
            x = x + 1
    tl = rec.timeline
    pauses = tl.meta["cuda"]["pool_pauses"]
    assert len(pauses) >= 5 and dev.on_pause is None  # unhooked at stop
    rows = spans_named(tl, POOL_SPAN)
    sp = tl.spans
    assert (sp.kind[rows] == SpanKind.USER).all()
    assert sorted(zip(sp.begin_ns[rows].tolist(), sp.end_ns[rows].tolist())) == \
        sorted(map(tuple, pauses))


def test_a_simgpu_sync_gets_a_span_with_its_source_line_and_the_summary_says_it():
    # A SimGPU's synchronize noted its sync row but no SYNC span: its
    # source line was unknown and the summary had no "syncs by source line".
    gpu = ctl.SimGPU()
    m = torch.nn.Linear(256, 256, device="meta")
    x = torch.randn(64, 256, device="meta")
    with ctl.record(device=gpu, measure=False) as rec:
        for _ in range(3):
            for _ in range(4):
                m(x)
                gpu.synchronize()
            gpu.synchronize(0)  # a stream's
            rec.step()
    gpu.synchronize()  # outside: no span, the hooks are gone
    tl = rec.timeline
    s = tl.spans
    names = tl.decode(s["name"][s.kind == SpanKind.SYNC])
    assert sorted(set(names)) == ["stream_synchronize", "synchronize"]
    assert list(names).count("synchronize") == 12
    rep = ctl.analyze(tl)
    t = rep.source_table()
    assert [(r["kind"], int(r["count"]), r["code"]) for r in t] == [
        ("sync", 12, "gpu.synchronize()"), ("sync", 3, "gpu.synchronize(0)  # a stream's")]
    assert "syncs by source line: 12× test_cuda_calls.py" in rep.summary()
    assert "synchronize" not in vars(gpu)  # the class's method again
