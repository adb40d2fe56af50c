"""Merging ranks: ``ctl.merge`` of 64 synthetic rank files × 10^5 ops each,
time and peak memory, set against just loading the same files.

    python benchmarks/speed/bench_merge.py [--ranks 64] [--ops 100000] [--every 50] [--reps 3]

Each rank file is what ``record(out_dir=...)`` writes for a host-only rank:
``--ops`` ops, every ``--every``-th an all_reduce on the world group (so
10^5 ops give 2000 collectives per rank, 128 000 collective rows in all),
20 steps, and a collectives table. The ranks run in lockstep: each
collective completes after the last rank arrived (plus 5–60 µs), and each
rank's host clock has its own offset (up to ±5 s), drift (±20 ppm) and a
wall-clock epoch off by up to 1 ms, so the collectives do the aligning.

Each timed run is a fresh interpreter (``--child``) that reports its wall
time and its peak resident memory above what it held after importing
cutimeline (peak RSS − RSS before): ``load`` reads the files only (the floor), ``merge`` is
``ctl.merge(DIR)`` (load, rank clocks, one concatenated Timeline). Medians
of ``--reps`` runs, alternating the two. The files are written once to a
temporary folder (not timed). The clock error against the generator's
truth is printed as a check. Last, what recording costs per collective:
``dist.all_reduce`` bare, under a pass-through dispatch mode and under
``ctl.record`` (gloo, a world of one, interleaved rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_ranks(folder: str, ranks: int, ops: int, every: int, seed: int = 0) -> dict:
    """Write rank-<r>.ctl files; returns each rank's true clock (shift, drift)."""
    from cutimeline.recording.measures.collectives import ALL
    from cutimeline.timeline.schema import OpFlag, SpanKind
    from cutimeline.timeline.timeline import Timeline
    rng = np.random.default_rng(seed)
    n_coll = ops // every
    cols = np.arange(n_coll) * every + every - 1           # op index of each collective
    dur = rng.integers(2_000, 40_000, (ranks, ops))          # op durations, ns
    gap = rng.integers(200, 3_000, (ranks, ops))             # host time between ops
    begin = np.zeros((ranks, ops), np.int64)
    done = np.zeros((ranks, n_coll), np.int64)
    t = np.full(ranks, 10 ** 12, np.int64)
    prev = 0
    for k, c in enumerate(cols):                             # lockstep through collectives
        step = np.cumsum(dur[:, prev:c + 1] + gap[:, prev:c + 1], axis=1) - \
            (dur[:, prev:c + 1] + gap[:, prev:c + 1])
        begin[:, prev:c + 1] = t[:, None] + step
        arrive = begin[:, c]
        done[:, k] = arrive.max() + rng.integers(5_000, 60_000, ranks)
        dur[:, c] = np.maximum(done[:, k] - arrive, 1)       # sync collective: op lasts till done
        t = done[:, k] + gap[:, c]
        prev = c + 1
    if prev < ops:
        step = np.cumsum(dur[:, prev:] + gap[:, prev:], axis=1) - (dur[:, prev:] + gap[:, prev:])
        begin[:, prev:] = t[:, None] + step
    shift = rng.integers(-5 * 10 ** 9, 5 * 10 ** 9, ranks)
    shift[0] = 0
    drift = rng.uniform(-20, 20, ranks)
    drift[0] = 0
    t0 = 10 ** 12
    names = ["aten::mm", "aten::add", "aten::relu", "aten::view", "aten::sum",
             "c10d::allreduce_", "step", "f32[64,64], f32[64,64]", "f32[64,64]"]
    name = rng.integers(0, 5, ops)
    name[cols] = 5
    flags = np.zeros(ops, np.uint8)
    flags[cols] = int(OpFlag.COLLECTIVE)
    steps = 20
    per = max(n_coll // steps, 1)
    for r in range(ranks):
        def clock(x):
            return shift[r] + x + np.rint((x - t0) * drift[r] * 1e-6).astype(np.int64)
        b = begin[r]
        e = b + dur[r]
        edges = np.concatenate([[b[0]], done[r, per - 1::per][:steps]])
        meta = {"source": "record", "rank": r, "world_size": ranks, "host": f"node{r // 8}",
                "start_epoch_ns": 1_700_000_000 * 10 ** 9 + t0
                + int(rng.integers(-10 ** 6, 10 ** 6)),
                "start_host_ns": int(clock(np.int64(t0))), "threads": ["MainThread"],
                "groups": [{"name": "0", "ranks": list(range(ranks)), "backend": "gloo"}]}
        tl = Timeline({
            "ops": {"seq": np.arange(ops), "thread": np.zeros(ops, np.int32), "name": name,
                    "shapes": np.where(name == 5, 8, 7), "flags": flags,
                    "host_begin_ns": clock(b), "host_end_ns": clock(e)},
            "spans": {"kind": np.full(len(edges) - 1, int(SpanKind.STEP)),
                      "name": np.full(len(edges) - 1, 6), "thread": np.zeros(len(edges) - 1),
                      "depth": np.zeros(len(edges) - 1), "number": np.arange(len(edges) - 1),
                      "begin_ns": clock(edges[:-1]), "end_ns": clock(edges[1:])},
            "collectives": {"op": cols, "group": np.zeros(n_coll), "kind": np.full(n_coll, ALL),
                            "number": np.arange(n_coll), "peer": np.full(n_coll, -1),
                            "done_ns": clock(done[r])}},
            names, meta)
        tl.save(os.path.join(folder, f"rank-{r}.ctl"))
    return {"shift": shift.tolist(), "drift": drift.tolist(), "t0": t0,
            "span": [int(done.min()), int(done.max())]}


def _rss_kib() -> int:
    """Resident memory now (Linux /proc), else the peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(folder: str, what: str) -> None:
    """One timed run in this fresh interpreter; prints a JSON line."""
    import glob

    import cutimeline as ctl
    # the merge's modules imported before the clock starts: their import is
    # not the merge's time
    import cutimeline.alignment.clockfit  # noqa: F401
    import cutimeline.dist.merger  # noqa: F401
    import cutimeline.dist.rankclock  # noqa: F401
    import cutimeline.recording.ranks  # noqa: F401
    base = _rss_kib()
    t = time.perf_counter()
    if what == "load":
        tls = [ctl.load(p) for p in sorted(glob.glob(os.path.join(folder, "rank-*.ctl")))]
        rows = sum(len(tl.ops) for tl in tls)
        clocks = None
    else:
        tl = ctl.merge(folder)
        rows = len(tl.ops)
        clocks = [(r["clock"]["offset_ns"], r["clock"]["ref_ns"], r["clock"]["slope"],
                   r["clock"]["bound_ns"]) for r in tl.meta["ranks"]]
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    nbytes = sum(a.nbytes for name in ("ops", "spans") for a in
                 (tl.table(name).columns.values() if what == "merge" else []))
    print(json.dumps({"wall_s": wall, "peak_mib": peak / 1024, "rows": rows,
                      "nbytes_mib": nbytes / 2 ** 20, "clocks": clocks}))


def run_child(folder: str, what: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", folder, what], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def clock_error_ns(truth: dict, clocks: list) -> tuple[float, bool]:
    """Largest |merged − true| over the collectives' span, and whether every
    rank's error lies within its reported bound."""
    worst, within = 0.0, True
    t0 = truth["t0"]
    true = np.linspace(*truth["span"], 9)                   # true times, = rank 0's clock
    for r, (off, ref, slope, bound) in enumerate(clocks):
        s, d = truth["shift"][r], truth["drift"][r]
        x = s + true + (true - t0) * d * 1e-6                # what rank r's clock read
        err = float(np.abs(off + slope * (x - ref) - true).max())
        worst = max(worst, err)
        within &= bound is not None and err <= bound + 1
    return worst, within


def collective_cost(reps: int, n: int = 300) -> dict[str, float]:
    """µs per ``dist.all_reduce`` of one float on a gloo world of one: bare,
    under a pass-through TorchDispatchMode (the floor of any dispatch-mode
    recorder), and under ``ctl.record``; rounds interleaved, medians."""
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    import cutimeline as ctl

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.ones(1)

    def loop() -> float:
        t = time.perf_counter_ns()
        for _ in range(n):
            dist.all_reduce(x)
        return (time.perf_counter_ns() - t) / n / 1e3

    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=0,
                                world_size=1)
        try:
            loop()
            out: dict[str, list] = {"plain": [], "pass-through mode": [], "ctl.record": []}
            for _ in range(reps):
                out["plain"].append(loop())
                with PassThrough():
                    out["pass-through mode"].append(loop())
                with ctl.record(measure=False):
                    out["ctl.record"].append(loop())
        finally:
            dist.destroy_process_group()
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--ops", type=int, default=100_000, help="ops per rank")
    p.add_argument("--every", type=int, default=50, help="one collective every N ops")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("DIR", "WHAT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(*a.child)
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        truth = write_ranks(folder, a.ranks, a.ops, a.every)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        print(f"{a.ranks} ranks × {a.ops:,} ops ({a.ops // a.every:,} collectives each): "
              f"{size / 2 ** 20:.1f} MiB of rank files, written in "
              f"{time.perf_counter() - t:.1f} s")
        runs: dict[str, list] = {"load": [], "merge": []}
        for _ in range(a.reps):
            for what in runs:
                runs[what].append(run_child(folder, what))
    med = {w: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "peak_mib")}
           for w, rs in runs.items()}
    m = runs["merge"][-1]
    err, within = clock_error_ns(truth, m["clocks"])
    print(f"load only : {med['load']['wall_s']:.2f} s, peak +{med['load']['peak_mib']:.0f} MiB")
    print(f"merge     : {med['merge']['wall_s']:.2f} s, peak +{med['merge']['peak_mib']:.0f} MiB "
          f"({m['rows'] / med['merge']['wall_s'] / 1e6:.2f} M ops/s; merged ops+spans "
          f"{m['nbytes_mib']:.0f} MiB)")
    print(f"merge / load: {med['merge']['wall_s'] / med['load']['wall_s']:.2f}× time, "
          f"{med['merge']['peak_mib'] / max(med['load']['peak_mib'], 1):.2f}× memory")
    print(f"rank clocks: worst error {err / 1e3:.1f} µs against the truth, "
          f"{'all' if within else 'NOT all'} within their reported bounds "
          f"(median bound {statistics.median(c[3] for c in m['clocks'][1:]) / 1e3:.1f} µs)")
    print(f"(medians of {a.reps} runs, each in a fresh interpreter)")
    cost = collective_cost(max(a.reps, 5))
    print("recording a collective, µs per all_reduce (gloo, world of one): " +
          ", ".join(f"{k} {v:.0f}" for k, v in cost.items()) +
          f"; ctl.record − pass-through {cost['ctl.record'] - cost['pass-through mode']:.0f}")


if __name__ == "__main__":
    main()
