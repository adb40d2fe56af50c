"""Recording overhead per op on a tiny-op CPU workload, side by side in one run.

    python benchmarks/bench_record.py [--ops 2000] [--reps 15]

Four ways to run the same loop of tiny CPU ops (``add``, ``mul``, ``relu``,
``sum`` on 16-element tensors; the ops where dispatch dominates): nothing;
a bare pass-through TorchDispatchMode (this design's floor); cutimeline's
recorder; torch.profiler with ``record_shapes=True``. The variants are
interleaved round by round so drift on a shared machine hits them alike;
each figure is the median over rounds of µs per op. Also: bytes per op of
the saved .ctl file beside torch.profiler's Kineto JSON of the same ops, and
the Python memory held per op while recording (tracemalloc).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl


class Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def workload(n_ops: int) -> None:
    x = torch.ones(16)
    y = torch.full((16,), 2.0)
    for _ in range(n_ops // 4):
        z = torch.add(x, y)
        z = torch.mul(z, y)
        z = torch.relu(z)
        z = torch.sum(z)


def timed(run, n_ops: int) -> float:
    t0 = time.perf_counter_ns()
    run(n_ops)
    return (time.perf_counter_ns() - t0) / n_ops / 1e3


def variants(n_ops: int) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile
    out = {"nothing": timed(workload, n_ops)}
    with Bare():
        out["bare mode"] = timed(workload, n_ops)
    with ctl.record(device="cpu", measure=False):
        out["cutimeline"] = timed(workload, n_ops)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
        out["torch.profiler"] = timed(workload, n_ops)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000, help="ops per round")
    ap.add_argument("--reps", type=int, default=15, help="rounds (medians over them)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    variants(a.ops)  # warm-up
    rounds = [variants(a.ops) for _ in range(a.reps)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    low = {k: min(r[k] for r in rounds) for k in rounds[0]}
    print(f"# {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"# {a.ops} ops x {a.reps} rounds; µs/op, median (and fastest) round")
    for k, v in med.items():
        print(f"{k:16s} {v:8.2f} ({low[k]:6.2f}) µs/op   x{v / med['nothing']:5.2f} vs nothing")
    print(f"cutimeline - bare mode: {med['cutimeline'] - med['bare mode']:+.2f} µs/op "
          f"({low['cutimeline'] - low['bare mode']:+.2f} fastest; goal ≤ +1.5); "
          f"cutimeline / torch.profiler: {med['cutimeline'] / med['torch.profiler']:.2f}")

    n = 20000
    tracemalloc.start()
    with ctl.record(device="cpu", measure=False) as rec:
        base = tracemalloc.get_traced_memory()[0]
        workload(n)
        held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    tl = rec.timeline
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        workload(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.ctl")
        tl.save(path)
        size = os.path.getsize(path)
        kineto = os.path.join(d, "run.json")
        prof.export_chrome_trace(kineto)
        with open(kineto, "rb") as f:
            raw = f.read()
    per = len(tl.ops)
    print(f"memory while recording: {held / per:.0f} B/op ({per} ops, tracemalloc)")
    print(f"file: {size / per:.1f} B/op on disk (.ctl, goal ≤ 40); torch.profiler's "
          f"Kineto JSON of the same ops: {len(raw) / per:.0f} B/op, "
          f"{len(gzip.compress(raw)) / per:.0f} B/op gzipped")


if __name__ == "__main__":
    sys.exit(main())
