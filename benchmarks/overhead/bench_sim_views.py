"""The recorder's real cost per view of a simulated tensor, checkouts side by side.

    python benchmarks/overhead/bench_sim_views.py --trees /tmp/before . [--ops 4000] [--rounds 7] [--runs 2]

A loop of three views of a ``meta`` tensor (``view``, ``t``, a slice)
recorded on ``ctl.SimGPU("h100")``, which takes ``opstream.ExactMode``'s
host-op path, the one that prices a view of the device's own tensor
(``Device.metadata_ns``). Each checkout (its ``cutimeline`` first on the
path) runs in a fresh process, the checkouts alternating ``--runs``
times; each prints the median over ``--rounds`` rounds of the real µs per
op (wall clock, the whole loop ÷ its ops) and the range. That time is
the recorder's and the program's together in real time; on the simulated
host the recorder's part is left out, so this measures how much slower
recording runs, not what the verdicts see.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings


def measure(ops: int, rounds: int) -> list[float]:
    """µs per op of ``rounds`` recorded rounds of ``ops`` loops of 3 views."""
    import torch

    import cutimeline as ctl
    warnings.simplefilter("ignore")
    x = torch.zeros(64, 64, device="meta")
    out = []
    for _ in range(rounds):
        with ctl.record(device=ctl.SimGPU("h100"), modules=False):
            t = time.perf_counter_ns()
            for _ in range(ops):
                x.view(4096)
                x.t()
                x[:8]
            out.append((time.perf_counter_ns() - t) / (3 * ops) / 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs="+", default=["."], metavar="CHECKOUT")
    ap.add_argument("--ops", type=int, default=4000, help="loops of 3 views a round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=2, help="fresh processes per checkout")
    ap.add_argument("--_tree", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._tree:  # a child: this checkout's cutimeline
        sys.path.insert(0, a._tree)
        import cutimeline
        if not cutimeline.__file__.startswith(a._tree):
            raise SystemExit(f"{a._tree}: imported {cutimeline.__file__}")
        us = measure(a.ops, a.rounds)
        print(f"{statistics.median(us):.2f} {min(us):.2f} {max(us):.2f}")
        return
    print(f"| checkout | run | µs/op (median of {a.rounds}) | range |")
    print("|---|---:|---:|---|")
    for run in range(a.runs):
        for tree in a.trees:
            tree = os.path.abspath(tree)
            done = subprocess.run([sys.executable, __file__, "--_tree", tree, "--ops",
                                   str(a.ops), "--rounds", str(a.rounds)],
                                  capture_output=True, text=True, check=True)
            med, lo, hi = done.stdout.split()
            print(f"| {tree} | {run + 1} | {med} | {lo}–{hi} |")


if __name__ == "__main__":
    main()
