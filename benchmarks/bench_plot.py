"""How long ``ctl.plot`` takes on large Timelines.

A synthetic Timeline (``simclock.synthetic_events``: ops dispatched one
after another onto several streams, a device-wide sync every 500 ops) is
aligned once, then drawn to a PNG. Side by side in one run, medians of
``--reps`` repetitions after one warm-up (which loads the Numba kernels):
``analyze`` alone (what the figure draws from), ``plot`` without saving
(analysis + layout + merging to pixels + artists) and ``plot`` to a PNG
(everything, with Agg rendering and PNG encoding).

    python benchmarks/bench_plot.py [--ops 100000 1000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=float, nargs="+", default=[1e5, 1e6])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--streams", type=int, default=4)
    a = p.parse_args(argv)

    from cutimeline.alignment.aligner import align
    from cutimeline.analysis.analyzer import analyze
    from cutimeline.rendering.figure import plot
    from cutimeline.devices.simclock import synthetic_events

    print("| ops | gpu rows | `analyze` s | `plot` (no file) s | `plot` → PNG s | M ops/s to PNG |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "timeline.png")
        for n in (int(v) for v in a.ops):
            tl = align(synthetic_events(n, streams=a.streams))
            plot(tl, png)  # warm-up: Numba kernels from the on-disk cache
            t_an = _median_s(lambda: analyze(tl), a.reps)
            t_fig = _median_s(lambda: plot(tl), a.reps)
            t_png = _median_s(lambda: plot(tl, png), a.reps)
            print(f"| {n:,} | {len(tl.gpu):,} | {t_an:.3f} | {t_fig:.3f} | "
                  f"{t_png:.3f} | {n / t_png / 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
