"""The first verdict scenarios of ``bench_verdicts.py``: training loops whose
right verdict is known by construction, each a function ``fn(seed) ->
Timeline`` marked with ``@scenario``, and the program pieces every set shares.

Each is recorded on a simulated H100 (``ctl.SimGPU("h100")``) over
``meta`` tensors; its docstring derives the verdict from the H100's
roofline (fp32: 67 TFLOP/s without TF32, 494.5 TFLOP/s for convolutions,
which cuDNN runs on TF32 by default; bf16: 989 TFLOP/s; 3.35 TB/s; 2 µs
per kernel at least; 4 µs launch latency) against a CUDA dispatch cost of
about 4–8 µs per op (``devices/sim/host.py``). The other sets and their
order are listed in ``sets.py``; the models are in ``models.py`` and
``models_checkpointed_vit.py``.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from models import GPT, mlp, resnet18

import cutimeline as ctl

# the zoo's loops (third_party.py, training_frameworks.py) and Skip are in benchmarks/zoo/
ZOO = str(Path(__file__).resolve().parents[1] / "zoo")
if ZOO not in sys.path:
    sys.path.append(ZOO)
from zoo import Skip  # noqa: E402  (re-exported: the sets raise it)

torch.set_num_threads(1)  # the recorder's host side as a training process sees it
META = torch.device("meta")


@dataclass(frozen=True)
class Scenario:
    name: str
    expect: str | tuple[str | None, ...]  # steady-state verdict, or one per step (None: any)
    why: str
    run: Callable[[int], ctl.Timeline]    # SimGPU seed -> the recorded Timeline
    fast: bool


def scenario(expect: str | tuple[str | None, ...], why: str, *, fast: bool = False):
    """Mark the decorated ``fn(seed) -> Timeline`` as a scenario (its
    ``.scenario``); ``sets.scenarios()`` collects them, set by set."""
    def mark(fn: Callable[[int], ctl.Timeline]) -> Callable[[int], ctl.Timeline]:
        fn.scenario = Scenario(fn.__name__, expect, why, fn, fast)
        return fn
    return mark


# -- the programs' pieces ----------------------------------------------------

def busy(seconds: float) -> None:
    """Keep the host busy in pure Python (no ops) for ``seconds``."""
    deadline = time.thread_time() + seconds  # CPU work: SimGPU discounts CPU contention
    while time.thread_time() < deadline:
        pass


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


def gpt_steps(rec_device, make_opt, *, steps: int = 4, batch: int = 8, seq: int = 512,
              after_step=None):
    """GPT-2 small trained ``steps`` steps; ``after_step(model)`` runs after
    each optimizer step (an EMA update, say)."""
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
            if after_step is not None:
                after_step(model)
    return rec.timeline


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


@scenario("sync-bound", "a read per layer drains the queue: ≈ 140 µs of work, ≈ 50–100 µs idle",
          fast=True)
def item_per_layer(seed: int) -> ctl.Timeline:
    """``.item()`` of each layer's activation norm inside the forward's
    layer loop (``probe_steps`` with the check on in every step; 96 layers
    2048 wide, batch 1024). A layer's matmul is 2·1024·2048² = 8.6 GFLOP ≈
    128 µs at 67 TFLOP/s; its GELU and norm (8 MB each) ≈ 5 µs each and the
    4-byte copy 2 µs: ≈ 140 µs. The host dispatches the layer (the module
    call, the linear's two ops, GELU, the norm, the read: ≈ 100–120 µs on
    the 2-core VM, at ≈ 20 µs an op) in less than that, so without the
    reads the queue would grow. With them it empties 96 times a step: the
    GPU waits while the value comes back, the host returns, runs the loop
    and dispatches the next matmul (≈ 50–100 µs here, 20–30 µs on a fast
    host): ≈ 7 ms a step against ≈ 13.4 ms of backbone work and ≈ 0.7 ms of
    launch-bound head training (≈ 20 small ops): busy ≈ 65–80 %, the idle
    time mostly behind the reads. Removing them gains that idle (≈ 30 %
    predicted); CUDA graphs of the pieces between reads gain only the
    dispatch after each (about half as much): sync-bound. The backbone is
    frozen (run under ``no_grad``, as in linear probing): in full training
    its backward would triple the work between reads and hide them (≈ 90 %
    busy). Without the reads the same loop is GPU-bound
    (``warmup_then_steady``). Its truth depends on the host: at batch 512,
    as this scenario was, a layer's 75 µs of GPU work met the same ≈
    100–120 µs of dispatch on this VM, so without the reads the loop would
    wait for the host, and the sync and graphs fixes came within the mixed
    margin in some runs; on a host 2–3× faster than this VM the idle after
    the reads falls to ≈ 2.4 ms a step, near the 85 % line at batch 1024.)"""
    return probe_steps(seed, check_steps=10 ** 6, steps=5, batch=1024)


@scenario((None, "sync-bound", "GPU-bound", "GPU-bound", "GPU-bound", "GPU-bound"),
          "item_per_layer's reads in steps 0–1 only; then ≈ 13 ms of GPU work per "
          "step against ≈ 0.7 ms of launch-bound head training", fast=True)
def warmup_then_steady(seed: int) -> ctl.Timeline:
    """``item_per_layer``'s loop, batch 1024, with its per-layer reads on
    for the first 2 steps only (a warm-up check: step 1 is
    ``item_per_layer``'s sync-bound step), then off. Then a layer is 130 µs
    matmul + 5 µs GELU of GPU work against 2 launches (+ a view and the
    module call) of host dispatch, ≈ 30–60 µs here: the queue grows
    through the backbone, and the head's ≈ 20 small launches leave ≈
    0.5–0.8 ms of idle per ≈ 13 ms step (≈ 94 % busy). Step 0 holds the
    recorder's start and is not checked. (The check steps ran on batches
    of 512 until item_per_layer moved to 1024: there step 1's sync and
    host or graphs fixes came within the mixed margin in some runs.)"""
    return probe_steps(seed, check_steps=2, steps=6, batch=1024)


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
