"""Verdict scenarios of loops of kinds the others do not cover.

Progress bars, checkpoints, per-sample loops, LSTM cells, multi-task reads,
activation checkpointing, a ViT, a GAN, sleeps, greedy decoding and a NaN
guard (the third set of ``sets.py``). The arithmetic uses the
H100 figures of ``scenarios.py``' module doc and the host cost seen
there: ≈ 4–8 µs of modelled dispatch an op plus the Python and autograd
above it, measured for real (≈ 35 µs an op on the 2-core VM of RESULTS.md).
"""

from __future__ import annotations

import io
import time

import torch
import torch.nn.functional as F
from torch import nn
from models import GPT, mlp
from models_checkpointed_vit import CkptMLP, ViT
from scenarios import META, busy, medium_mlp, meta_batches, scenario, train_steps

import cutimeline as ctl


def show_loss(bar: list[str], loss: float) -> None:
    """What a tqdm bar's ``set_postfix(loss=...)`` costs a step: format the
    value and redraw (≈ 50 µs of Python; ``mininterval`` throttles the
    redraw, not the ``.item()`` feeding it)."""
    bar.append(f"loss={loss:.4g}")
    busy(50e-6)


def lm_steps(seed: int, *, layers: int, d: int, heads: int, batch: int, seq: int,
             vocab: int, steps: int) -> ctl.Timeline:
    """A GPT of ``layers`` blocks ``d`` wide, AdamW, ``loss.item()`` shown
    on a progress bar every step."""
    torch.manual_seed(0)
    with META:
        model = GPT(vocab=vocab, ctx=seq, d=d, layers=layers, heads=heads)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = [(torch.randint(0, vocab, (batch, seq), device=META),
             torch.randint(0, vocab, (batch, seq), device=META)) for _ in range(steps)]
    bar: list[str] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for idx, tgt in data:
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, vocab), tgt.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            show_loss(bar, loss.item())
    return rec.timeline


@scenario("GPU-bound", "6 × 768 GPT, 8 × 512 tokens: ≈ 2.1 TFLOP ≈ 35 ms vs ≈ 800 ops; "
          "one loss read per step for the bar")
def progress_bar_gpt(seed: int) -> ctl.Timeline:
    """A 6-layer GPT-2 (768 wide, 12 heads, 50,257 words: 38.6 M embedding
    + 6 · 7.1 M block parameters = 81 M), batch 8 × 512 tokens, AdamW, a
    progress bar showing ``loss.item()`` every step. 6 · 81 M · 4,096 =
    2.0 TFLOP plus attention 6 · 3 · 4·8·512²·768 = 0.12 T: ≈ 32 ms at
    67 TFLOP/s, ≈ 35 ms with the logits' softmax and LayerNorms, against
    ≈ 800 ops of host (≤ 28 ms at 35 µs each). The read drains the queue
    once a step; the GPU then waits for the bar's ≈ 50 µs and the next
    step's first launches, ≈ 0.1–0.5 ms of a 35 ms step: GPU-bound."""
    return lm_steps(seed, layers=6, d=768, heads=12, batch=8, seq=512, vocab=50257,
                    steps=4)


@scenario("launch-bound", "2 × 128 GPT, 8 × 64 tokens: ≈ 130 kernels at the 2 µs floor "
          "vs ≈ 200 ops of host; one loss read per step for the bar", fast=True)
def progress_bar_small(seed: int) -> ctl.Timeline:
    """The same loop on 2 blocks 128 wide, 4 heads, 1,000 words, batch
    8 × 64 tokens. The largest matmul, 2·512·128·512 = 67 MFLOP, is 1 µs
    at 67 TFLOP/s: ≈ 130 kernels at the 2 µs floor (≈ 0.3 ms) against
    ≈ 200 ops of host (forward ≈ 50, backward ≈ 100, AdamW ≈ 15) at ≥ 5 µs
    plus Python, ≥ 2 ms. The read finds a few kernels queued; it and the
    bar cost the GPU ≈ 0.1 ms of a ≥ 2 ms step, the launches the rest."""
    return lm_steps(seed, layers=2, d=128, heads=4, batch=8, seq=64, vocab=1000,
                    steps=6)


@scenario((None, "GPU-bound", "GPU-bound", "host-bound", "GPU-bound", "GPU-bound",
           "GPU-bound", "host-bound"),
          "torch.save of 151 MB of weights into a BytesIO after iterations 2 and 6: "
          "≈ 5 ms of D2H copies, then ≥ 50 ms of host writing, vs ≈ 7 ms steps")
def checkpoint_every_4(seed: int) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work a step, ≈ 45 ops of host) saved
    with ``torch.save`` into an ``io.BytesIO`` after iterations 2 and 6.
    torch.save copies each CUDA storage to the host (a blocking D2H copy)
    and writes it; meta storages cannot be copied, so the loop makes those
    copies itself (``.cpu()`` per tensor). The first drains the queue (the
    host is steps ahead), then 151 MB (37.7 M floats) cross PCIe at
    ≈ 55 GB/s (≈ 3 ms, the GPU busy copying), and the host serialises
    151 MB (a memcpy and a CRC-32 a record: ≥ 50 ms here) with nothing
    queued. The block after iteration k is step k + 1's (as in
    ``metrics_every_4``): steps 3 and 7 are ≤ 7 / 60 busy, their idle time
    the host's writing (the reads' ≈ 7–14 ms wait is less)."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    saved: list[int] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for i, (x, y) in enumerate(meta_batches(8, 2048, 1024)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i % 4 == 2:
                buf = io.BytesIO()
                torch.save({k: v.cpu() for k, v in model.state_dict().items()}, buf)
                saved.append(buf.tell())
    return rec.timeline


@scenario("launch-bound", "32 samples one at a time: ≈ 700 kernels at the 2 µs floor vs "
          "≈ 1,000 ops of host per step")
def per_sample_loop(seed: int) -> ctl.Timeline:
    """A batch of 32 processed one sample at a time (a per-example loss as
    a Python loop): per sample the forward of a 3-layer MLP 1024 wide on
    ``x[i:i+1]`` and its cross-entropy; the 32 losses averaged, one
    backward, Adam. A sample's matmul is 2·1·1024² = 2 MFLOP, under the
    2 µs floor: ≈ 32 · (8 forward + 14 backward) ≈ 700 kernels ≈ 1.4 ms of
    GPU work against ≈ 1,000 ops of host (slices and views included) at
    ≥ 5 µs each plus their Python, ≥ 10 ms: the GPU waits for dispatch."""
    torch.manual_seed(0)
    model = mlp(1024, 2, d_in=1024).to(META)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in meta_batches(4, 32, 1024):
            losses = [F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]) for i in range(32)]
            loss = torch.stack(losses).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


def lstm_steps(seed: int, *, hidden: int, batch: int, seq: int, steps: int) -> ctl.Timeline:
    """``nn.LSTMCell`` unrolled over ``seq`` steps in Python, a head, Adam."""
    torch.manual_seed(0)
    cell = nn.LSTMCell(hidden, hidden).to(META)
    head = nn.Linear(hidden, 10).to(META)
    opt = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=1e-3)
    data = [(torch.randn(seq, batch, hidden, device=META),
             torch.randint(0, 10, (batch,), device=META)) for _ in range(steps)]
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for xs, y in data:
            h = c = torch.zeros(batch, hidden, device=META)
            for t in range(seq):
                h, c = cell(xs[t], (h, c))
            loss = F.cross_entropy(head(h), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@scenario("launch-bound", "LSTMCell 128 wide, batch 32, 64 time steps: ≈ 1,500 kernels "
          "at the 2 µs floor vs ≈ 2,000 ops of host per step")
def lstm_small(seed: int) -> ctl.Timeline:
    """Hidden 128, batch 32, 64 time steps. A time step's gate matmuls are
    2 · 2·32·128·512 = 8 MFLOP, under the 2 µs floor; the cell is ≈ 10
    ops in the op stream SimGPU sees (two matmuls, adds, chunk, sigmoids,
    tanhs, products), ≈ 20 in backward: ≈ 2,000 ops of host a step at
    ≥ 5 µs plus Python (≥ 10 ms) for ≈ 1,500 kernels at 2 µs (≈ 3 ms)."""
    return lstm_steps(seed, hidden=128, batch=32, seq=64, steps=3)


@scenario("GPU-bound", "LSTMCell 4096 wide, batch 512, 16 time steps: ≈ 6.6 TFLOP "
          "≈ 100 ms vs ≈ 500 ops of host per step")
def lstm_large(seed: int) -> ctl.Timeline:
    """Hidden 4096, batch 512, 16 time steps. A time step's gate matmuls
    are 2 · 2·512·4096·16,384 = 137 GFLOP ≈ 2 ms at 67 TFLOP/s, three
    times that with backward: 16 · 6 ≈ 100 ms of GPU work a step against
    ≈ 16 · 30 ≈ 500 ops of host (≤ 18 ms at 35 µs each)."""
    return lstm_steps(seed, hidden=4096, batch=512, seq=16, steps=3)


@scenario("GPU-bound", "6 heads on a 5 × 4096 trunk, batch 2048: ≈ 1.1 TFLOP ≈ 17 ms vs "
          "≈ 110 ops; six loss reads in a row per step")
def multitask_item_heads(seed: int) -> ctl.Timeline:
    """A shared trunk (``mlp``: Linear 1024→4096, 4096→4096 × 3 with
    ReLUs, a last 4096→4096 projection) and 6 task heads (4096→10 each), batch 2048, SGD; the loss is the sum
    of the 6 heads' cross-entropies, and after the optimizer step each
    head's loss is read for logging, ``.item()`` six times in a row. The
    trunk is 2·2048·(1024·4096 + 4·4096²)·3 = 1.1 TFLOP ≈ 17 ms a step;
    the host dispatches ≈ 110 ops (≤ 4 ms). The first read drains the
    queue; the next five find it empty and each costs its 4-byte copy and
    round trip (≈ 15 µs); then the host refills the queue: ≈ 0.2 ms of
    idle per 17 ms step, GPU-bound."""
    torch.manual_seed(0)
    trunk = mlp(4096, 4, d_in=1024, classes=4096).to(META)
    heads = nn.ModuleList(nn.Linear(4096, 10) for _ in range(6)).to(META)
    opt = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.01, momentum=0.9)
    logged: list[list[float]] = []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in meta_batches(5, 2048, 1024):
            feats = trunk(x)
            losses = [F.cross_entropy(h(feats), y) for h in heads]
            opt.zero_grad(set_to_none=True)
            sum(losses).backward()
            opt.step()
            logged.append([loss.item() for loss in losses])
    return rec.timeline


@scenario("GPU-bound", "4 checkpointed 4096² blocks, batch 4096: 4 matmul passes a "
          "layer ≈ 2.2 TFLOP ≈ 33 ms vs ≈ 80 ops")
def grad_checkpoint_mlp(seed: int) -> ctl.Timeline:
    """``CkptMLP``: 4 blocks 4096 wide, batch 4096, activation
    checkpointing, AdamW. A block's matmul is 2·4096³ = 137 GFLOP; with
    checkpointing each runs forward, again in backward (recompute), and
    its two backward matmuls: 4 · 137 = 550 GFLOP a block, 2.2 TFLOP ≈
    33 ms a step at 67 TFLOP/s, against ≈ 80 ops of host (the recompute's
    included; ≤ 3 ms). The recompute adds GPU work, not waiting."""
    torch.manual_seed(0)
    with META:
        model = CkptMLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(4, 4096, 4096))
    return rec.timeline


@scenario("GPU-bound", "ViT-S/16 (6 blocks), batch 256 of 224²: ≈ 3.4 TFLOP ≈ 55 ms vs "
          "≈ 400 ops")
def vit_sdpa(seed: int) -> ctl.Timeline:
    """A ViT-S/16 cut to 6 blocks (384 wide, 6 heads, 197 tokens), batch
    256 of 224² images, AdamW. Parameters: 6 · 12 · 384² = 10.6 M in the
    blocks, 0.3 M in the patch embedding, 0.4 M in the head; 256 · 197 =
    50 k tokens: 6 · 11.3 M · 50 k = 3.4 TFLOP plus attention 6 · 3 ·
    4·256·197²·384 = 0.27 TFLOP: ≈ 55 ms at 67 TFLOP/s (the patch
    embedding's convolution is TF32 and small), LayerNorm, GELU and the
    softmax-free fused attention adding a little. The host dispatches
    ≈ 400 ops a step (≤ 14 ms at 35 µs each): the queue only grows."""
    torch.manual_seed(0)
    with META:
        model = ViT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    data = [(torch.randn(256, 3, 224, 224, device=META),
             torch.randint(0, 1000, (256,), device=META)) for _ in range(4)]
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, data)
    return rec.timeline


@scenario("launch-bound", "MLP GAN, batch 64: ≈ 120 kernels at the 2 µs floor vs ≈ 250 "
          "ops of host per step; two optimizers")
def gan_two_optimizers(seed: int) -> ctl.Timeline:
    """A GAN of MLPs (generator 100→1024→1024→784, discriminator
    784→1024→1024→1), batch 64, two Adams. A step: the discriminator on
    real and on ``fake.detach()`` (BCE-with-logits each), its backward and
    step, then the generator through the discriminator, its backward and
    step. The largest matmul is 2·64·1024² = 134 MFLOP, 2 µs at 67
    TFLOP/s: ≈ 120 kernels at the floor (≈ 0.3 ms) against ≈ 250 ops of
    host (≥ 2.5 ms with their Python). The GPU waits for dispatch."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(100, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 784), nn.Tanh()).to(META)
    disc = nn.Sequential(nn.Linear(784, 1024), nn.LeakyReLU(0.2), nn.Linear(1024, 1024),
                         nn.LeakyReLU(0.2), nn.Linear(1024, 1)).to(META)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    reals = [torch.randn(64, 784, device=META) for _ in range(6)]
    ones, zeros = torch.ones(64, 1, device=META), torch.zeros(64, 1, device=META)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for real in reals:
            fake = gen(torch.randn(64, 100, device=META))
            loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            loss_g = bce(disc(fake), ones)
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
    return rec.timeline


@scenario("host-bound", "time.sleep(10 ms) per step vs ≈ 0.1 ms of GPU work and ≈ 2 ms "
          "of dispatch", fast=True)
def sleep_rate_limit_small(seed: int) -> ctl.Timeline:
    """``tiny_mlp``'s loop (≈ 0.1 ms of GPU work a step) rate-limited to
    100 steps/s with ``time.sleep(0.01)`` after each step. The ≈ 75 ops
    a step cost ≈ 1–2 ms with their Python (≈ 25 µs an op on the 2-core
    VM), the sleep 10 ms outside any op with nothing queued: ≈ 10 / 11.5
    ≈ 85 % of the idle time is the host's. (At 5 ms the split is ≈ 73/27,
    nearer the launches as this host's Python slows under load.)"""
    torch.manual_seed(0)
    model = mlp(64, 2, d_in=64).to(META)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(6, 32, 64),
                    on_step=lambda i, loss: time.sleep(10e-3))
    return rec.timeline


@scenario("GPU-bound", "time.sleep(3 ms) per step hidden behind ≈ 7 ms of queued GPU work")
def sleep_behind_queue(seed: int) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work, ≈ 45 ops ≈ 1.5 ms of host a
    step) with ``time.sleep(0.003)`` after each step: ≈ 4.5 ms of host per
    7 ms of GPU work, so the queue still grows and the sleep overlaps
    queued work: a sleep is idle time only when nothing is queued."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        train_steps(model, opt, meta_batches(6, 2048, 1024),
                    on_step=lambda i, loss: time.sleep(3e-3))
    return rec.timeline


@scenario("launch-bound", "greedy decoding, 2 × 256 GPT, batch 1: ≈ 60 kernels at the "
          "2 µs floor vs ≈ 70 ops of host per token; one token read per token")
def greedy_decode_small(seed: int) -> ctl.Timeline:
    """Greedy generation with a small GPT (2 blocks 256 wide, 4 heads,
    1,000 words), batch 1, no KV cache: per token the forward over the
    context (16 to 40 tokens), the last position's argmax, ``.item()`` to
    test for the end token, ``torch.cat`` to append it; ``rec.step()`` a
    token, 3 prompts × 24 tokens. The largest matmul is 2·40·256·1,024 =
    21 MFLOP: ≈ 60 kernels at the 2 µs floor (≈ 0.15 ms) against ≈ 70 ops
    of host (≥ 1 ms with their Python). The read finds ≤ 2 kernels queued
    and waits ≈ 10 µs; the GPU waits for the next token's launches."""
    torch.manual_seed(0)
    with META:
        model = GPT(vocab=1000, ctx=64, d=256, layers=2, heads=4).eval()
    eos, out = 999, []
    with ctl.record(device=ctl.SimGPU("h100", seed=seed), steps="manual") as rec:
        with torch.no_grad():
            for _ in range(3):
                idx = torch.randint(0, 1000, (1, 16), device=META)
                for _ in range(24):
                    tok = model(idx)[:, -1].argmax(-1)
                    if tok.item() == eos:  # meta reads 0: never the end token
                        break
                    idx = torch.cat([idx, tok[:, None]], 1)
                    rec.step()
                out.append(idx.shape[1])
    return rec.timeline


@scenario("GPU-bound", "a NaN guard reads the loss between forward and backward; ≈ 14 ms "
          "of GPU work per step, ≈ 0.5–1 ms of idle waiting for the backward's start")
def nan_guard_medium(seed: int) -> ctl.Timeline:
    """``medium_mlp`` at batch 4096 (≈ 14 ms of GPU work a step: ≈ 4.6 ms
    forward, ≈ 9.2 ms backward) with the common guard ``if
    torch.isnan(loss).item(): continue`` between the forward and the
    backward. The read drains the queue mid-step (the host is ≈ 1 step
    ahead there); then autograd starts and the backward's first kernels
    (the loss's, the 10-wide head's matmuls, the ReLU mask: 2–20 µs each)
    run at the host's pace, ≈ 35 µs an op on the 2-core VM, until the
    first 4096² matmul (1 ms) lets the queue grow: ≈ 0.5–1 ms of idle per
    14 ms step, ≈ 93–95 % busy. (At batch 2048 the same loop read 89–94 %
    busy, near the 85 % line on this host.)"""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for x, y in meta_batches(5, 4096, 1024):
            loss = F.cross_entropy(model(x), y)
            if torch.isnan(loss).item():  # meta reads 0: never NaN
                continue
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@scenario("host-bound", "the batch normalised, flipped and noised with torch ops on CPU "
          "tensors in the loop: ≥ 20 ms of host compute vs ≈ 7 ms of GPU work")
def cpu_augment_in_loop(seed: int) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work a step) fed a CPU batch the loop
    augments with torch ops before the copy, no DataLoader: 3 rounds of
    normalise, random flip (``torch.where`` over a per-sample coin) and
    Gaussian noise over 2048 × 1024 floats (8 MB), ≈ 15 CPU ops of 1–5 ms
    each, ≥ 20 ms of host compute in ops that launch nothing. The GPU
    idles ≥ 13 ms a step while the host computes: host-bound (workers, or
    the GPU, should do it), not launch-bound (CUDA graphs would not help)."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    raw, labels = torch.randn(2048, 1024, generator=g), torch.randint(0, 10, (2048,))
    mean, std = raw.mean(0), raw.std(0)
    with ctl.record(device=ctl.SimGPU("h100", seed=seed)) as rec:
        for _ in range(5):
            x = raw
            for _ in range(3):
                x = (x - mean) / std
                x = torch.where(torch.rand(2048, 1, generator=g) < 0.5, x.flip(1), x)
                x = x + 0.01 * torch.randn(x.shape, generator=g)
            x, y = x.to(META, non_blocking=True), labels.to(META, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline
