"""The recorder on a real CUDA GPU: events around launches, alignment,
syncs, streams, the engine's device threads, CUDA graphs, the event pool.
Skipped without CUDA (tests/conftest.py)."""

import contextlib
import time

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.devices.cuda import CudaDevice
from cutimeline.timeline.schema import NONE, EventKind, GpuKind, OpFlag

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def train(recorder=None, steps=3):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             dropout=0.1, batch_first=True)
    net = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(4, 8, 32, device=CUDA)
    losses = []
    with recorder if recorder is not None else contextlib.nullcontext():
        for _ in range(steps):
            opt.zero_grad()
            loss = net(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.grad.cpu() for p in net.parameters()]


def test_training_is_unchanged_and_every_launch_has_an_aligned_gpu_row():
    ref_losses, ref_grads = train()
    rec = ctl.record(device="cuda")
    losses, grads = train(rec)
    assert losses == ref_losses
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    tl = rec.timeline
    assert tl.aligned and len(tl.clocks) == 1
    assert tl.clocks.bound_max_ns[0] < 200_000  # µs-scale band
    launched = (tl.ops.flags & OpFlag.LAUNCH) != 0
    assert launched.sum() == len(tl.gpu) > 100
    g = tl.gpu
    assert (g.kind == GpuKind.OP).all() and (g.begin_ns <= g.end_ns).all()
    # causality within the error bound: no op ran before it was launched
    assert (g.begin_ns >= g.launch_ns - tl.clocks.bound_max_ns[0] - 1_000).all()
    assert isinstance(tl.meta["overhead_ns_per_launch"], int)
    assert tl.meta["devices"][0]["kind"] == "cuda"
    # CPU-side views launch nothing
    views = (tl.ops.flags & OpFlag.VIEW) != 0
    assert views.any() and not (views & launched).any()


def test_backward_runs_on_the_engines_device_thread_and_is_recorded():
    net = torch.nn.Linear(16, 16).cuda()
    x = torch.randn(8, 16, device=CUDA)
    with ctl.record(device="cuda") as rec:
        net(x).sum().backward()
        torch.cuda.synchronize()
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    back = ops[ops.grad_fn != ""]
    assert "AddmmBackward0" in set(back.grad_fn)
    assert set(back.thread) != {0} and len(tl.meta["threads"]) >= 2
    assert ((tl.ops.flags[back.index] & OpFlag.LAUNCH) != 0).any()


def test_host_blocking_points_are_syncs():
    x = torch.randn(1000, device=CUDA)
    pinned = torch.empty(1000, pin_memory=True)
    with ctl.record(device="cuda") as rec:
        x.sum().item()
        x.cpu()
        pinned.copy_(x, non_blocking=True)  # into pinned memory: no wait
        torch.nonzero(x > 0)
        torch.cuda.synchronize()
        torch.cuda.current_stream().synchronize()
        e = torch.cuda.Event()
        e.record()
        e.synchronize()
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    sync = ops[(tl.ops.flags & OpFlag.SYNC) != 0]
    assert list(sync.name) == ["aten::_local_scalar_dense", "aten::_to_copy", "aten::nonzero"]
    kinds = [k for k in tl.decode(tl.syncs["kind"]) if k != "ping"]
    assert kinds == ["aten::_local_scalar_dense", "aten::_to_copy", "aten::nonzero",
                     "synchronize", "stream_synchronize", "event_synchronize"]
    y = tl.syncs
    ev_sync = list(tl.decode(y["kind"])).index("event_synchronize")
    assert y.last_event[ev_sync] != NONE
    assert (tl.to_pandas("spans").kind == "sync").sum() == 6


def test_ops_on_a_side_stream_get_that_stream():
    s = torch.cuda.Stream()
    x = torch.randn(64, 64, device=CUDA)
    with ctl.record(device="cuda") as rec:
        with torch.cuda.stream(s):
            y = x @ x
        torch.cuda.current_stream().wait_stream(s)
        z = y + 1
        torch.cuda.synchronize()
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    mm = ops.index[ops.name == "aten::mm"][0]
    add = ops.index[ops.name == "aten::add.Tensor"][0]
    assert tl.ops.stream[mm] == s.stream_id
    assert tl.ops.stream[add] == torch.cuda.current_stream().stream_id
    assert len(set(tl.gpu.stream.tolist())) == 2
    del z


def test_graph_capture_records_no_events_and_a_replay_is_one_graph_row():
    x = torch.randn(256, device=CUDA)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch asks
        (x * 2).sin()
    torch.cuda.current_stream().wait_stream(side)
    with ctl.record(device="cuda") as rec:
        with torch.cuda.graph(g):
            y = (x * 2).sin()
        g.replay()
        g.replay()
        torch.cuda.synchronize()
    assert torch.allclose(y, (x * 2).sin())
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    captured = (tl.ops.flags & OpFlag.CAPTURED) != 0
    assert set(ops.name[captured]) >= {"aten::mul.Tensor", "aten::sin"}
    assert not (captured & ((tl.ops.flags & OpFlag.LAUNCH) != 0)).any()
    graphs = tl.gpu.kind == GpuKind.GRAPH
    assert graphs.sum() == 2
    assert set(tl.decode(tl.ops["name"][tl.gpu.op[graphs]])) == {"cudagraph::replay"}
    assert tl.aligned


def test_anchors_chain_and_agree_with_the_host_clock():
    dev = CudaDevice(anchor_interval_ns=20_000_000, chunk=64)
    x = torch.randn(512, 512, device=CUDA)
    with ctl.record(device=dev) as rec:
        for _ in range(15):
            for _ in range(20):
                x = torch.tanh(x @ x)
            torch.cuda.synchronize()
            time.sleep(0.02)
    tl = rec.timeline
    ev = tl.events
    assert (ev.kind == EventKind.ANCHOR).sum() >= 10
    assert tl.aligned and tl.clocks.bound_max_ns[0] < 200_000
    # the pool was reused: far fewer events made than recorded
    assert tl.meta["cuda"]["events_created"] < len(ev) / 2
    # on one stream raw times never go back (but for float32 rounding)
    one = ev.stream == ev.stream[ev.kind == EventKind.BEGIN][0]
    assert (np.diff(ev.raw_ns[one]) >= -100).all()


def test_compiled_code_under_the_recorder():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).cuda()
    x = torch.randn(8, 32, device=CUDA)
    ref = net(x)
    torch._dynamo.reset()
    compiled = torch.compile(net, backend="aot_eager")
    with ctl.record(device="cuda") as rec:
        out = compiled(x)
        torch.cuda.synchronize()
    assert torch.equal(out, ref)
    assert len(rec.timeline.gpu) > 0 and rec.timeline.aligned
