"""Verdict scenarios with torch.distributed collectives: a DDP-like step.

Each rank's gradients are all-reduced over 8 ranks, run in one process on
torch's fake process group (``dist.init_process_group("fake", ...)``) on
meta tensors; SimGPU runs each all-reduce as NCCL would
(``devices/sim/comm.py``): a COLLECTIVE row on its own stream, after the
launching stream's work, for 15 µs + 2·7/8 × bytes / 450 GB/s (H100 SXM
bus bandwidth), and ``Work.wait()`` makes the current stream wait for it.
The analysis counts the collectives' time with no compute beside them as
exposed communication (``analysis/idle/communication.py``). A set of
``sets.py``; the arithmetic uses the H100 figures of ``scenarios.py``' module doc: fp32 67 TFLOP/s, 3.35 TB/s.

Both scenarios train 6 bias-free ``Linear(4096, 4096)`` layers (64 MiB
of fp32 gradient each) with SGD: one all-reduce of a gradient is
2·7/8·64 MiB = 117 MB of bus traffic, 261 µs at 450 GB/s, + 15 µs
latency = 276 µs; six a step, 1.66 ms. The optimizer's foreach add reads
and writes 6·3·64 MiB ≈ 1.2 GB, ≈ 0.36 ms.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from scenarios import Skip, scenario

import cutimeline as ctl

WORLD = 8


def _group() -> None:
    """The fake process group of ``WORLD`` ranks (this process is rank 0);
    a Skip when the recorder cannot run collectives on their own stream."""
    from cutimeline.recording import session
    if "collective_stream" not in open(session.__file__).read():
        raise Skip("the recorder does not put collectives on the device's "
                   "collective stream yet (/tmp/patches/C-collective-rows.diff)")
    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)


def _ddp(seed: int, batch: int, overlap: bool, steps: int = 5) -> ctl.Timeline:
    _group()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(6)]).to("meta")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.empty(batch, 4096, device="meta")
    works: list = []
    if overlap:  # DDP's buckets, one per gradient: all-reduced as soon as it is ready
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(
                lambda p: works.append(dist.all_reduce(p.grad, async_op=True)))
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for _ in range(steps):
            model(x).sum().backward()
            if overlap:
                for w in works:
                    w.wait()
                works.clear()
            else:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
    return rec.timeline


@scenario("communication-bound", "6 synchronous 276 µs all-reduces after backward: "
          "1.66 ms of a ≈ 2.5 ms step with nothing beside them")
def ddp_sync_allreduce(seed: int) -> ctl.Timeline:
    """Batch 64: a matmul is 2·64·4096² = 2.1 GFLOP ≈ 32 µs; 6 forward
    and 11 backward matmuls (the first layer's input needs no gradient)
    ≈ 0.55 ms, the optimizer ≈ 0.36 ms: ≈ 0.9 ms of compute. After the
    backward the program all-reduces each gradient with ``async_op=False``
    (the current stream waits for each), then steps: 1.66 ms of
    collectives that nothing overlaps, ≈ 65 % of a ≈ 2.5 ms step. The
    device is busy throughout (the host, ≈ 20–40 µs an op, stays ahead
    of 32 µs matmuls most of the time), so exposed communication is the
    largest cause by ≥ 40 points: communication-bound."""
    return _ddp(seed, 64, overlap=False)


@scenario("GPU-bound", "all-reduces launched from the gradient hooks hide under the "
          "next layer's backward; ≈ 0.28 ms exposed of a ≈ 9.3 ms step")
def ddp_overlapped(seed: int) -> ctl.Timeline:
    """Batch 1024: a matmul is 34 GFLOP ≈ 0.51 ms; 17 matmuls ≈ 8.7 ms +
    the optimizer ≈ 9.1 ms of compute. Each gradient's all-reduce (276
    µs, ``async_op=True``) is launched from its post-accumulate hook and
    runs on the communication stream while the next layer's two backward
    matmuls (≈ 1 ms) run; the last (the first layer's weight gradient)
    starts when the backward ends and the waits before ``opt.step()``
    hold the optimizer for it: 0.28 ms exposed, ≈ 3 % of the step. Busy
    ≈ 100 %: GPU-bound."""
    return _ddp(seed, 1024, overlap=True)
