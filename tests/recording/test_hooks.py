"""hooks.py: the CUDA calls it wraps note syncs for the right device only."""

import pytest
import torch

import cutimeline as ctl
from cutimeline.devices import cuda as devices
from cutimeline.recording.hooks import _cuda_index

from fakecuda import CpuAsCuda, FakeCuda


def test_cuda_index_follows_torch_cuda_conventions(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert _cuda_index(torch, None) == 3                   # the current device
    assert _cuda_index(torch, 1) == 1
    assert _cuda_index(torch, "cuda:2") == 2
    assert _cuda_index(torch, torch.device("cuda")) == 3   # unindexed: current
    assert _cuda_index(torch, torch.device("cuda", 0)) == 0


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


def test_boundary_retries_late_hooks_until_they_are_done():
    from cutimeline.recording.session import Session
    s = Session(None, max_ops=10, steps="auto")
    calls = []
    s.at_boundary.append(lambda: calls.append(1) or len(calls) == 2)
    for _ in range(3):
        s.boundary(s.writer(), manual=True)
    assert calls == [1, 1] and s.at_boundary == []
