"""How long ``ctl.plot`` takes on large Timelines.

A synthetic Timeline (``cutimeline.devices.sim.synthetic_events``: ops dispatched one
after another onto several streams, a device-wide sync every 500 ops)
is aligned once and given a step every ``--step-ops`` ops (so the verdict
strip has cells, as a training loop's figure has), then drawn to a PNG.
Side by side in one run, medians of ``--reps`` repetitions after one
warm-up (which loads the Numba kernels): ``analyze`` alone (what the
figure draws from), ``plot`` from that fresh Report without saving
(layout, merging and binning to pixels, artists: the drawing alone),
``plot`` from a fresh Report to a PNG (with Agg rendering and PNG
encoding: the ≤ 1 s budget for 10^6 ops), and ``plot`` to a PNG from the
Timeline alone (analysis included). Each repetition analyses anew
outside the timed call, so what a Report computes on first use is
charged to the plot. The "overview" column says whether the GPU lanes
were drawn as the dense-window overview.

    python benchmarks/speed/bench_plot.py [--ops 100000 1000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def _median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _median_plot_s(draw, tl, reps: int) -> float:
    """Median time of ``draw(report)``, each time from a fresh Report."""
    from cutimeline.analysis.analyzer import analyze
    times = []
    for _ in range(reps):
        rep = analyze(tl)
        t = time.perf_counter()
        draw(rep)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def with_steps(tl, every: int):
    """``tl`` with a STEP span over each run of ``every`` ops of thread 0."""
    from cutimeline.timeline.schema import SpanKind
    b = np.sort(tl.ops.host_begin_ns)[::every]
    e = np.append(b[1:], tl.ops.host_end_ns.max())
    n = len(b)
    spans = {"kind": np.full(n, int(SpanKind.STEP)), "name": np.full(n, -1),
             "thread": np.zeros(n, np.int64), "depth": np.zeros(n, np.int64),
             "number": np.arange(n), "begin_ns": b, "end_ns": e}
    return tl.replace(spans=spans)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=float, nargs="+", default=[1e5, 1e6])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--step-ops", type=int, default=5000,
                   help="ops per step (default 5000: 200 steps at 10^6 ops)")
    a = p.parse_args(argv)

    from cutimeline.alignment.aligner import align
    from cutimeline.analysis.analyzer import analyze
    from cutimeline.devices.sim import synthetic_events
    from cutimeline.rendering.figure import plot

    print("| ops | gpu rows | steps | overview | `analyze` s | `plot` (no file) s | "
          "`plot` → PNG s | `plot` → PNG with analysis s |")
    print("|---:|---:|---:|:---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "timeline.png")
        for n in (int(v) for v in a.ops):
            tl = with_steps(align(synthetic_events(n, streams=a.streams)), a.step_ops)
            rep = analyze(tl)
            fig = plot(tl, png, report=rep)  # warm-up: Numba kernels from the on-disk cache
            t_an = _median_s(lambda: analyze(tl), a.reps)
            t_fig = _median_plot_s(lambda r: plot(tl, report=r), tl, a.reps)
            t_png = _median_plot_s(lambda r: plot(tl, png, report=r), tl, a.reps)
            t_all = _median_s(lambda: plot(tl, png), a.reps)
            print(f"| {n:,} | {len(tl.gpu):,} | {len(tl.step_numbers()):,} | "
                  f"{'yes' if fig.cutimeline_overview else 'no'} | {t_an:.3f} | "
                  f"{t_fig:.3f} | {t_png:.3f} | {t_all:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
