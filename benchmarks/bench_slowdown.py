"""Whole-step slowdown under the recorder: a transformer training step, and
tiny ops under a SimGPU that owns CPU tensors (issue 25's last two rows).

    python benchmarks/bench_slowdown.py [--steps 10] [--rounds 7] [--ops 2000]

*Transformer*: a 2-layer ``nn.TransformerEncoder`` (d_model 128, 4 heads,
batch 8 × 32 tokens) trained with AdamW, one thread; per round each
variant runs ``--steps`` steps after one warm-up step, taking turns:
nothing, a bare pass-through ``TorchDispatchMode`` (the floor of any
dispatch-mode recorder), ``ctl.record(device="cpu")`` and
``torch.profiler.profile(record_shapes=True)`` (CPU activity). The figure
is each variant's median step ÷ the unrecorded median step, medians over
rounds.

*SimGPU tiny ops*: ``--ops`` adds of 16-element CPU tensors per round,
nothing / bare mode / ``ctl.record(device=ctl.SimGPU(owns=("cpu",)))``
(the simulator runs the CPU tensors as its device's), µs per op and the
ratio to the bare mode.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl


class Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def transformer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, batch_first=True,
                                       dropout=0.0)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                          nn.Linear(128, 128))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(8, 32, 128), torch.randn(8, 32, 128)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def _contexts(kind: str):
    if kind == "nothing":
        return _Null()
    if kind == "bare mode":
        return Bare()
    if kind == "cutimeline":
        return ctl.record(device="cpu")
    if kind == "torch.profiler":
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      record_shapes=True)
    if kind == "cutimeline, SimGPU owning cpu":
        return ctl.record(device=ctl.SimGPU("h100", owns=("cpu",)))
    raise ValueError(kind)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def step_times(kind: str, step, steps: int) -> float:
    """Median wall time of ``steps`` steps under ``kind`` (after one warm-up)."""
    gc.collect()
    times = []
    with _contexts(kind):
        step()
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def tiny_ops(kind: str, n: int) -> float:
    """µs per op of ``n`` tiny CPU adds under ``kind``."""
    a, b = torch.ones(16), torch.ones(16)
    gc.collect()
    with _contexts(kind):
        for _ in range(50):
            a.add(b)
        t = time.perf_counter()
        for _ in range(n):
            a.add(b)
        return (time.perf_counter() - t) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--ops", type=int, default=2000)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    step = transformer()
    kinds = ["nothing", "bare mode", "cutimeline", "torch.profiler"]
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for k in kinds:
            got[k].append(step_times(k, step, a.steps))
    base = statistics.median(got["nothing"])
    print(f"transformer step (2 layers, d 128, batch 8×32, AdamW), medians of "
          f"{a.rounds} rounds × {a.steps} steps")
    print("| variant | step ms | × unrecorded |\n|---|---:|---:|")
    for k in kinds:
        m = statistics.median(got[k])
        print(f"| {k} | {m * 1e3:.2f} | ×{m / base:.2f} |")
    kinds = ["nothing", "bare mode", "cutimeline, SimGPU owning cpu"]
    got = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for k in kinds:
            got[k].append(tiny_ops(k, a.ops))
    bare = statistics.median(got["bare mode"])
    print(f"\ntiny CPU ops ({a.ops} adds of 16 elements), medians of {a.rounds} rounds")
    print("| variant | µs/op | × bare mode |\n|---|---:|---:|")
    for k in kinds:
        m = statistics.median(got[k])
        print(f"| {k} | {m:.2f} | ×{m / bare:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
