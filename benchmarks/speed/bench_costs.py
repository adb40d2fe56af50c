"""What the overhead replay's price of each op (``costs.costs``)
takes, the Numba kernel against its NumPy twin (the previous
implementation: a binary search of the price table per op, then a pass
per earlier op for ``repeats``) in one run, on ``bench_analyze``'s
synthetic Timelines (one thread; 96 priced (name, shapes) pairs).

    python benchmarks/speed/bench_costs.py [--sizes 1e5 1e6 1e7] [--reps 7]

Also ``ctl.analyze`` with each engine of ``costs`` under the Numba
analysis. Times are medians of ``--reps`` after one warm-up call.
"""

from __future__ import annotations

import argparse

import cutimeline as ctl
from cutimeline.analysis.replay import compensation
from cutimeline.analysis.replay.costs import costs

from bench_analyze import synthetic, timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    print("| ops | costs, Numba ms | costs, NumPy twin ms | NumPy ÷ Numba | "
          "analyze, costs by Numba s | analyze, costs by NumPy s |")
    print("|---:|---:|---:|---:|---:|---:|")
    original = costs
    for size in args.sizes:
        n = int(size)
        tl = synthetic(n)
        nb = timed(lambda: original(tl, "numba"), args.reps)
        np_ = timed(lambda: original(tl, "numpy"), args.reps)
        an_nb = timed(lambda: ctl.analyze(tl), args.reps)
        compensation.costs = lambda t, engine="numba", apart=False: original(t, "numpy", apart)
        try:
            an_np = timed(lambda: ctl.analyze(tl), args.reps)
        finally:
            compensation.costs = original
        print(f"| {n:,} | {nb * 1e3:.1f} | {np_ * 1e3:.1f} | {np_ / nb:.1f} | "
              f"{an_nb:.3f} | {an_np:.3f} |", flush=True)


if __name__ == "__main__":
    main()
