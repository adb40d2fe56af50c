"""What a scheduled recorder costs outside its windows, and an armed trigger
while idle, side by side in one run.

    python benchmarks/overhead/bench_schedule.py [--ops 2000] [--steps 5] [--reps 9]

The loop: steps of ``--ops`` tiny CPU ops (``add`` on 16-element tensors,
where dispatch dominates), each step ended by ``optimizer.step()`` on a
one-element parameter. Four ways to run it, interleaved round by round so
drift on a shared machine hits them alike: no recorder; a scheduled
recorder in its wait phase (``ctl.record(schedule=...)`` that never
reaches a window: no dispatch mode, two global optimizer hooks); an armed
on-demand trigger, idle (``ctl.arm()``: the hooks, a signal handler, one
``os.stat`` per step); an ordinary recording, for scale. Each figure is
the median over rounds of ns per op (the step's cost included, spread over
its ops), and beside it the difference from no recorder. A second table
times bare ``optimizer.step()`` calls: the per-step cost of the hooks.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time

import torch

import cutimeline as ctl
from cutimeline.recording.ondemand import disarm

NEVER = ctl.schedule(skip_first=10 ** 12, wait=1, warmup=1, active=1)


def variants() -> dict:
    @contextlib.contextmanager
    def armed():
        ctl.arm(options={"device": "cpu", "measure": False})
        try:
            yield
        finally:
            disarm()

    return {
        "no recorder": contextlib.nullcontext,
        "scheduled, wait phase": lambda: ctl.record(device="cpu", schedule=NEVER),
        "armed trigger, idle": armed,
        "recording (for scale)": lambda: ctl.record(device="cpu", measure=False),
    }


def one_round(make, ops: int, steps: int, opt, x) -> float:
    """ns per op of ``steps`` steps of ``ops`` adds under ``make()``."""
    add = torch.add
    with make():
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            for _ in range(ops):
                add(x, 1.0)
            opt.step()
        t1 = time.perf_counter_ns()
    return (t1 - t0) / (ops * steps)


def step_round(make, n: int, opt) -> float:
    """ns per bare ``optimizer.step()`` under ``make()``."""
    with make():
        t0 = time.perf_counter_ns()
        for _ in range(n):
            opt.step()
        t1 = time.perf_counter_ns()
    return (t1 - t0) / n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000, help="tiny ops per step")
    ap.add_argument("--steps", type=int, default=5, help="steps per round")
    ap.add_argument("--reps", type=int, default=9, help="rounds (≥ 5)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    opt = torch.optim.SGD([p], lr=0.0)
    x = torch.zeros(16)
    runs = variants()
    for make in runs.values():  # warm-up: imports, caches, the recorder's first start
        one_round(make, 200, 1, opt, x)
    per_op = {name: [] for name in runs}
    per_step = {name: [] for name in runs}
    for _ in range(max(5, a.reps)):
        for name, make in runs.items():
            per_op[name].append(one_round(make, a.ops, a.steps, opt, x))
        for name, make in list(runs.items())[:3]:
            per_step[name].append(step_round(make, 500, opt))
    base = statistics.median(per_op["no recorder"])
    print(f"python {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}, 1 intra-op thread; {a.ops} ops × {a.steps} steps "
          f"per round, median of {max(5, a.reps)} rounds\n")
    print("| variant | ns/op | over no recorder, ns/op | rounds min–max |")
    print("|---|---:|---:|---:|")
    for name, xs in per_op.items():
        m = statistics.median(xs)
        print(f"| {name} | {m:.0f} | {m - base:+.0f} | {min(xs):.0f}–{max(xs):.0f} |")
    base = statistics.median(per_step["no recorder"])
    print("\n| variant | ns per optimizer.step() | over no recorder |")
    print("|---|---:|---:|")
    for name, xs in per_step.items():
        if xs:
            m = statistics.median(xs)
            print(f"| {name} | {m:.0f} | {m - base:+.0f} |")


if __name__ == "__main__":
    main()
