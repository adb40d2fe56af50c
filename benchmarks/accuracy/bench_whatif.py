"""What-if predictions against the truth: record "before", predict "after", record "after".

    python benchmarks/accuracy/bench_whatif.py [--fast] [--only NAME[,NAME]] [--seed 0] [--repeats 3]

Each pair is two training loops recorded on a simulated H100
(``ctl.SimGPU("h100")``) over ``meta`` tensors that differ by exactly one
fix. ``ctl.analyze(before).what_if()`` predicts the step time under the
edit that models the fix; the table sets it beside the step time of the
recorded "after" loop (both the median over steady-state steps: all but
the first), each the median over ``--repeats`` rounds (seeds ``seed``,
``seed + 1``, …). Error = predicted ÷ recorded − 1; the last column is
the prediction with an unbounded launch queue, as the replay made it
before it modelled CUDA's 1,024 pending launches. A prediction is of the
program without the recorder (every fix is weighed on it,
``analysis/replay/predictions.py``), so both recordings are measured the
same way: each step without the recorder's own cost (the step table's
``predicted_ns``). A halved launch cost is recorded with
``SimGPU(host_cost=...)``: 30 µs per op before, 15 µs after (a dispatch
cost that dominates the real Python between ops, whose own jitter on a
shared machine would otherwise swamp a halved 4 µs launch).
The GPU-side pairs (``tf32``, ``bf16``, ``fused_optimizer``) train one
GPU-bound model written for CUDA under ``SimGPU.as_cuda()``, the fix off
and on: the prediction scales the recorded kernels by the roofline's
ratio (``analysis/replay/gpuside.py``), the "after" run executes the
fixed program (TF32 matmuls, autocast's casts and bf16 kernels, the fused
optimizer kernel). There is no ``compile`` pair: a compiled program does
not run on SimGPU.
Goal: median |error| ≤ 5 %, worst ≤ 15 %; exit status 1 when missed.
``--fast`` is the subset the test suite runs.

There is no ``recorder`` pair: SimGPU's virtual host clock does charge
the recorder's own bookkeeping (all host time outside an op's modelled
dispatch counts as it really passed, ``devices/sim/host.py``), but SimGPU only
simulates under the recorder (its dispatch mode is what drives the
device), so no run of a loop without the recorder has a simulated step
time to compare with. Overhead compensation is scored on real CPU timing,
with and without the recorder, by ``bench_compensation.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

# the verdict scenarios' program pieces (benchmarks/verdicts/)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verdicts"))
from bench_verdicts import (SlowBatches, busy, medium_mlp, meta_batches, mlp,  # noqa: E402
                            train_steps)

import cutimeline as ctl  # noqa: E402
from cutimeline.analysis.replay.predictions import steady  # noqa: E402

META = torch.device("meta")


@dataclass(frozen=True)
class Pair:
    name: str
    edit: str
    fix: str
    record: Callable[[bool, int], ctl.Timeline]  # (after?, seed) -> Timeline
    fast: bool


PAIRS: dict[str, Pair] = {}


def pair(edit: str, fix: str, *, fast: bool = False):
    def add(fn):
        PAIRS[fn.__name__] = Pair(fn.__name__, edit, fix, fn, fast)
        return fn
    return add


def sim(seed: int, **kw) -> ctl.SimGPU:
    return ctl.SimGPU("h100", seed=seed, **kw)


# -- the pairs ----------------------------------------------------------------

def _loader(seed: int, cost_s: float, workers: int, steps: int = 7,
            python_s: float = 0.0) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work per step) fed by a DataLoader with
    ``workers`` workers of CPU batches costing ``cost_s`` of busy host time
    each, and ``python_s`` of Python after each step."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This DataLoader will create")
        loader = DataLoader(SlowBatches(steps, 2048, 1024, cost_s), batch_size=None,
                            num_workers=workers, shuffle=False)
        with ctl.record(device=sim(seed)) as rec:
            for x, y in loader:
                x, y = x.to(META, non_blocking=True), y.to(META, non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if python_s:
                    busy(python_s)
    return rec.timeline


@pair("data", "DataLoader num_workers=0 → 4, 20 ms batches", fast=True)
def loader_20ms(after: bool, seed: int) -> ctl.Timeline:
    return _loader(seed, 20e-3, 4 if after else 0)


@pair("data", "DataLoader num_workers=0 → 4, 4 ms batches (GPU-bound after)")
def loader_4ms(after: bool, seed: int) -> ctl.Timeline:
    return _loader(seed, 4e-3, 4 if after else 0)


class Backbone(nn.Module):
    """``depth`` Linear 2048→2048 + GELU layers whose activation peak is
    taken each layer: read back with ``.item()`` (before) or kept on the
    GPU (after)."""

    def __init__(self, depth: int, read: bool):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(2048, 2048) for _ in range(depth))
        self.read, self.peaks = read, []

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = F.gelu(layer(h))
            peak = h.abs().amax()
            self.peaks.append(peak.item() if self.read else peak)
        return h


@pair("sync", ".item() of each layer's peak → the peak kept on the GPU", fast=True)
def item_per_layer(after: bool, seed: int) -> ctl.Timeline:
    torch.manual_seed(0)
    backbone = Backbone(24, read=not after).to(META).requires_grad_(False)
    head = nn.Linear(2048, 10).to(META)
    opt = torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=sim(seed)) as rec:
        for x, y in meta_batches(6, 1024, 2048):
            with torch.no_grad():
                feats = backbone(x)
            loss = F.cross_entropy(head(feats), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@pair("sync", "loss.item() every step of an MLP 2048 wide, batch 1024 → no read")
def loss_item_step(after: bool, seed: int) -> ctl.Timeline:
    torch.manual_seed(0)
    model = mlp(2048, 4, d_in=2048).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses: list = []
    with ctl.record(device=sim(seed)) as rec:
        train_steps(model, opt, meta_batches(8, 1024, 2048),
                    on_step=lambda i, loss: losses.append(loss if after else loss.item()))
    return rec.timeline


@pair("host", "30 ms of Python after each step → none", fast=True)
def python_30ms(after: bool, seed: int) -> ctl.Timeline:
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=sim(seed)) as rec:
        train_steps(model, opt, meta_batches(6, 2048, 1024),
                    on_step=None if after else (lambda i, loss: busy(30e-3)))
    return rec.timeline


@pair("host", "5 ms of Python per ≈ 25 ms GPU-bound step → none (hidden: no gain)")
def python_hidden(after: bool, seed: int) -> ctl.Timeline:
    torch.manual_seed(0)
    model = mlp(4096, 4).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with ctl.record(device=sim(seed)) as rec:
        train_steps(model, opt, meta_batches(6, 4096, 4096),
                    on_step=None if after else (lambda i, loss: busy(5e-3)))
    return rec.timeline


@pair("host", "6 ms of Python per step behind one DataLoader worker making a 20 ms "
      "batch → none (the worker is the bottleneck: no gain)")
def python_behind_worker(after: bool, seed: int) -> ctl.Timeline:
    return _loader(seed, 20e-3, 1, steps=8, python_s=0.0 if after else 6e-3)


def _tiny_ops(after: bool, seed: int, n: int) -> ctl.Timeline:
    """``n`` dependent element-wise ops per step on a 16-float tensor (each
    kernel at the 2 µs floor), dispatched at 30 µs each (a slow host)
    before and 15 µs after: launch-bound either way."""
    x = torch.ones(16, device=META)
    with ctl.record(device=sim(seed, host_cost=15_000 if after else 30_000),
                    steps="manual") as rec:
        for _ in range(10):
            for _ in range(n):
                x = x.mul(1.0001).add(0.0001)
            rec.step()
    return rec.timeline


@pair("launch", "dispatch cost 30 → 15 µs per op, 2×100 tiny ops per step", fast=True)
def launch_half(after: bool, seed: int) -> ctl.Timeline:
    return _tiny_ops(after, seed, 100)


@pair("launch", "dispatch cost 30 → 15 µs per op, MLP 1024 wide, batch 1024 "
      "(launch-bound → GPU-bound)")
def launch_half_mixed(after: bool, seed: int) -> ctl.Timeline:
    torch.manual_seed(0)
    model = mlp(1024, 6, d_in=1024).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    with ctl.record(device=sim(seed, host_cost=15_000 if after else 30_000)) as rec:
        train_steps(model, opt, meta_batches(10, 1024, 1024))
    return rec.timeline


def _copies(after: bool, seed: int, steps: int = 6) -> ctl.Timeline:
    """An MLP 4096→2048→2048→10 (≈ 7.6 ms of GPU work per step at batch
    8192, ≈ 0.5 ms of host) fed a 128 MB batch from host memory each step.
    Before: a blocking ``.to(device)`` of pageable memory (the host stages
    it, ≈ 13 ms, and waits for the GPU to drain). After: the batch pinned (as
    ``DataLoader(pin_memory=True)``'s thread would leave it:
    ``SimGPU.pin_memory``), copied ``non_blocking=True`` on stream 1 and
    the compute stream waiting for an event after it."""
    torch.manual_seed(0)
    model = mlp(2048, 2, d_in=4096).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gpu = sim(seed)
    xb, yb = torch.empty(8192, 4096), torch.zeros(8192, dtype=torch.long)
    if after:
        xb, yb = gpu.pin_memory(xb), gpu.pin_memory(yb)
    with ctl.record(device=gpu) as rec:
        for _ in range(steps):
            if after:
                with gpu.stream(1):
                    x, y = xb.to(META, non_blocking=True), yb.to(META, non_blocking=True)
                    ready = gpu.record_event(1)
                gpu.wait_event(ready, 0)
            else:
                x, y = xb.to(META), yb.to(META)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return rec.timeline


@pair("copies", "128 MB pageable batch, blocking .to() → pinned, non_blocking on a "
      "side stream", fast=True)
def copies_side_stream(after: bool, seed: int) -> ctl.Timeline:
    return _copies(after, seed)


@pair("launch", "host cost 300 → 150 µs per op, 2,600 × 300 µs kernels and 400 ms "
      "of Python per step (after: 1,024 launches pending)")
def launch_queue_full(after: bool, seed: int) -> ctl.Timeline:
    """Launch-bound before (≈ 306 µs of host per op, the recorder's own
    ≈ 6 µs included, against 300 µs of GPU); after, the host gains ≈ 0.5
    launch per kernel until CUDA's queue of 1,024 is full, then launches
    at the GPU's pace and leaves the GPU only those 1,024 kernels (≈ 307
    ms) to cover the 400 ms of Python: ≈ 870 ms a step where an unbounded
    queue would give ≈ 805 ms. The costs are scaled up (a host-heavy op
    stream) because a row that starts on an idle stream, as every row of
    a launch-bound recording does, counts the ≈ 6 µs between its op's
    return and its work as its own (``alignment/aligner.py``): a replay
    that queues 2,600 of them adds ≈ 16 ms a step, 2 % here."""
    x = torch.ones(16, device=META)
    cost = {"aten::mul": 300_000, "aten::add": 300_000}
    with ctl.record(device=sim(seed, host_cost=150_000 if after else 300_000, cost=cost),
                    steps="manual") as rec:
        for _ in range(5):
            for _ in range(1_300):
                x = x.mul(1.0001).add(0.0001)
            busy(400e-3)
            rec.step()
    return rec.timeline


# -- the GPU-side pairs: the same GPU-bound model, fix off and on -------------

def _block(d: int) -> nn.Module:
    """A transformer-sized MLP block: layer norm, 4× expansion, GELU."""
    return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


def _gpu_bound(seed: int, *, tf32: bool = False, bf16: bool = False, fused: bool = False,
               d: int = 2048, batch: int = 8192, steps: int = 6) -> ctl.Timeline:
    """Four ``_block``s trained with AdamW on a simulated H100, GPU-bound (≈
    120 ms of fp32 GPU work a step, ≈ 25 ms in bf16, against a few ms of
    host: the bf16 run stays GPU-bound on a slow, loaded host), written as for
    CUDA and run under ``SimGPU.as_cuda()`` so that ``torch.autocast``
    applies: fp32 matmuls on TF32 cores (``tf32``), bf16 autocast around
    forward and loss (``bf16``), ``AdamW(fused=True)`` (``fused``)."""
    torch.manual_seed(0)
    gpu = sim(seed)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        with gpu.as_cuda():
            model = nn.Sequential(*[_block(d) for _ in range(4)]).cuda()
            opt = torch.optim.AdamW(model.parameters(), fused=fused or None)
            x = torch.randn(batch, d, device="cuda")
            with ctl.record(device=gpu) as rec:
                for _ in range(steps):
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                        loss = model(x).float().square().mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
    finally:
        torch.set_float32_matmul_precision("highest")
    return rec.timeline


@pair("tf32", "fp32 matmuls → TF32 tensor cores (set_float32_matmul_precision('high'))",
      fast=True)
def tf32_mlp(after: bool, seed: int) -> ctl.Timeline:
    return _gpu_bound(seed, tf32=after)


@pair("bf16", "fp32 → torch.autocast('cuda', dtype=torch.bfloat16)")
def bf16_autocast(after: bool, seed: int) -> ctl.Timeline:
    return _gpu_bound(seed, bf16=after)


@pair("fused_optimizer", "AdamW foreach → AdamW(fused=True), on TF32")
def fused_adamw(after: bool, seed: int) -> ctl.Timeline:
    return _gpu_bound(seed, tf32=True, fused=after)


# -- running ------------------------------------------------------------------

def steady_median(tl_or_rep) -> float:
    """The median steady step without the recorder's own cost (as recorded
    where the recording did not measure it)."""
    rep = tl_or_rep if isinstance(tl_or_rep, ctl.Report) else ctl.analyze(tl_or_rep)
    d = rep.steps["predicted_ns"] if rep.compensation is not None else \
        rep.steps["duration_ns"]
    return float(np.median(d[1:] if len(d) >= 3 else d))


def predicted(rep: ctl.Report, edit: str) -> float:
    """The median of the steady predicted steps under ``edit`` (NaN: none)."""
    pred = next((q for q in rep.what_if() if q.edit.name == edit), None)
    return float(np.median(steady(pred.steps)["predicted_ns"])) if pred else float("nan")


def run_pair(p: Pair, seed: int, repeats: int = 1) -> dict:
    """``repeats`` rounds (seeds ``seed``, ``seed + 1``, …) of before,
    prediction, after; the medians over rounds. ``unbounded``: the same
    prediction with an unbounded launch queue (what the replay gave
    before it modelled CUDA's)."""
    t0 = time.perf_counter()
    got: dict[str, list[float]] = {k: [] for k in ("before_ns", "predicted_ns",
                                                   "unbounded_ns", "after_ns")}
    for r in range(repeats):
        tl = p.record(False, seed + r)
        rep = ctl.analyze(tl)
        got["before_ns"].append(steady_median(rep))
        got["predicted_ns"].append(predicted(rep, p.edit))
        free = tl.replace(meta={**tl.meta, "launch_queue": 0})
        got["unbounded_ns"].append(predicted(ctl.analyze(free), p.edit))
        got["after_ns"].append(steady_median(p.record(True, seed + r)))
    out = {"name": p.name, "edit": p.edit, "fix": p.fix, "repeats": repeats,
           "verdict": rep.ranges()[-1]["verdict"], "s": time.perf_counter() - t0}
    out.update({k: float(np.median(v)) for k, v in got.items()})
    out["error"] = out["predicted_ns"] / out["after_ns"] - 1
    out["unbounded_error"] = out["unbounded_ns"] / out["after_ns"] - 1
    return out


def table(rows: list[dict]) -> str:
    lines = ["| pair | edit | before | predicted | recorded after | error | "
             "predicted, queue unbounded (error) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} ({r['fix']}) | {r['edit']} | {r['before_ns'] / 1e6:.2f} ms "
                     f"| {r['predicted_ns'] / 1e6:.2f} ms | {r['after_ns'] / 1e6:.2f} ms "
                     f"| {r['error']:+.1%} | {r['unbounded_ns'] / 1e6:.2f} ms "
                     f"({r['unbounded_error']:+.1%}) |")
    errs = [abs(r["error"]) for r in rows]
    lines.append(f"\nmedian |error| {statistics.median(errs):.1%}, worst {max(errs):.1%} "
                 f"(goal ≤ 5 %, ≤ 15 %) over {len(rows)} pairs, medians of "
                 f"{rows[0]['repeats']} rounds")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="the subset the tests run")
    ap.add_argument("--only", help="comma-separated pair names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="rounds per pair (medians)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    names = [n for n, p in PAIRS.items() if p.fast or not a.fast]
    if a.only:
        names = [n for n in a.only.split(",") if n in PAIRS]
    if a.list:
        for n in names:
            print(f"{n} {PAIRS[n].edit} {PAIRS[n].fix}")
        return 0
    rows = []
    for n in names:
        rows.append(run_pair(PAIRS[n], a.seed, a.repeats))
        r = rows[-1]
        print(f"{n}: predicted {r['predicted_ns'] / 1e6:.2f} ms, recorded "
              f"{r['after_ns'] / 1e6:.2f} ms ({r['error']:+.1%}) in {r['s']:.1f} s",
              file=sys.stderr)
    print(table(rows))
    errs = [abs(r["error"]) for r in rows]
    return 0 if statistics.median(errs) <= 0.05 and max(errs) <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
