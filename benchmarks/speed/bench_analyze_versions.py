"""``ctl.analyze`` of one checkout against others, alternating, on the same
synthetic Timeline (``bench_analyze.synthetic`` of this checkout, handed to
each checkout as a ``.ctl`` file, so checkouts whose modules live elsewhere
read it through the public ``ctl.load``).

    mkdir /tmp/before && git archive <commit> | tar -x -C /tmp/before
    python benchmarks/speed/bench_analyze_versions.py /tmp/before . [--size 1e6]
        [--streams 1] [--runs 5] [--reps 9] [--clock wall|cpu]

Each run is a fresh interpreter per checkout (its cutimeline first on the
path, Numba kernels from its own cache, one warm-up), timing the median of
``--reps`` analyses with the default engine (each run names the one
"auto" picked); the checkouts take turns ``--runs`` times, so the
machine's drift falls on all of them alike. Prints each run, then the
median of the runs per checkout and its fastest run (other jobs on the
machine only ever slow a run down).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

ONE = """
import sys, time, statistics
sys.path.insert(0, {tree!r})
import cutimeline as ctl
assert ctl.__file__.startswith({tree!r}), ctl.__file__
tl = ctl.load({path!r})
engine = ctl.analyze(tl).settings["engine"]  # warm-up; "auto" picks by size
r = []
for _ in range({reps}):
    t = time.{clock}(); ctl.analyze(tl); r.append(time.{clock}() - t)
print(engine, statistics.median(r))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", help="checkouts to compare (paths)")
    ap.add_argument("--size", type=float, default=1e6)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the thread's CPU time (other jobs' share of the cores "
                         "left out, not their use of the caches)")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.trees]
    times: dict[str, list[float]] = {t: [] for t in trees}
    sys.path.insert(0, HERE)
    from bench_analyze import synthetic
    tmp = tempfile.TemporaryDirectory(prefix="bench-versions-")
    path = os.path.join(tmp.name, "synthetic.ctl")
    synthetic(int(args.size), streams=args.streams).save(path)
    for run in range(args.runs):
        for t in trees:
            code = ONE.format(tree=t, path=path, reps=args.reps,
                              clock="perf_counter" if args.clock == "wall" else "thread_time")
            out = subprocess.run([sys.executable, "-c", code], check=True,
                                 capture_output=True, text=True).stdout
            engine, took = out.split()[-2:]
            times[t].append(float(took))
            print(f"run {run}: {t}: {times[t][-1] * 1e3:.1f} ms ({engine})", flush=True)
    print(f"\n| checkout | analyze of {int(args.size):,} ops, {args.streams} stream(s), "
          f"median of {args.runs} runs | M ops/s | fastest run | M ops/s |"
          f"\n|---|---:|---:|---:|---:|")
    for t, v in times.items():
        m, f = statistics.median(v), min(v)
        print(f"| {t} | {m * 1e3:.1f} ms | {args.size / m / 1e6:.1f} | {f * 1e3:.1f} ms | "
              f"{args.size / f / 1e6:.1f} |")


if __name__ == "__main__":
    main()
