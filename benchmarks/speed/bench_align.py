"""Alignment throughput: events per second of ``align`` for 10^5, 10^6 and
10^7 events, the Numba kernels against their NumPy twins in one run, and
the cost of ``import cutimeline`` in a fresh interpreter (which must import
no Numba, so compile nothing).

    python benchmarks/speed/bench_align.py [--sizes 1e5,1e6,1e7] [--reps 5]

Traces come from ``cutimeline.devices.sim.synthetic_events`` (4 streams, 12.5 ppm
drift, a device-wide sync every 500 ops, pings at both ends): two events
per op, so n events are n/2 ops and n/2 gpu rows. Times are medians of
``--reps`` runs after one warm-up run per backend (the warm-up loads or
compiles the Numba kernels; its time is printed too).
"""

from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import subprocess
import sys
import time

GOAL = 20e6  # events/s after warm-up (benchmarks/RESULTS.md, Alignment)


def _median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_import(reps: int) -> tuple[float, bool]:
    code = ("import sys, time; t = time.perf_counter(); import cutimeline; "
            "print(time.perf_counter() - t, 'numba' in sys.modules)")
    times, numba_loaded = [], False
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", code], check=True,
                             capture_output=True, text=True).stdout.split()
        times.append(float(out[0]))
        numba_loaded |= out[1] == "True"
    return statistics.median(times), numba_loaded


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e5,1e6,1e7",
                   help="event counts, comma-separated (default 1e5,1e6,1e7)")
    p.add_argument("--reps", type=int, default=5, help="timed runs per case")
    args = p.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]

    t_imp, numba_loaded = bench_import(max(args.reps, 3))
    print(f"python {platform.python_version()} on {platform.machine()} "
          f"({platform.processor() or platform.platform()})")
    print(f"import cutimeline: {t_imp * 1e3:.1f} ms (median of {max(args.reps, 3)} "
          f"fresh interpreters); numba imported: {numba_loaded}")
    if numba_loaded:
        print("FAIL: import cutimeline imported numba")

    from cutimeline.devices.sim import synthetic_events
    align_mod = importlib.import_module("cutimeline.alignment.aligner")
    print(f"{'events':>11} {'backend':>7} {'warm-up s':>9} {'align s':>8} "
          f"{'Mev/s':>7} {'event_host_ns s':>15} {'numba ×':>7}")
    for n in sizes:
        tl = synthetic_events(n // 2, streams=4, seed=1)
        ev = len(tl.events)
        per = {}
        for backend in ("numba", "numpy"):
            t = time.perf_counter()
            aligned = align_mod.align(tl, backend=backend)
            warm = time.perf_counter() - t
            t_align = _median_s(lambda: align_mod.align(tl, backend=backend), args.reps)
            t_host = _median_s(lambda: align_mod.event_host_ns(aligned, backend=backend),
                               args.reps)
            per[backend] = t_align
            ratio = f"{per['numpy'] / per['numba']:.1f}" if backend == "numpy" else ""
            print(f"{ev:>11,} {backend:>7} {warm:>9.2f} {t_align:>8.3f} "
                  f"{ev / t_align / 1e6:>7.1f} {t_host:>15.3f} {ratio:>7}")
        rate = ev / per["numba"]
        verdict = "meets" if rate >= GOAL else "MISSES"
        print(f"{'':>11} numba {verdict} the {GOAL / 1e6:.0f} M events/s goal")
        tl = aligned = None  # freed before the next size is built


if __name__ == "__main__":
    main()
