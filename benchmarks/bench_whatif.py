"""What-if predictions against the truth: record "before", predict "after", record "after".

    python benchmarks/bench_whatif.py [--fast] [--only NAME[,NAME]] [--seed 0]

Each pair is two training loops recorded on a simulated H100
(``ctl.SimGPU("h100")``) over ``meta`` tensors that differ by exactly one
fix. ``ctl.analyze(before).what_if()`` predicts the step time under the
edit that models the fix; the table sets it beside the step time of the
recorded "after" loop (both the median over steady-state steps: all but
the first). Error = predicted ÷ recorded − 1. Both recordings carry the
recorder's own cost, so the prediction keeps it too (the ``recorder`` edit
is the one that removes it). A halved launch cost is recorded with
``SimGPU(host_cost=...)``: 30 µs per op before, 15 µs after (a dispatch
cost that dominates the real Python between ops, whose own jitter on a
shared machine would otherwise swamp a halved 4 µs launch).
Goal: median |error| ≤ 5 %, worst ≤ 15 %; exit status 1 when missed.
``--fast`` is the subset the test suite runs.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verdicts import (SlowBatches, busy, medium_mlp, meta_batches, mlp,  # noqa: E402
                            train_steps)

import cutimeline as ctl  # noqa: E402
from cutimeline.analysis.whatif import steady  # noqa: E402

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

def _loader(after: bool, seed: int, cost_s: float, steps: int = 7) -> ctl.Timeline:
    """``medium_mlp`` (≈ 7 ms of GPU work per step) fed by a DataLoader of
    CPU batches costing ``cost_s`` of busy host time each."""
    torch.manual_seed(0)
    model = medium_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This DataLoader will create")
        loader = DataLoader(SlowBatches(steps, 2048, 1024, cost_s), batch_size=None,
                            num_workers=4 if after else 0, shuffle=False)
        with ctl.record(device=sim(seed)) as rec:
            for x, y in loader:
                x, y = x.to(META, non_blocking=True), y.to(META, non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    return rec.timeline


@pair("data", "DataLoader num_workers=0 → 4, 20 ms batches", fast=True)
def loader_20ms(after: bool, seed: int) -> ctl.Timeline:
    return _loader(after, seed, 20e-3)


@pair("data", "DataLoader num_workers=0 → 4, 4 ms batches (GPU-bound after)")
def loader_4ms(after: bool, seed: int) -> ctl.Timeline:
    return _loader(after, seed, 4e-3)


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


# -- running ------------------------------------------------------------------

def steady_median(tl_or_rep) -> float:
    rep = tl_or_rep if isinstance(tl_or_rep, ctl.Report) else ctl.analyze(tl_or_rep)
    d = rep.steps["duration_ns"]
    return float(np.median(d[1:] if len(d) >= 3 else d))


def run_pair(p: Pair, seed: int) -> dict:
    t0 = time.perf_counter()
    rep = ctl.analyze(p.record(False, seed))
    pred = next((q for q in rep.what_if() if q.edit.name == p.edit), None)
    after = steady_median(p.record(True, seed))
    # the median of the predicted steps, as of the recorded ones
    pred_ns = float(np.median(steady(pred.steps)["predicted_ns"])) if pred else float("nan")
    out = {"name": p.name, "edit": p.edit, "fix": p.fix,
           "before_ns": steady_median(rep), "after_ns": after,
           "verdict": rep.ranges()[-1]["verdict"], "s": time.perf_counter() - t0}
    out["predicted_ns"] = pred_ns
    out["error"] = out["predicted_ns"] / after - 1
    return out


def table(rows: list[dict]) -> str:
    lines = ["| pair | edit | before | predicted | recorded after | error |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} ({r['fix']}) | {r['edit']} | {r['before_ns'] / 1e6:.2f} ms "
                     f"| {r['predicted_ns'] / 1e6:.2f} ms | {r['after_ns'] / 1e6:.2f} ms "
                     f"| {r['error']:+.1%} |")
    errs = [abs(r["error"]) for r in rows]
    lines.append(f"\nmedian |error| {statistics.median(errs):.1%}, worst {max(errs):.1%} "
                 f"(goal ≤ 5 %, ≤ 15 %) over {len(rows)} pairs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="the subset the tests run")
    ap.add_argument("--only", help="comma-separated pair names")
    ap.add_argument("--seed", type=int, default=0)
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
        rows.append(run_pair(PAIRS[n], a.seed))
        r = rows[-1]
        print(f"{n}: predicted {r['predicted_ns'] / 1e6:.2f} ms, recorded "
              f"{r['after_ns'] / 1e6:.2f} ms ({r['error']:+.1%}) in {r['s']:.1f} s",
              file=sys.stderr)
    print(table(rows))
    errs = [abs(r["error"]) for r in rows]
    return 0 if statistics.median(errs) <= 0.05 and max(errs) <= 0.15 else 1


if __name__ == "__main__":
    sys.exit(main())
