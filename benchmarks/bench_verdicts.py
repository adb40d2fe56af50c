"""Per-step verdicts on training loops whose right verdict is known by construction.

    python benchmarks/bench_verdicts.py [--repeats 3] [--load] [--fast]
                                        [--only NAME[,NAME]] [--list]

Each scenario is a realistic training loop recorded on a simulated H100
(``ctl.SimGPU("h100")``) over ``meta`` tensors, written as a user would
write it, whose verdict follows from arithmetic on the H100's roofline
(fp32: 67 TFLOP/s without TF32, 494.5 TFLOP/s for convolutions, which
cuDNN runs on TF32 by default; 3.35 TB/s; 2 µs per kernel at least; 4 µs
launch latency) against a CUDA dispatch cost of about 5–10 µs per op.
Each states the verdict its steady-state steps must get (every step but
the first, which holds the recorder's start), or a verdict per step, and
the arithmetic in its docstring (``--list`` prints the one-line reasons).

The table: the scenario, the expected verdict, what ``ctl.analyze`` said
(the verdict of more than half the checked steps; steps that differ are
named after it), the mean GPU busy fraction over those steps, the margin
(the smallest ``share − runner_up_share`` over those of them that name a
cause, where the step table has those columns), how many repeats agreed with the first ("~": they
agreed, but some single step's verdict varied), and the seconds a run
took (build, record and analyze; the median over repeats). A scenario is
missed when the majority is not the expected verdict (with a per-step
expectation: when any checked step differs), when repeats disagree, or
when it raises (reported by its exception line); a scenario that cannot
run here (``Skip``) is reported and is not a miss. Exit status 1 on any
miss.

``--repeats N`` runs each scenario N times (SimGPU seeds 0..N-1: other
device clocks, the same program); verdicts must match across repeats.
``--load`` runs everything while another process burns one CPU core:
the verdicts must still be the expected ones. ``--fast`` is the subset
the test suite runs (under about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl

torch.set_num_threads(1)  # the recorder's host side as a training process sees it
META = torch.device("meta")


class Skip(Exception):
    """The scenario cannot run here; its message says why."""


@dataclass(frozen=True)
class Scenario:
    name: str
    expect: str | tuple[str | None, ...]  # steady-state verdict, or one per step (None: any)
    why: str
    run: Callable[[int], ctl.Timeline]    # SimGPU seed -> the recorded Timeline
    fast: bool


SCENARIOS: dict[str, Scenario] = {}


def scenario(expect: str | tuple[str | None, ...], why: str, *, fast: bool = False):
    """Register the decorated ``fn(seed) -> Timeline`` as a scenario."""
    def add(fn: Callable[[int], ctl.Timeline]) -> Callable[[int], ctl.Timeline]:
        if fn.__name__ in SCENARIOS:
            raise ValueError(f"scenario {fn.__name__!r} is registered twice.")
        SCENARIOS[fn.__name__] = Scenario(fn.__name__, expect, why, fn, fast)
        return fn
    return add


# -- the programs' pieces ----------------------------------------------------

def busy(seconds: float) -> None:
    """Keep the host busy in pure Python (no ops) for ``seconds``."""
    deadline = time.thread_time() + seconds  # CPU work: SimGPU discounts CPU contention
    while time.thread_time() < deadline:
        pass


def mlp(width: int, depth: int, *, d_in: int | None = None, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    d = width if d_in is None else d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, classes))


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, batches, *,
                on_step: Callable[[int, torch.Tensor], None] | None = None) -> None:
    """The plain loop: forward, cross-entropy, backward, optimizer step."""
    for i, (x, y) in enumerate(batches):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_step is not None:
            on_step(i, loss)


def meta_batches(n: int, batch: int, dim: int, classes: int = 10):
    """n (x, y) batches already on the device, as a prefetching loader leaves them."""
    return [(torch.randn(batch, dim, device=META),
             torch.randint(0, classes, (batch,), device=META)) for _ in range(n)]


class Block(nn.Module):
    """A GPT-2 block: pre-LayerNorm causal self-attention and a GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2 small (124 M parameters) with tied input and output embeddings."""

    def __init__(self, vocab: int = 50257, ctx: int = 1024, d: int = 768,
                 layers: int = 12, heads: int = 12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def gpt_steps(rec_device, make_opt, *, steps: int = 4, batch: int = 8, seq: int = 512):
    with META:
        model = GPT()
    opt = make_opt(model.parameters())
    data = [(torch.randint(0, 50257, (batch, seq), device=META),
             torch.randint(0, 50257, (batch, seq), device=META)) for _ in range(steps)]
    with ctl.record(device=rec_device) as rec:
        for idx, tgt in data:
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


def resnet18(classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-18 (11.7 M parameters, 1.82 GMAC per 224² image)."""
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                         nn.ReLU(), nn.MaxPool2d(3, 2, 1), *stages,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


class SlowBatches(Dataset):
    """Whole CPU batches, each costing ``cost_s`` of busy host time to make
    (decode and augment), as a map-style dataset read with batch_size=None."""

    def __init__(self, n: int, batch: int, dim: int, cost_s: float, classes: int = 10):
        g = torch.Generator().manual_seed(0)
        self.n, self.cost_s = n, cost_s
        self.x = torch.randn(batch, dim, generator=g)
        self.y = torch.randint(0, classes, (batch,), generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        busy(self.cost_s)
        return self.x, self.y


# -- the scenarios -----------------------------------------------------------

@scenario("launch-bound", "≈ 27 launches/step of ≈ 2 µs kernels, ≈ 75 ops of 5–10 µs",
          fast=True)
def tiny_mlp(seed: int) -> ctl.Timeline:
    """3 Linear layers 64 wide, batch 32, Adam. Every kernel is at the
    2 µs floor (the largest matmul is 2·32·64·64 = 262 kFLOP, 4 ns at
    67 TFLOP/s) and starts 4 µs after its launch, while the host spends
    5–10 µs on each of ≈ 75 ops per step (forward, backward, Adam on its
    foreach path; ≈ 27 of them launch work): ≈ 0.6 ms of host per ≈ 0.1 ms
    of GPU work, so the GPU waits for dispatch most of the step."""
    torch.manual_seed(0)
    model = mlp(64, 2, d_in=64).to(META)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = meta_batches(6, 32, 64)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, batches)
    return rec.timeline


_GPT_WHY = "3.3 TFLOP/step (≈ 57 ms on the roofline) vs ≈ 1,550 ops × ≤ 10 µs ≈ 15 ms"


@scenario("GPU-bound", _GPT_WHY)
def gpt2_adamw(seed: int) -> ctl.Timeline:
    """GPT-2 small (12 layers × 768, 12 heads), batch 8 × 512 tokens, AdamW
    (its default implementation). FLOPs per step ≈ 6 · 124 M params · 4,096
    tokens = 3.05 T plus attention 12 layers · 3 · 4·8·512²·768 = 0.23 T:
    3.3 TFLOP, ≈ 49 ms at the fp32 67 TFLOP/s (matmuls do not use TF32 by
    default); with the memory-bound ops (LayerNorm, GELU, softmax over 8 ×
    512 × 50,257 logits, the optimizer's passes over 124 M parameters) the
    roofline puts a step at ≈ 57 ms. The host dispatches ≈ 1,550 ops per
    step (AdamW's default is its foreach path on CUDA): ≤ 1,550 × 10 µs ≈
    15 ms, so the queue only grows and the GPU never waits. Even AdamW's
    per-tensor loop over the 148 tensors (its path for CPU tensors, ≈
    3,300 ops per step: ≤ 33 ms) would keep it GPU-bound. (A step records
    in 0.2–0.7 s here.)"""
    return gpt_steps(ctl.SimGPU("h100", seed=seed),
                     lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1))


@scenario("GPU-bound", _GPT_WHY)
def gpt2_adamw_foreach(seed: int) -> ctl.Timeline:
    """As ``gpt2_adamw`` with ``AdamW(foreach=True)`` said explicitly (the
    default's own path on CUDA): the optimizer is a dozen multi-tensor ops
    over all 148 tensors; ≈ 1,550 ops of host per ≈ 57 ms step."""
    return gpt_steps(ctl.SimGPU("h100", seed=seed),
                     lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1, foreach=True))


@scenario("GPU-bound", _GPT_WHY.replace("1,550 ops × ≤ 10 µs ≈ 15", "1,250 ops ≈ 13"))
def gpt2_adamw_fused(seed: int) -> ctl.Timeline:
    """As ``gpt2_adamw`` with ``AdamW(fused=True)``: one fused kernel per
    step for the optimizer, ≈ 1,250 ops of host per step; skipped where
    torch refuses fused on meta parameters (it checks their device type at
    the first step)."""
    try:
        return gpt_steps(ctl.SimGPU("h100", seed=seed), lambda p: torch.optim.AdamW(
            p, lr=3e-4, weight_decay=0.1, fused=True))
    except RuntimeError as e:  # torch checks the parameters' device at the first step
        if "fused" not in str(e):
            raise
        raise Skip(f"AdamW(fused=True) refuses meta parameters: "
                   f"{str(e).splitlines()[0][:90]}") from None


@scenario("GPU-bound", "2.8 TFLOP at TF32 + BatchNorm traffic ≈ 17 ms vs ≈ 300 ops ≤ 3 ms")
def resnet18_b256(seed: int) -> ctl.Timeline:
    """ResNet-18, batch 256 of 224², SGD with momentum. Convolutions:
    1.82 GMAC = 3.64 GFLOP per image forward, × 3 with backward × 256 =
    2.8 TFLOP per step, 5.7 ms at TF32's 494.5 TFLOP/s (cuDNN's default).
    BatchNorm, ReLU and the residual adds move the activations (~2.5 M
    floats per image, ≈ 2.6 GB per pass at batch 256) several times each
    way: the roofline puts a step at ≈ 17 ms. The host dispatches ≈ 300
    ops per step (forward, backward, SGD on its foreach path as on CUDA):
    × 5–10 µs ≤ 3 ms; SGD's per-tensor loop over the 62 tensors would add
    ≈ 250 more, still ≤ 6 ms. (torchvision is not installed here, so the
    model is written out, layer for layer.)"""
    torch.manual_seed(0)
    with META:
        model = resnet18()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    data = [(torch.randn(256, 3, 224, 224, device=META),
             torch.randint(0, 1000, (256,), device=META)) for _ in range(4)]
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, data)
    return rec.timeline


@scenario("GPU-bound", "4 × 4096² Linear, batch 4096: 1.6 TFLOP ≈ 25 ms vs ~40 ops", fast=True)
def mlp4096(seed: int) -> ctl.Timeline:
    """An MLP of 4 Linear layers 4096 wide (and a 10-way head), batch 4096,
    SGD. Each layer is 2·4096³ = 137 GFLOP forward, three times that with
    backward: 4 · 412 ≈ 1.65 TFLOP ≈ 25 ms per step at 67 TFLOP/s, against
    ~40 ops of host dispatch (< 1 ms)."""
    torch.manual_seed(0)
    model = mlp(4096, 4).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(5, 4096, 4096))
    return rec.timeline


def medium_mlp() -> nn.Module:
    """Linear 1024→4096, 4096→4096 ×2, 4096→10: at batch 2048 a step is
    2·2048·(1024·4096 + 2·4096²)·3 = 0.46 TFLOP ≈ 6.9 ms at 67 TFLOP/s,
    from ≈ 45 ops (≈ 25 launches) of host dispatch."""
    return mlp(4096, 3, d_in=1024).to(META)


def loader_steps(seed: int, *, workers: int, cost_s: float, steps: int = 6) -> ctl.Timeline:
    """A DataLoader of CPU batches, each moved to the device in the loop,
    into ``medium_mlp`` (≈ 7 ms of GPU work per step)."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with warnings.catch_warnings():  # "more workers than cores": known, on 2 cores
        warnings.filterwarnings("ignore", "This DataLoader will create")
        loader = DataLoader(SlowBatches(steps, 2048, 1024, cost_s), batch_size=None,
                            num_workers=workers, shuffle=False)
        with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
            for x, y in loader:
                x, y = x.to(META, non_blocking=True), y.to(META, non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    return rec.timeline


@scenario("input-bound", "20 ms of batch making on the main thread vs ≈ 7 ms of GPU work",
          fast=True)
def loader_workers0(seed: int) -> ctl.Timeline:
    """``DataLoader(num_workers=0)``: each batch costs 20 ms of host time
    inside the fetch, on the training thread, and the 8 MB batch's copy to
    the device ≈ 1 ms more; the model's step is ≈ 7 ms of GPU work
    (``medium_mlp``): the GPU idles ≈ 14 ms per step waiting for data."""
    return loader_steps(seed, workers=0, cost_s=20e-3)


@scenario("GPU-bound", "4 workers make a 1 ms batch ahead; ≈ 7 ms of GPU work per step")
def loader_workers4(seed: int) -> ctl.Timeline:
    """``DataLoader(num_workers=4)`` over batches costing 1 ms each, made
    in worker processes and prefetched (2 per worker): a fetch on the
    training thread only takes a ready batch off a queue, so the host
    dispatches ≈ 45 ops and copies the 8 MB batch (≈ 1 ms) per step, and
    the GPU's ≈ 7 ms per step (``medium_mlp``) is the step. The workers
    need 1 ms of CPU per 7 ms step, so even on 2 cores they keep up
    without starving the training thread (at 3 ms, 4 busy workers on 2
    cores slowed it in the first steps)."""
    return loader_steps(seed, workers=4, cost_s=1e-3, steps=10)


class Backbone(nn.Module):
    """A frozen feature extractor: ``depth`` Linear 2048→2048 + GELU layers.
    With ``check`` on, each layer's activation norm is read back to the
    host (a per-layer health statistic)."""

    def __init__(self, width: int = 2048, depth: int = 16):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.check = False
        self.peaks: list[float] = []

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = F.gelu(layer(h))
            if self.check:
                self.peaks.append(h.norm().item())
        return h


def probe_steps(seed: int, check_steps: int, steps: int, batch: int = 512,
                steady_batch: int | None = None) -> ctl.Timeline:
    """A linear probe: a classifier head trained on the frozen backbone's
    features, the backbone checked in steps < check_steps (with batches of
    ``batch``; ``steady_batch`` for the later steps if given)."""
    torch.manual_seed(0)
    backbone = Backbone(depth=96).to(META).requires_grad_(False)
    head = nn.Linear(2048, 10).to(META)
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    later = steady_batch or batch
    batches = meta_batches(min(check_steps, steps), batch, 2048) + \
        meta_batches(max(steps - check_steps, 0), later, 2048)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for i, (x, y) in enumerate(batches):
            backbone.check = i < check_steps
            with torch.no_grad():
                feats = backbone(x)
            loss = F.cross_entropy(head(feats), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@scenario("sync-bound", "a read per layer drains the queue: ≈ 75 µs of work, ≈ 25 µs idle",
          fast=True)
def item_per_layer(seed: int) -> ctl.Timeline:
    """``.item()`` of each layer's activation norm inside the forward's
    layer loop (``probe_steps`` with the check on in every step; 96 layers
    2048 wide, batch 512). A layer's matmul is 2·512·2048² = 4.3 GFLOP ≈
    64 µs at 67 TFLOP/s; its GELU and norm (4 MB each) ≈ 4 µs each and the
    4-byte copy 2 µs: ≈ 75 µs, behind which the host dispatches the
    layer's 3 launches. Then the read empties the queue and the GPU waits
    while the value comes back, the host returns, runs the loop and
    dispatches the next matmul (≈ 20–30 µs): 96 times a step, ≈ 2.4 ms,
    against ≈ 0.7 ms of launch-bound head training (≈ 20 small ops) and
    the loop between steps: busy ≈ 7.2 / 10.5 ≈ 65–75 %, the idle time
    mostly (≈ 70 %) behind the reads. The backbone is frozen (run under
    ``no_grad``, as in linear probing): in full training its backward
    would triple the work between reads and hide them (≈ 90 % busy).
    Without the reads the same loop is GPU-bound (``warmup_then_steady``)."""
    return probe_steps(seed, check_steps=10 ** 6, steps=5)


@scenario((None, "sync-bound", "GPU-bound", "GPU-bound", "GPU-bound", "GPU-bound"),
          "item_per_layer's reads in steps 0–1 only; then ≈ 13 ms of GPU work per "
          "step against ≈ 0.7 ms of launch-bound head training", fast=True)
def warmup_then_steady(seed: int) -> ctl.Timeline:
    """``item_per_layer``'s loop with its per-layer reads on for the first
    2 steps only (a warm-up check on batches of 512), then off, on the
    full batch of 1024. Then a layer is 130 µs matmul + 5 µs GELU of GPU
    work against 2 launches (+ a view and the module call) of host
    dispatch, ≈ 30–60 µs here: the queue grows through the backbone, and
    the head's ≈ 20 small launches leave ≈ 0.5–0.8 ms of idle per
    ≈ 13 ms step (≈ 94 % busy). Step 0 holds the recorder's start
    and is not checked."""
    return probe_steps(seed, check_steps=2, steps=6, steady_batch=1024)


@scenario("GPU-bound", "one 2 µs read-back per ≈ 25 ms step", fast=True)
def loss_item_per_step(seed: int) -> ctl.Timeline:
    """``mlp4096`` logging ``loss.item()`` once per step: the read drains
    the queue once per ≈ 25 ms step and the GPU then waits ≈ 10–20 µs for
    the next step's first launch, < 0.1 % of the step."""
    torch.manual_seed(0)
    model = mlp(4096, 4).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses: list[float] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(5, 4096, 4096),
                    on_step=lambda i, loss: losses.append(loss.item()))
    return rec.timeline


@scenario("host-bound", "30 ms of pure Python per step vs ≈ 7 ms of GPU work", fast=True)
def python_between_steps(seed: int) -> ctl.Timeline:
    """30 ms of pure Python (no ops: bookkeeping, a slow metrics library)
    after each step of ``medium_mlp`` (≈ 7 ms of GPU work per step, ≈ 45
    ops of dispatch). The GPU idles ≈ 23 ms per step while the host runs
    Python that dispatches nothing: neither data, nor a sync, nor launches
    are to blame."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(5, 2048, 1024),
                    on_step=lambda i, loss: busy(30e-3))
    return rec.timeline


@scenario("GPU-bound", "a 67 MB copy on stream 1 beside ≈ 25 ms of compute on stream 0",
          fast=True)
def side_stream_prefetch(seed: int) -> ctl.Timeline:
    """``mlp4096`` fed by a prefetcher: the next batch is copied to the
    device on side stream 1 while the current step computes on stream 0,
    which waits for the copy before using it. The 67 MB copy takes the
    host ≈ 7 ms to stage (pageable memory) and the GPU a few ms over PCIe
    at most, against ≈ 25 ms of compute: stream 1 is idle most of the
    step, stream 0 busy throughout, and the idle side stream must not make
    the step look starved."""
    torch.manual_seed(0)
    model = mlp(4096, 4).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    pool = [(torch.randn(4096, 4096), torch.randint(0, 10, (4096,))) for _ in range(2)]
    host = [pool[i % 2] for i in range(5)]  # the batches a CPU loader hands over
    gpu = ctl.SimGPU("h100", seed=seed)
    with ctl.record(device=gpu) as rec:
        with gpu.stream(1):
            nxt = [t.to(META, non_blocking=True) for t in host[0]]
        for i in range(len(host)):
            gpu.wait_stream(0, 1)
            x, y = nxt
            if i + 1 < len(host):
                with gpu.stream(1):
                    nxt = [t.to(META, non_blocking=True) for t in host[i + 1]]
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@scenario("GPU-bound", "4 micro-batches × 0.41 TFLOP ≈ 25 ms per optimizer step vs ~150 ops")
def grad_accumulation(seed: int) -> ctl.Timeline:
    """``mlp4096`` at micro-batch 1024, gradients accumulated over 4
    micro-batches per optimizer step (the loss scaled by 1/4): each
    micro-batch is 4 · 3 · 2·1024·4096² = 0.41 TFLOP ≈ 6 ms, 4 per step,
    against ≈ 35 ops of dispatch per micro-batch."""
    torch.manual_seed(0)
    model = mlp(4096, 4).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = meta_batches(4 * 5, 1024, 4096)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for i, (x, y) in enumerate(batches):
            (F.cross_entropy(model(x), y) / 4).backward()
            if i % 4 == 3:
                opt.step()
                opt.zero_grad(set_to_none=True)
    return rec.timeline


# -- the harness -------------------------------------------------------------

@dataclass
class Outcome:
    verdicts: tuple[str, ...] | None  # every step's verdict; None when it raised or skipped
    busy: float = math.nan            # mean busy fraction over the checked steps
    margin: float = math.nan          # smallest share − runner-up share over them
    seconds: float = math.nan
    error: str = ""                   # the exception line, or the Skip reason
    skipped: bool = False


def checked(sc: Scenario, n: int) -> list[int]:
    """The step rows a scenario's expectation covers."""
    if isinstance(sc.expect, str):
        return list(range(1, n))
    return [i for i, v in enumerate(sc.expect[:n]) if v is not None]


def expected_at(sc: Scenario, i: int) -> str:
    return sc.expect if isinstance(sc.expect, str) else sc.expect[i]


def run_once(sc: Scenario, seed: int) -> Outcome:
    t0 = time.perf_counter()
    try:
        tl = sc.run(seed)
        steps = ctl.analyze(tl).steps
    except Skip as e:
        return Outcome(None, error=str(e), skipped=True)
    except Exception as e:  # noqa: BLE001 -- a crash is a miss, reported by its line
        line = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()[0]
        return Outcome(None, error=line, seconds=time.perf_counter() - t0)
    out = Outcome(tuple(str(v) for v in steps["verdict"]),
                  seconds=time.perf_counter() - t0)
    rows = checked(sc, len(steps))
    if rows:
        out.busy = float(np.mean(steps["busy_frac"][rows]))
        names = steps.dtype.names
        if "share" in names and "runner_up_share" in names:
            share = steps["share"][rows].astype(float)
            m = share - steps["runner_up_share"][rows].astype(float)
            m = m[share > 0]  # a step with no idle cause (GPU-bound) has no share
            out.margin = float(np.nanmin(m)) if np.isfinite(m).any() else math.nan
    return out


def majority(sc: Scenario, verdicts: tuple[str, ...]) -> str:
    """The verdict of more than half the checked steps ("no majority" if none)."""
    rows = checked(sc, len(verdicts))
    if not rows:
        return "(no steps)"
    top, count = collections.Counter(verdicts[i] for i in rows).most_common(1)[0]
    return top if 2 * count > len(rows) else "no majority"


def answer(sc: Scenario, o: Outcome) -> str | tuple[str, ...] | None:
    """What a run said, in the form the scenario expects: the majority
    verdict, or the checked steps' verdicts."""
    if o.verdicts is None:
        return None
    if isinstance(sc.expect, str):
        return majority(sc, o.verdicts)
    return tuple(o.verdicts[i] for i in checked(sc, len(o.verdicts)))


def misses(sc: Scenario, o: Outcome) -> list[str]:
    """What is wrong with one run ([] when right): its exception, a wrong
    majority, or (per-step expectations) each wrong step."""
    if o.skipped:
        return []
    if o.verdicts is None:
        return [o.error]
    n = len(o.verdicts)
    if not isinstance(sc.expect, str):
        if n != len(sc.expect):
            return [f"{n} steps recorded, {len(sc.expect)} expected"]
        return [f"step {i}: {o.verdicts[i]}" for i in checked(sc, n)
                if o.verdicts[i] != sc.expect[i]]
    if n < 2:
        return [f"{n} steps recorded; at least 2 expected"]
    got = majority(sc, o.verdicts)
    said = ", ".join(f"step {i} {o.verdicts[i]}" for i in checked(sc, n))
    return [] if got == sc.expect else [
        f"{got if got == 'no majority' else 'majority ' + got}: {said}"]


def runs(values: list[str]) -> str:
    """'a, a, b' -> 'a×2, b'."""
    out = []
    for v, g in ((v, len(list(g))) for v, g in itertools.groupby(values)):
        out.append(v if g == 1 else f"{v}×{g}")
    return ", ".join(out)


@dataclass
class Row:
    scenario: Scenario
    outcomes: list[Outcome]

    @property
    def skipped(self) -> bool:
        return self.outcomes[0].skipped

    @property
    def stable(self) -> bool:
        """Every repeat gave the same answer (majority, or per-step list)."""
        return len({answer(self.scenario, o) for o in self.outcomes}) == 1

    def stability(self) -> str:
        """'3/3': repeats agreeing with the first; '~' where they agree but
        some step's own verdict varied."""
        if self.skipped:
            return ""
        first = answer(self.scenario, self.outcomes[0])
        same = sum(answer(self.scenario, o) == first for o in self.outcomes)
        steps_vary = len({o.verdicts for o in self.outcomes}) > 1
        return f"{same}/{len(self.outcomes)}" + ("~" if steps_vary and same == len(
            self.outcomes) else "")

    @property
    def problems(self) -> list[str]:
        """Every distinct miss, with the repeats that had it where not all
        did, and any disagreement between repeats."""
        seen: dict[str, list[int]] = {}
        for r, o in enumerate(self.outcomes):
            for m in misses(self.scenario, o):
                seen.setdefault(m, []).append(r)
        n = len(self.outcomes)
        out = [m if len(rs) == n else f"{m} (repeat {', '.join(map(str, rs))})"
               for m, rs in seen.items()]
        if not self.skipped and not self.stable:
            out.append("the verdict differs across repeats")
        return out

    @property
    def ok(self) -> bool:
        return self.skipped or not self.problems

    def expected(self) -> str:
        e = self.scenario.expect
        return e if isinstance(e, str) else runs(["-" if v is None else v for v in e])

    def got(self) -> str:
        worst = next((o for o in self.outcomes if misses(self.scenario, o)), self.outcomes[0])
        if worst.skipped:
            return "skipped"
        if worst.verdicts is None:
            return "error"
        sc, v = self.scenario, worst.verdicts
        rows = checked(sc, len(v))
        if not isinstance(sc.expect, str):
            return runs(["-" if i not in rows else v[i] for i in range(len(v))])
        top = majority(sc, v)
        odd = [f"{i}:{v[i]}" for i in rows if v[i] != top]
        return top + (f" (step {', '.join(odd)})" if odd else "")


def run(names: list[str], repeats: int, *, log=print) -> list[Row]:
    rows = []
    for name in names:
        sc = SCENARIOS[name]
        outcomes = []
        for r in range(repeats):
            o = run_once(sc, seed=r)
            outcomes.append(o)
            if o.skipped:
                break
        rows.append(Row(sc, outcomes))
        log(f"  {name}: {'ok' if rows[-1].ok else 'MISS'} "
            f"({statistics.median(o.seconds for o in outcomes):.1f} s)"
            if not rows[-1].skipped else f"  {name}: skipped", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    head = ("scenario", "expected", "got", "busy %", "margin", "stable", "s", "")
    lines = [head]
    for row in rows:
        os_ = [o for o in row.outcomes if not o.skipped]
        busy_ = statistics.mean(o.busy for o in os_) if os_ else math.nan
        margins = [o.margin for o in os_ if not math.isnan(o.margin)]
        secs = [o.seconds for o in os_ if not math.isnan(o.seconds)]
        lines.append((row.scenario.name, row.expected(), row.got(),
                      "" if math.isnan(busy_) else f"{100 * busy_:.0f}",
                      f"{100 * min(margins):.0f}" if margins else "",
                      row.stability(),
                      f"{statistics.median(secs):.1f}" if secs else "",
                      "" if row.ok else "MISS"))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines]
    text.insert(1, "  ".join("-" * w for w in widths).rstrip())
    for row in rows:
        if row.skipped:
            text.append(f"{row.scenario.name}: skipped: {row.outcomes[0].error}")
        text += [f"{row.scenario.name}: {p}" for p in row.problems]
    return "\n".join(text)


def burner() -> subprocess.Popen:
    """Another process keeping one CPU core busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--load", action="store_true",
                    help="run with another process burning one CPU core")
    ap.add_argument("--only", default="", help="NAME[,NAME]: these scenarios only")
    ap.add_argument("--fast", action="store_true", help="the quick subset (tests)")
    ap.add_argument("--list", action="store_true", help="list scenarios and their reasons")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats} must be at least 1.")
    names = list(SCENARIOS)
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            ap.error(f"--only: no scenario named {', '.join(unknown)}; "
                     f"there are {', '.join(SCENARIOS)}.")
    if a.fast:
        names = [n for n in names if SCENARIOS[n].fast]
    if a.list:
        for n in names:
            sc = SCENARIOS[n]
            e = sc.expect if isinstance(sc.expect, str) else runs(
                ["-" if v is None else v for v in sc.expect])
            print(f"{n:22s} {e:27s} {sc.why}")
        return 0
    print(f"torch {torch.__version__}, SimGPU h100, {a.repeats} repeat(s)"
          f"{', one core loaded' if a.load else ''}", flush=True)
    hog = burner() if a.load else None
    try:
        t0 = time.perf_counter()
        rows = run(names, a.repeats)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    print(table(rows))
    bad = [r.scenario.name for r in rows if not r.ok]
    print(f"{len(rows) - len(bad)}/{len(rows)} right in {time.perf_counter() - t0:.0f} s"
          + (f"; missed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
