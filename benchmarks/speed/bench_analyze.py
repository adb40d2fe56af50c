"""Throughput of ``ctl.analyze`` on synthetic Timelines, Numba against its
NumPy twin in one run.

    python benchmarks/speed/bench_analyze.py [--sizes 1e5 1e6 1e7] [--reps 5]
                                       [--streams 1] [--numpy-max 1e7]

A synthetic Timeline has one gpu row per op (as the recorder makes): the
host dispatches ops (2–20 µs each), a DataLoader fetch opens each step of
10,000 ops, a sync closes it (the host waits for the GPU), and each op's
GPU work (1–25 µs) follows SimGPU's rule, start = max(stream free,
launch + 4 µs). Its meta prices the recorder's own cost as a recording's
does (a model, a price per op name and shapes, a mix ratio), which the
overhead replay reads. Times are the median of ``--reps`` runs after one warm-up
run per engine; "analyze" is the whole ``ctl.analyze`` (lanes, idle time
by cause per window, queue depth and CPU lead, steps and verdicts,
overhead replay); what a Report computes on first use — HTA's measures,
the per-gap causes (the gap table), the verdicts' offenders — is part of
"summary"; the op table is timed apart; "verdicts" is the first
``rep.steps`` of a fresh report: the causal verdicts, each fix replayed on
the program without the recorder and measured step by step
(``analysis/verdicts/causal.py``), which ``what_if()`` then returns
without another replay; the median of ``--reps`` after one warm-up, as is
analyze. "analyze + verdicts" is the throughput of both, what a user who
reads a verdict waits for. Goal: ≥ 20 M ops/s after warm-up (analyze).
"one pass" is the floor for scale: ``np.sum`` once over each column an
analysis reads (ops: thread, name, shapes, grad_fn, flags, begin, end;
gpu: op, device, stream, launch, begin, end), each read cold (a buffer
larger than the caches is swept between columns, as the stages of an
analysis sweep theirs).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import cutimeline as ctl
from cutimeline.analysis.tables.optable import op_table
from cutimeline.timeline.schema import GpuKind, OpFlag, SpanKind
from cutimeline.timeline.timeline import Timeline


def synthetic(n: int, *, streams: int = 1, per_step: int = 10_000, seed: int = 0) -> Timeline:
    """A Timeline of n ops, each launching one gpu row (see the module doc)."""
    rng = np.random.default_rng(seed)
    names = [f"aten::op{i}" for i in range(24)] + ["step", "next(DataLoader)", "sync"]
    launch = np.empty(n, np.int64)
    begin = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    stream = rng.integers(0, streams, n)
    dispatch = rng.integers(2_000, 20_000, n)
    cost = rng.integers(1_000, 25_000, n)
    free = np.zeros(streams, np.int64)
    t = 1_000_000_000
    steps, data, syncs = [], [], []
    for k, a in enumerate(range(0, n, per_step)):
        b = min(a + per_step, n)
        t0 = t
        fetch = int(rng.integers(0, 20_000_000))
        data.append((t, t + fetch))
        t += fetch
        launch[a:b] = t + np.cumsum(dispatch[a:b]) - dispatch[a:b]
        for s in range(streams):
            r = np.flatnonzero(stream[a:b] == s) + a
            if len(r) == 0:
                continue
            ready = launch[r] + 4_000
            before = np.concatenate([[0], np.cumsum(cost[r])[:-1]])
            start = np.maximum(np.maximum.accumulate(ready - before), free[s]) + before
            begin[r], end[r] = start, start + cost[r]
            free[s] = end[r[-1]]
        t = int(launch[b - 1] + dispatch[b - 1])
        wake = max(t, int(free.max())) + 5_000
        syncs.append((t, wake))
        t = wake + int(rng.integers(10_000, 200_000))
        steps.append((k, t0, t))
    host_end = launch + dispatch - 500
    sp = np.array([(SpanKind.STEP, 24, k, b, e) for k, b, e in steps] +
                  [(SpanKind.DATA, 25, -1, b, e) for b, e in data], np.int64)
    sy = np.array(syncs, np.int64)
    tables = {
        "ops": {"seq": np.arange(n), "thread": np.zeros(n), "name": rng.integers(0, 24, n),
                "shapes": rng.integers(0, 4, n), "module": np.full(n, -1),
                "device": np.zeros(n), "stream": stream, "flags": np.full(n, OpFlag.LAUNCH),
                "host_begin_ns": launch - 1_000, "host_end_ns": host_end},
        "gpu": {"op": np.arange(n), "device": np.zeros(n), "stream": stream,
                "name": rng.integers(0, 24, n), "kind": np.full(n, GpuKind.OP),
                "launch_ns": launch, "begin_ns": begin, "end_ns": end},
        "spans": {"kind": sp[:, 0], "name": sp[:, 1], "number": sp[:, 2],
                  "begin_ns": sp[:, 3], "end_ns": sp[:, 4], "thread": np.zeros(len(sp))},
        "syncs": {"host_begin_ns": sy[:, 0], "host_end_ns": sy[:, 1],
                  "device": np.zeros(len(sy)), "stream": np.full(len(sy), -1),
                  "kind": np.full(len(sy), 26)}}
    # the recorder's price of itself, as a recording carries it: a model,
    # each (name, shapes) priced, a mix ratio measured at stop
    pairs = np.unique(tables["ops"]["name"].astype(np.int64) << 32 | tables["ops"]["shapes"])
    meta = {"aligned": True, "source": "synthetic", "overhead_ns_per_op": 1_500,
            "overhead_ns_per_launch": 600,
            "overhead_model": {"op_ns": 5_900, "tensor_ns": 180, "float_ns": 2_600,
                               "list_ns": 1_100, "other_ns": 170, "backward_ns": 300,
                               "detach_ns": 1_100, "module_ns": 3_500},
            "overhead_ns_by_signature": {
                "name": (pairs >> 32).tolist(), "shapes": (pairs & 0xFFFFFFFF).tolist(),
                "ns": rng.integers(5_000, 9_000, len(pairs)).tolist()},
            "overhead_calibrations": [[t, t + 2_000_000, 1_600]]}
    return Timeline(tables, names, meta)


READ = {"ops": ("thread", "name", "shapes", "grad_fn", "flags", "host_begin_ns",
                "host_end_ns"),
        "gpu": ("op", "device", "stream", "launch_ns", "begin_ns", "end_ns")}


def one_pass(tl: Timeline) -> float:
    """Seconds for ``np.sum`` once over each column in ``READ``, cold."""
    sweep = np.ones(1 << 23)  # 64 MB: more than the caches hold
    total = 0.0
    for table, cols in READ.items():
        for c in cols:
            sweep.sum()
            t0 = time.perf_counter()
            np.sum(getattr(tl, table)[c])
            total += time.perf_counter() - t0
    return total


def timed(f, reps: int) -> float:
    f()  # warm-up (Numba kernels load from the on-disk cache on first use)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def verdicts_s(tl: Timeline, engine: str, reps: int) -> float:
    """Median seconds of the first ``steps`` on a fresh Report of ``tl``
    (its verdicts: the fixes' replays), after one warm-up (its kernels
    loaded). What a report remembers of its Timeline's columns
    (``numeric/columns.py``, the one-off calls) stays with the Timeline, as it does
    for a user's second report."""
    ctl.analyze(tl, engine=engine).steps
    times = []
    for _ in range(reps):
        rep = ctl.analyze(tl, engine=engine)
        t0 = time.perf_counter()
        rep.steps
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--numpy-max", type=float, default=1e7,
                    help="largest size also run with the NumPy twins")
    args = ap.parse_args()
    print("| ops | streams | engine | analyze s | M ops/s | one pass s | op table s | "
          "summary s | verdicts s | analyze + verdicts M ops/s | NumPy ÷ Numba |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        n = int(size)
        tl = synthetic(n, streams=args.streams)
        base = None
        floor = statistics.median(one_pass(tl) for _ in range(args.reps))
        for engine in ("numba", "numpy"):
            if engine == "numpy" and n > args.numpy_max:
                continue
            t = timed(lambda: ctl.analyze(tl, engine=engine), args.reps)
            t_v = verdicts_s(tl, engine, args.reps)
            rep = ctl.analyze(tl, engine=engine)
            rep.steps  # the verdicts, as the summary reads them: timed apart
            t_ops = timed(lambda: op_table(tl, engine=engine), 1)
            t_sum = timed(lambda: rep.summary(), 1)
            ratio = "" if base is None else f"{t / base:.1f}"
            base = base or t
            print(f"| {n:,} | {args.streams} | {engine} | {t:.3f} | {n / t / 1e6:.1f} | "
                  f"{floor:.4f} | {t_ops:.3f} | {t_sum:.3f} | {t_v:.3f} | "
                  f"{n / (t + t_v) / 1e6:.1f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
