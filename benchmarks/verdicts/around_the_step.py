"""More verdict scenarios: the loops people write around the training step.

Mixed precision with a loss-scaler check, gradient clipping with a finite
check, weight averaging, periodic metrics, evaluation, DataLoader workers,
timing syncs, schedulers with accumulation and a reinforcement-learning
loop: each is a pattern whose read-backs, tiny ops or host Python could
mislead a verdict. The second set of ``sets.py``; the arithmetic uses the
same H100 figures (``scenarios.py``' module doc).
"""

from __future__ import annotations

import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from models import GPT, mlp, resnet18
from scenarios import (META, SlowBatches, busy, gpt_steps, medium_mlp, meta_batches,
                               scenario, train_steps)

import cutimeline as ctl

BF16 = torch.bfloat16


class AmpConv(nn.Conv2d):
    """A convolution as bf16 autocast runs it: input and fp32 weight cast
    to bf16 (one ``_to_copy`` each), the convolution in bf16. Autocast
    itself is CUDA/CPU-only and does nothing to meta tensors, so the
    scenario writes out the op stream it would give."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x.to(BF16), self.weight.to(BF16), None)


def amp_resnet18() -> nn.Module:
    """``resnet18`` with every convolution under bf16 autocast (BatchNorm
    takes the bf16 activations with its fp32 parameters, as cuDNN does)."""
    model = resnet18()
    for mod in list(model.modules()):
        for name, child in mod.named_children():
            if isinstance(child, nn.Conv2d):
                amp = AmpConv(child.in_channels, child.out_channels, child.kernel_size,
                              child.stride, child.padding, bias=False, device=META)
                setattr(mod, name, amp)
    return model


@scenario("GPU-bound", "bf16 ResNet-18 b1024: ≈ 38 ms of GPU work vs ≈ 12 ms of host; "
          "one found_inf read per step")
def amp_cnn_scaler(seed: int) -> ctl.Timeline:
    """ResNet-18 in channels_last under bf16 autocast, batch 512 of 224²,
    SGD with momentum, and a GradScaler-style step: the loss scaled by
    2¹⁶, gradients unscaled in one foreach op, their norms checked for
    inf/NaN and ``found_inf.item()`` read before the optimizer step (what
    ``GradScaler.step`` does). Convolutions: 11.2 TFLOP per step (4 ×
    ``resnet18_b256``'s) at bf16's 989 TFLOP/s ≈ 11.3 ms; BatchNorm, ReLU
    and the adds move ≈ 5 GB of bf16 activations per pass many times
    over: SimGPU's roofline gives ≈ 38 ms of GPU work per step (≈ 9.4 ms
    at batch 256). The host dispatches ≈ 350 ops per step (the 21 weight
    casts and the scaler's ≈ 8 included), each ≈ 4–8 µs of dispatch plus
    the Python, autograd and module hooks above it, measured for real:
    ≈ 12 ms per step on the 2-core VM of RESULTS.md. So the queue grows
    until the read, which drains it once per step; the GPU then waits
    for the optimizer's first launch and for the small ops (weight casts,
    the optimizer's) while the queue refills, ≈ 1–3 ms: ≥ 90 % busy. (At
    batch 256 the same loop is launch-bound on that VM, ≈ 9.4 ms of GPU
    work per ≈ 13 ms of host, and at 512 it sits on the 85 % line: bf16
    halves the GPU's share, not the host's.)"""
    torch.manual_seed(0)
    with META:
        model = amp_resnet18()
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = [(torch.randn(1024, 3, 224, 224, device=META).to(memory_format=torch.channels_last),
             torch.randint(0, 1000, (1024,), device=META)) for _ in range(4)]
    scale = 2.0 ** 16
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in data:
            loss = F.cross_entropy(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            (loss * scale).backward()
            grads = [p.grad for p in model.parameters()]
            torch._foreach_mul_(grads, 1.0 / scale)
            found_inf = ~torch.stack(torch._foreach_norm(grads)).isfinite().all()
            if not found_inf.item():
                opt.step()
    return rec.timeline


def clip_steps(seed: int, model: nn.Module, batches) -> ctl.Timeline:
    """``clip_grad_norm_`` then, if the total norm is not finite, skip the
    step (a host read of the norm every step), Adam. Written ``if
    logical_not(isfinite(norm))`` rather than ``if not isfinite(norm)``
    (the same one read): a meta read-back is 0, which must mean finite."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if torch.logical_not(torch.isfinite(norm)):  # meta reads 0: finite
                continue
            opt.step()
    return rec.timeline


@scenario("launch-bound", "≈ 90 ops of 4–8 µs per step, ≈ 35 kernels at the 2 µs floor; "
          "the norm read waits on an empty queue", fast=True)
def clip_isfinite_small(seed: int) -> ctl.Timeline:
    """``tiny_mlp``'s model (3 Linear layers 64 wide, batch 32) with
    gradient clipping and a finite check on the norm. Every kernel is at
    the 2 µs floor; the host spends 4–8 µs (plus the Python around) on each
    of ≈ 90 ops per step (forward, backward, clipping's foreach norm, stack,
    norm, clamp and foreach mul, Adam): ≈ 0.7 ms of host per ≈ 0.1 ms of
    GPU work. When the host reads the norm the GPU has ≤ 2 kernels queued
    (≈ 10 µs): the read costs the GPU about that, its copy and the next
    launch (≈ 30 µs), against ≈ 0.5 ms of waiting on launches."""
    torch.manual_seed(0)
    return clip_steps(seed, mlp(64, 2, d_in=64).to(META), meta_batches(6, 32, 64))


@scenario("GPU-bound", "one norm read per ≈ 25 ms step; ≈ 50 ops of host", fast=True)
def clip_isfinite_large(seed: int) -> ctl.Timeline:
    """``mlp4096`` (≈ 1.65 TFLOP ≈ 25 ms per step) with the same clipping
    and finite check: the read drains the queue once per step and the GPU
    waits ≈ 20–40 µs for the optimizer's first launch: < 0.2 % of a step."""
    torch.manual_seed(0)
    return clip_steps(seed, mlp(4096, 4).to(META), meta_batches(5, 4096, 4096))


def ema_update(ema: nn.Module, model: nn.Module, decay: float = 0.999) -> None:
    """timm's ModelEmaV2 update: per tensor, ``e ← decay·e + (1 − decay)·p``."""
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(decay).add_(p, alpha=1 - decay)


@scenario("launch-bound", "12-layer 256-wide MLP + per-tensor EMA: ≈ 230 ops of host vs "
          "≈ 0.3 ms of GPU per step")
def ema_small(seed: int) -> ctl.Timeline:
    """An MLP of 12 Linear layers 256 wide, batch 128, AdamW, and an EMA
    copy of it updated every step (2 ops per tensor: 26 tensors, 52 ops
    of a 2 µs kernel each). A matmul is 2·128·256² = 17 MFLOP, at the
    2 µs floor; a step's ≈ 110 kernels are ≈ 0.25 ms of GPU work against
    ≈ 230 ops of host (forward ≈ 25, backward ≈ 40, AdamW's foreach ≈ 15,
    EMA 52, plus their Python): ≥ 1.2 ms. The GPU waits for dispatch."""
    torch.manual_seed(0)
    model = mlp(256, 11, d_in=256).to(META)
    ema = mlp(256, 11, d_in=256).to(META).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(6, 128, 256),
                    on_step=lambda i, loss: ema_update(ema, model))
    return rec.timeline


@scenario("GPU-bound", "GPT-2 small's ≈ 57 ms step vs ≈ 1,550 + 296 EMA ops ≤ 20 ms")
def ema_gpt2(seed: int) -> ctl.Timeline:
    """``gpt2_adamw`` (≈ 57 ms of GPU work per step, ≈ 1,550 ops of host)
    with the per-tensor EMA update every step: 148 tensors × 2 ops, each a
    pass over the tensor (124 M parameters × 12 bytes ≈ 1.5 GB: ≈ 0.5 ms
    of GPU), ≈ 296 × 5–10 µs ≤ 3 ms of host. The queue still only grows."""
    with META:
        ema = GPT().requires_grad_(False)
    return gpt_steps(ctl.SimGPU("h100", seed=seed),
                     lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1), steps=3,
                     after_step=lambda model: ema_update(ema, model))


@scenario((None, "GPU-bound", "GPU-bound", "sync-bound", "GPU-bound", "GPU-bound",
           "GPU-bound", "sync-bound"),
          "metrics (.cpu().tolist() + 5 ms of Python) after iterations 2 and 6 "
          "idle the GPU ≈ 5 ms of steps 3 and 7 (≈ 7 ms each)")
def metrics_every_4(seed: int) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work per step, ≈ 45 ops of host)
    with a metrics block after every 4th optimizer step (iterations 2 and
    6): the predictions and labels come back with ``.cpu().tolist()``, a
    confusion matrix is counted in Python and a metrics library summarises
    it (5 ms of pure Python). Until then the host runs steps ahead of the
    GPU; the read drains the queue and the GPU sits idle through the
    5 ms of Python, which without the read would have overlapped the
    queued steps. A step ends with its ``optimizer.step()``, so the
    block after iteration k is step k + 1's: steps 3 and 7 are busy
    ≈ 7 / 12 ≈ 58 %, their idle time the read's; the others GPU-bound."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    seen: list[float] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for i, (x, y) in enumerate(meta_batches(8, 2048, 1024)):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i % 4 == 2:
                pred, true = logits.argmax(1).cpu().tolist(), y.cpu().tolist()
                confusion = [[0] * 10 for _ in range(10)]
                for p, t in zip(pred, true):
                    confusion[t][p] += 1
                busy(5e-3)  # e.g. sklearn.metrics.classification_report
                seen.append(sum(confusion[c][c] for c in range(10)) / len(pred))
    return rec.timeline


@scenario("launch-bound", "eval of a 4 × 1024 MLP at batch 256: ≈ 12 launches of ≈ 5 µs "
          "kernels per batch vs ≈ 12 ops of 4–8 µs; one .item() per batch")
def eval_item_small(seed: int) -> ctl.Timeline:
    """An evaluation loop under ``torch.no_grad()``: ``model.eval()``, per
    batch the forward, ``(logits.argmax(1) == y).sum().item()`` added to a
    running count, ``rec.step()`` per batch. The model: 4 Linear layers
    1024 wide (+ a 10-way head), batch 256: a matmul is 2·256·1024² =
    0.54 GFLOP ≈ 8 µs, a ReLU 2 µs: ≈ 50 µs of GPU work per batch,
    against ≈ 13 ops of host (5 matmuls at 6 µs, 4 ReLUs, argmax, eq, sum
    at 4 µs, the read at 8 µs, and their Python): ≥ 80 µs. The read finds
    ≤ 1 kernel queued and waits ≈ 10 µs; the GPU then waits for the next
    batch's launches, one after another: launch-bound, not sync-bound."""
    torch.manual_seed(0)
    model = mlp(1024, 4, d_in=1024).to(META).eval()
    correct = 0
    with ctl.record(device=ctl.SimGPU("h100", seed=seed), steps="manual") as rec:
        with torch.no_grad():
            for x, y in meta_batches(40, 256, 1024):
                correct += (model(x).argmax(1) == y).sum().item()
                rec.step()
    return rec.timeline


def worker_steps(seed: int, *, workers: int, cost_s: float, batches: int,
                 pin: bool = False, accumulate: int = 1) -> ctl.Timeline:
    """``loader_steps`` with the batch pinned (``pin``: what the loader's
    ``pin_memory=True`` thread does on a CUDA build) before its
    ``non_blocking`` copy, and gradients accumulated over ``accumulate``
    batches per optimizer step."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gpu = ctl.SimGPU("h100", seed=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This DataLoader will create")
        loader = DataLoader(SlowBatches(batches, 2048, 1024, cost_s), batch_size=None,
                            num_workers=workers, shuffle=False)
        with ctl.record(device=gpu) as rec:
            for i, (x, y) in enumerate(loader):
                if pin:
                    x, y = gpu.pin_memory(x), gpu.pin_memory(y)
                x, y = x.to(META, non_blocking=True), y.to(META, non_blocking=True)
                (F.cross_entropy(model(x), y) / accumulate).backward()
                if i % accumulate == accumulate - 1:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
    return rec.timeline


@scenario("input-bound", "2 workers, 80 ms of CPU a batch: 2 batches per 80 ms against "
          "2 × 7 ms of GPU work per step")
def loader_workers2_slow(seed: int) -> ctl.Timeline:
    """``DataLoader(num_workers=2)`` over batches costing 80 ms of CPU
    each, far more than twice the ≈ 7 ms of GPU work a batch needs
    (``medium_mlp``), with gradients accumulated over 2 batches per
    optimizer step. The workers make batches side by side, 2 per 80 ms
    at best (on 2 cores, less): a step's 2 batches need ≈ 14 ms of GPU
    work and arrive ≥ 80 ms after the last step's, so the GPU is idle
    most of each step, the host waiting in the fetch. (Why 80 ms and not
    just over 14: the workers run in real time, but SimGPU's virtual host
    clock charges the training thread a CUDA op's dispatch cost instead
    of the ≈ 0.1–1 ms its meta op takes here, so between two fetches the
    workers get that real time for free; at 30 ms a batch they kept up
    with some steps.) (With a step per batch the verdict would alternate: the two
    workers hand over a pair of batches at once, the first waited for,
    the second ready and queued behind it.) Step 0 holds the workers'
    start and is not checked."""
    return worker_steps(seed, workers=2, cost_s=80e-3, batches=10, accumulate=2)


@scenario("GPU-bound", "2 workers make a 2 ms batch; pinned non_blocking copies cost the "
          "host ≈ 8 µs; ≈ 7 ms of GPU work per step")
def loader_pinned(seed: int) -> ctl.Timeline:
    """``DataLoader(num_workers=2, pin_memory=True)`` over batches costing
    2 ms each, copied with ``non_blocking=True``: the workers need 2 ms
    of CPU per ≈ 7 ms step (``medium_mlp``) and keep ahead; the 8 MB
    pinned copy costs the host only its launch (no staging) and the GPU
    ≈ 0.3 ms over PCIe, so the GPU's work is the step."""
    return worker_steps(seed, workers=2, cost_s=2e-3, batches=10, pin=True)


@scenario("GPU-bound", "a synchronize per ≈ 7 ms step costs ≈ 20–40 µs of refill",
          fast=True)
def sync_for_timing(seed: int) -> ctl.Timeline:
    """``medium_mlp`` timed per step the usual way: ``torch.cuda.synchronize()``
    (here ``SimGPU.synchronize``) then ``time.perf_counter()`` after each
    step. The sync drains the ≈ 7 ms step; the GPU then waits only for the
    next step's first launch (≈ 10–30 µs of Python and dispatch): busy
    ≈ 99.5 %. Syncing to time a GPU-bound loop costs it nothing to speak of."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gpu = ctl.SimGPU("h100", seed=seed)
    times: list[float] = []

    def tick(i: int, loss: torch.Tensor) -> None:
        gpu.synchronize()
        times.append(time.perf_counter())

    with ctl.record(device=gpu) as rec:
        train_steps(model, opt, meta_batches(6, 2048, 1024), on_step=tick)
    return rec.timeline


@scenario("GPU-bound", "4 micro-batches × ≈ 3.5 ms per step vs ≈ 160 ops; a scheduler "
          "step and one loss read per optimizer step")
def accum_scheduler(seed: int) -> ctl.Timeline:
    """``medium_mlp`` at micro-batch 1024 (2·1024·(1024·4096 + 2·4096²)·3
    = 0.23 TFLOP ≈ 3.5 ms each), AdamW, gradients accumulated over 4
    micro-batches, ``clip_grad_norm_`` (no read), the optimizer stepped
    every 4th, then a OneCycleLR ``scheduler.step()`` (pure Python) and
    the mean loss read once (``.item()``). ≈ 40 ops per micro-batch, ≈ 160
    per ≈ 14 ms step: ≈ 6 ms of host all told (dispatch and the Python
    above it, ≈ 35 µs an op on the 2-core VM), so the queue grows; the
    read drains it once a step and the refill costs ≈ 50 µs. (At
    micro-batch 512, ≈ 7 ms of GPU work per ≈ 6 ms of host, steps turn
    launch-bound as the queue runs dry.)"""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=100)
    logged: list[float] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        total = None
        for i, (x, y) in enumerate(meta_batches(4 * 5, 1024, 1024)):
            loss = F.cross_entropy(model(x), y) / 4
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
            if i % 4 == 3:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                logged.append(total.item())
                total = None
    return rec.timeline


@scenario("host-bound", "per env step ≈ 1 ms of Python env vs ≈ 8 ops of forward and "
          "its action read")
def rl_env_loop(seed: int) -> ctl.Timeline:
    """A small policy-gradient loop: a 2-layer 128-wide policy MLP picks
    an action for one observation (forward, softmax, ``multinomial``,
    ``.item()``), then the environment steps in pure Python (≈ 1 ms: a
    Python physics simulator and its reward); every 32 env steps the
    policy is updated (one batched forward over the episode, REINFORCE
    loss, backward, Adam step; ``rec.step()`` marks each update). Per env
    step the GPU has ≈ 8 kernels at the 2 µs floor and the host ≈ 8 ops
    (≈ 0.1–0.3 ms all told) and the env's 1 ms: the GPU idles ≥ 75 % of
    the time while the host runs Python that dispatches nothing. The
    action read waits only for the ≈ 10 µs forward, so it delays the host
    by ≈ 20 µs an env step: it is not what keeps the GPU waiting."""
    torch.manual_seed(0)
    policy = mlp(128, 2, d_in=16, classes=4).to(META)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed), steps="manual") as rec:
        for episode in range(5):
            obs, actions, rewards = [], [], []
            for t in range(32):
                o = torch.randn(1, 16, device=META)
                with torch.no_grad():
                    a = torch.multinomial(F.softmax(policy(o), -1), 1).item()
                busy(1e-3)  # env.step(a): a Python physics simulator
                obs.append(o)
                actions.append(a)
                rewards.append(1.0 if a == t % 4 else 0.0)
            logp = F.log_softmax(policy(torch.cat(obs)), -1)
            act = torch.tensor(actions).to(META)
            ret = torch.tensor(rewards).to(META)
            loss = -(logp.gather(1, act[:, None]).squeeze(1) * ret).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            rec.step()
    return rec.timeline
