"""Kineto import speed: ``ctl.import_chrome`` against HolisticTraceAnalysis
loading the same trace, side by side in one run.

    python benchmarks/bench_import.py [--trace PATH] [--reps 5]
                                      [--hta-python /work/hta-venv/bin/python]

Each side runs in a fresh interpreter of its own (so peak RSS is its own):
it imports its package (timed), loads the trace once to warm the file
cache, then ``--reps`` timed loads; the medians are compared. HTA's load is
``TraceAnalysis(trace_files={0: path})``, which parses the trace into its
DataFrame and aligns and filters it (in-process for a single rank; a
forked worker's peak RSS, if any, would be reported apart). HTA is never a dependency of cutimeline: install it
into a venv of its own, e.g.

    python3 -m venv /work/hta-venv
    /work/hta-venv/bin/pip install torch==2.13.0   # first, so no CUDA torch
    /work/hta-venv/bin/pip install holistictraceanalysis==0.5.0

and pass that interpreter with ``--hta-python``; without it only our side
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRACE = os.path.join(ROOT, "tests", "data", "kineto", "nccl_parser_config",
                             "nccl_data.json.gz")

# Both child scripts print one JSON line: package import s, the warm-up
# load s, the timed loads s, and peak RSS in KiB (self, children).
_COMMON = """
import json, resource, statistics, sys, time
path, reps = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
{import_}
import_s = time.perf_counter() - t
def load():
    t = time.perf_counter()
    {load}
    return time.perf_counter() - t
first = load()
times = [load() for _ in range(reps)]
rss = [resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF,
                                                   resource.RUSAGE_CHILDREN)]
print(json.dumps({{"import_s": import_s, "first_s": first, "times": times,
                  "rss_kib": rss, "check": {check}}}))
"""

OURS = _COMMON.format(
    import_="from cutimeline.formats.chrome import import_chrome",
    load="global tl; tl = import_chrome(path)",
    check="[len(tl.ops), len(tl.gpu)]")

HTA = _COMMON.format(
    import_=("import logging; logging.disable(logging.WARNING)\n"
             "from hta.trace_analysis import TraceAnalysis"),
    load=("global an; an = TraceAnalysis(trace_files={0: path}, "
          "trace_dir=__import__('os').path.dirname(path))"),
    check="len(an.t.get_trace(0))")


def run_side(python: str, script: str, trace: str, reps: int) -> dict:
    proc = subprocess.run([python, "-c", script, trace, str(reps)],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=DEFAULT_TRACE, help="a Kineto .json(.gz) trace")
    p.add_argument("--reps", type=int, default=5, help="timed loads per side")
    p.add_argument("--hta-python", help="interpreter with holistictraceanalysis")
    args = p.parse_args(argv)
    trace = os.path.abspath(args.trace)

    sides = {"cutimeline import_chrome": run_side(sys.executable, OURS, trace, args.reps)}
    if args.hta_python:
        sides["HTA TraceAnalysis load"] = run_side(args.hta_python, HTA, trace, args.reps)

    print(f"trace: {os.path.relpath(trace, ROOT)} ({os.path.getsize(trace) / 1e6:.1f} MB); "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"median of {args.reps} loads after one warm-up")
    print(f"{'':28} {'package import s':>16} {'first load s':>12} {'load s':>8} "
          f"{'peak RSS MB':>11} {'worker RSS MB':>13}")
    for name, r in sides.items():
        worker = f"{r['rss_kib'][1] / 1024:.0f}" if r["rss_kib"][1] else "-"
        print(f"{name:28} {r['import_s']:16.3f} {r['first_s']:12.3f} "
              f"{median(r['times']):8.3f} {r['rss_kib'][0] / 1024:11.0f} {worker:>13}")
    ours = sides["cutimeline import_chrome"]
    print(f"cutimeline: {ours['check'][0]:,} ops, {ours['check'][1]:,} gpu rows")
    if args.hta_python:
        hta = sides["HTA TraceAnalysis load"]
        print(f"HTA: {hta['check']:,} rows in its trace DataFrame")
        ratio = median(hta["times"]) / median(ours["times"])
        print(f"HTA load ÷ cutimeline import: {ratio:.2f}× "
              f"({'faster' if ratio > 1 else 'SLOWER'} than HTA)")


if __name__ == "__main__":
    main()
