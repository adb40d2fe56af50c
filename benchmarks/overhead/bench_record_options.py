"""What record(stack=True) and record(memory=True) cost per op, side by side in one run.

    python benchmarks/overhead/bench_record_options.py [--ops 2000] [--reps 9]

The loop of tiny ops ``bench_record.py`` times (``add``, ``mul``, ``relu``,
``sum`` on 16-element tensors; every op makes a new tensor, so with
``memory=True`` every op brings a new storage: the meter's worst case),
recorded on the CPU (host rows only) and on a SimGPU that owns CPU
tensors (every op a launch; on meta tensors torch's meta kernels cost
~0.2 ms an op here, which would drown the difference), each with the
options off and on, interleaved round by
round; each figure is the median over rounds of µs per op of the loop
alone (start and stop not timed). ``stack, module`` runs the loop inside
an ``nn.Module``'s forward, four more torch frames above each op.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

import cutimeline as ctl


def workload(n_ops: int, device: str) -> None:
    x = torch.ones(16, device=device)
    y = torch.full((16,), 2.0, device=device)
    for _ in range(n_ops // 4):
        z = torch.add(x, y)
        z = torch.mul(z, y)
        z = torch.relu(z)
        z = torch.sum(z)


class Loop(torch.nn.Module):
    def forward(self, n_ops: int, device: str) -> None:
        workload(n_ops, device)


def timed(n_ops: int, device: str, module: bool = False, sim: bool = False,
          **options) -> float:
    dev = ctl.SimGPU(seed=0, owns=(device,)) if sim else "cpu"
    run = Loop() if module else workload
    with ctl.record(device=dev, measure=False, **options):
        t0 = time.perf_counter_ns()
        run(n_ops, device)
        t = time.perf_counter_ns() - t0
    return t / n_ops / 1e3


VARIANTS = {
    "cpu": lambda n: timed(n, "cpu"),
    "cpu stack": lambda n: timed(n, "cpu", stack=True),
    "cpu stack, module": lambda n: timed(n, "cpu", module=True, stack=True),
    "cpu module": lambda n: timed(n, "cpu", module=True),
    "sim": lambda n: timed(n, "cpu", sim=True),
    "sim stack": lambda n: timed(n, "cpu", sim=True, stack=True),
    "sim memory": lambda n: timed(n, "cpu", sim=True, memory=True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000, help="ops per round")
    ap.add_argument("--reps", type=int, default=9, help="rounds (medians over them)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for f in VARIANTS.values():  # warm-up
        f(a.ops)
    rounds = [{k: f(a.ops) for k, f in VARIANTS.items()} for _ in range(a.reps)]
    med = {k: statistics.median(r[k] for r in rounds) for k in VARIANTS}
    print(f"# {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"# {a.ops} ops x {a.reps} rounds; µs/op, median round")
    for k, v in med.items():
        print(f"{k:18s} {v:8.2f} µs/op")
    print(f"stack=True:  {med['cpu stack'] - med['cpu']:+.2f} µs/op on the CPU, "
          f"{med['sim stack'] - med['sim']:+.2f} on SimGPU, "
          f"{med['cpu stack, module'] - med['cpu module']:+.2f} inside a module")
    print(f"memory=True: {med['sim memory'] - med['sim']:+.2f} µs/op on SimGPU "
          f"(a new storage per op)")


if __name__ == "__main__":
    sys.exit(main())
