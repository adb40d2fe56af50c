"""Verdict scenarios with ops whose output size depends on the data.

A masked loss (``F.cross_entropy(logits[mask], y[mask])``) and top-1
routing of tokens to experts by ``torch.where(route == e)``: each
boolean-mask index, ``nonzero`` and mask write syncs the host on CUDA
(the count comes back before the output can be allocated), and SimGPU
models it so (``devices/sim/datadep.py``: the host waits for the stream's
earlier work and a count pass over the input; ``nonzero_fraction`` of
the candidates are kept). A set of ``sets.py``; the arithmetic uses the
same H100 figures (``scenarios.py``' module doc): fp32 67 TFLOP/s, 3.35 TB/s, 2 µs per kernel at least, 4 µs launch
latency, ≈ 5–10 µs of CUDA dispatch per op plus the Python above it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from scenarios import META, medium_mlp, meta_batches, scenario

import cutimeline as ctl


@scenario("GPU-bound", "3 mask syncs per ≈ 14 ms step, ≈ 0.5–1 ms of idle around them")
def masked_loss(seed: int) -> ctl.Timeline:
    """``medium_mlp`` at batch 4096 (0.92 TFLOP of matmuls per step, ≈
    13.8 ms at 67 TFLOP/s; ≈ 14.3 ms of GPU work with its ReLUs,
    optimizer and loss) with the loss over the labelled rows only:
    ``F.cross_entropy(logits[mask], y[mask])``, ``mask = y != 0`` (half
    the rows, the default ``nonzero_fraction``). Per step three ops sync:
    ``logits[mask]`` (its count waits for the whole forward, ≈ 4.6 ms of
    queued matmuls, time the GPU is busy), ``y[mask]`` and, in backward,
    the write of the gradient through the mask (``index_put``). After
    the first the queue is empty, and the GPU follows the host through
    ≈ 10–15 small ops (the compare, the second mask, log_softmax,
    nll_loss, zero_grad, their backwards, the masked write) at ≈ 20–60
    µs of host each and a few µs of GPU work each: ≈ 0.4–1 ms of idle,
    each sync's return (≈ 0.1 ms a sync) and the host-paced launches
    between them (more), until the backward's first matmul (≈ 2 ms of
    work per layer) puts the GPU ahead again; the optimizer's launches
    and the next forward's hide behind the backward. Busy ≈ 14.3 /
    (14.3 + 0.7) ≈ 93–97 %, well above the 85 % line: GPU-bound, syncs
    notwithstanding (the first step holds the recorder's start)."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = meta_batches(6, 4096, 1024)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in batches:
            logits = model(x)
            mask = y != 0
            loss = F.cross_entropy(logits[mask], y[mask])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


class Experts(nn.Module):
    """A mixture-of-experts FFN with top-1 routing written as people write
    it: for each expert, the tokens routed to it by ``torch.where``
    (``nonzero``: a sync), gathered, sent through the expert's d→4d→d
    GELU MLP and added back at their places."""

    def __init__(self, d: int, experts: int):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                   nn.Linear(4 * d, d))
                                     for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        route = self.router(x).argmax(dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx = torch.where(route == e)[0]
            out.index_add_(0, idx, expert(x[idx]))
        return x + out


@scenario("sync-bound", "a routing sync per expert: ≈ 160 µs of expert work, ≈ 70–110 µs "
          "idle after each, 64 a step")
def moe_routing(seed: int) -> ctl.Timeline:
    """Inference-style forward of 8 MoE layers (``Experts``, d = 1024, 8
    experts, 4096 tokens, no grad; a small head trained on its output so
    each step ends in an optimizer step), ``nonzero_fraction=1/8``: each
    expert gets 512 tokens. An expert's MLP is 2·512·1024·4096·2 =
    8.6 GFLOP ≈ 128 µs at 67 TFLOP/s, plus the gather (≈ 10 µs: the
    roofline prices an index by all of ``x``, 16 MB), ``index_add_``
    (≈ 12 µs), GELU (≈ 6 µs) and the compare: ≈ 160 µs of GPU work. The
    host dispatches the expert's 5 launches and the next expert's compare
    and ``nonzero`` (≈ 7 × 15–25 µs) while it runs, so each ``nonzero``
    waits for it: the queue empties 8 times a layer. Then the GPU waits
    while the count comes back, the host returns and dispatches the
    gather (sync) and the first matmul (launch): ≈ 70–110 µs after each
    of 64 syncs, ≈ 4.5–7 ms per step, ≈ 2/3 of it behind the syncs. The
    ``nonzero`` row itself (≈ 35–70 µs: the count kernel, the host's
    return inside the op, the output kernel; CUDA's events bracket it so)
    reads as busy: busy ≈ (160 + 50) / (160 + 50 + 90) ≈ 65–80 %, below the
    85 % line, and sync the largest idle cause by ≥ 25 points. Sync-bound.
    (8192 tokens, twice the expert work, sat at 81–85 % busy: on the
    line, GPU-bound on a quiet machine. In training the experts'
    backward, 2× the forward's work and sync-free, would hide the
    syncs.)"""
    torch.manual_seed(0)
    with META:
        layers = nn.Sequential(*(Experts(1024, 8) for _ in range(8))).requires_grad_(False)
        head = nn.Linear(1024, 10)
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    batches = meta_batches(5, 4096, 1024)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed, nonzero_fraction=1 / 8)) as rec:
        for x, y in batches:
            with torch.no_grad():
                feats = layers(x)
            loss = F.cross_entropy(head(feats), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline
