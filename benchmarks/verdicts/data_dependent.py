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


@scenario("sync-bound", "a routing sync per expert: ≈ 0.3 ms of expert work against ≈ 0.25 ms of "
          "dispatch, ≈ 70 µs idle after each of 64 syncs a step")
def moe_routing(seed: int) -> ctl.Timeline:
    """Inference-style forward of 8 MoE layers (``Experts``, d = 1024, 8
    experts, 6144 tokens, no grad; a small head trained on its output so
    each step ends in an optimizer step), ``nonzero_fraction=1/8``: each
    expert gets 768 tokens. An expert's MLP is 2·768·1024·4096·2 = 12.9
    GFLOP ≈ 190 µs at 67 TFLOP/s; with the gather (the roofline prices an
    index by all of ``x``, 24 MB), ``index_add_``, GELU and the compare,
    ≈ 0.3 ms of GPU work (20 ms a step recorded, 64 experts). The host
    dispatches ≈ 11 ops an expert (the compare, ``nonzero``, the index,
    the gather, two linears, GELU, ``index_add_``), ≈ 20–25 µs each on
    the 2-core VM: ≈ 0.25 ms, less than the GPU's 0.3 ms, so without the
    syncs the queue would grow. With them it empties 64 times a step: each
    ``nonzero`` waits for the expert before it, then the GPU waits while
    the count comes back, the host returns and dispatches the gather:
    ≈ 70 µs × 64 ≈ 4.5 ms idle per ≈ 25 ms step, ≈ 80 % busy. Removing
    the syncs gains that idle and the count kernels (≈ 25 % predicted);
    CUDA graphs of the sync-free pieces gain only the dispatch after each
    sync (≈ 10–15 %): sync-bound, the runner-up well outside the 20 %
    mixed margin. (At 4096 tokens, as this scenario was, the expert's 0.2
    ms of GPU work meets the same 0.25 ms of dispatch on this VM: without
    the syncs the loop would wait for the host, graphs gain about as much
    as removing the syncs, and the runs read mixed; on a host twice as
    fast the arithmetic above gives sync-bound there too.)"""
    torch.manual_seed(0)
    with META:
        layers = nn.Sequential(*(Experts(1024, 8) for _ in range(8))).requires_grad_(False)
        head = nn.Linear(1024, 10)
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    batches = meta_batches(5, 6144, 1024)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed, nonzero_fraction=1 / 8)) as rec:
        for x, y in batches:
            with torch.no_grad():
                feats = layers(x)
            loss = F.cross_entropy(head(feats), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline
