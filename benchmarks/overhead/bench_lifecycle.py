"""The recorder's footprint on the program it records: the memory a 10^6-span
recording holds with ``max_ops`` set and without, and a DataLoader epoch's
time with and without ``record()`` around it.

    python benchmarks/overhead/bench_lifecycle.py [--spans 1000000] [--max-ops 1000] [--reps 5]
                                         [--only memory|loader|parent] [--threads N]

Memory: each case is a fresh interpreter (``--child``) that records
``--spans`` user spans, each with its own name (``ctl.span(f"span {i}")``,
the worst case: a name is a string to intern), around no op, on the CPU,
and reports the Python heap's peak during the recording (tracemalloc) and
its peak resident memory above what it held just before (peak RSS − RSS
before, ``ru_maxrss``). "with max_ops" passes ``max_ops=--max-ops``; "no
max_ops" keeps the default (10^7, above the spans recorded). The peak RSS
of one run is a high-water mark, so each case runs in its own process.

DataLoader: an epoch is one pass over a ``DataLoader(num_workers=2,
batch_size=64)`` of a 4096-item CPU dataset whose items take a few torch
ops each (made in the workers), with a small step per batch (a matmul and
a sum) in the parent; workers are forked anew each epoch (the default),
so they are forked while recording. Beside it, the same epoch under a bare
pass-through ``TorchDispatchMode``, which the workers inherit (what the
recorder cost before it stepped aside in forked workers, ``forks.py``), and
under one that steps aside in forked workers as the recorder does: the
floor of any dispatch-mode recorder here (every op of the parent, the
batches' rebuilding and the DataLoader's ``record_function`` pair among
them, passes through Python). ``--reps`` rounds of one epoch of each case,
the order turning each round, after one warm-up epoch of each; medians of
the wall time, of the main thread's CPU time (``time.thread_time``: the
recorder's work in the parent, which wall time on a shared 2-core machine
buries in noise) and of the workers' (``RUSAGE_CHILDREN``, the workers
joined at the epoch's end). Goal: recorded ≤ 1.05× bare. ``--threads 1``
gives the parent one intra-op thread: with torch's default (2 here) the
step's ``x @ w`` keeps a second thread spinning on the core the workers
need, and on a machine shared with other work epochs then swing from 0.4 to
2.5 s (the same in every case, and so ratios of little meaning).

Parent (``--only parent``): the parent's side of that epoch alone, without
workers, in a fresh process with one intra-op thread: the same 581 ops
(64 fetches whose items are rebuilt with ``empty`` + ``set_`` as a worker's
batch is, the DataLoader's ``record_function`` pair, the step), timed by
the main thread's CPU clock, which the other processes of a shared machine
do not move: what the recorder costs the parent, set against a bare
pass-through mode (the floor of a dispatch-mode recorder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def child(spans: int, max_ops: int | None) -> dict:
    import tracemalloc
    import warnings

    import cutimeline as ctl
    with ctl.record(device="cpu", measure=False):  # torch's first-mode imports: not counted
        pass
    kwargs = {} if max_ops is None else {"max_ops": max_ops}
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one max_ops warning
        with ctl.record(device="cpu", measure=False, **kwargs) as rec:
            for i in range(spans):
                with ctl.span(f"span {i}"):
                    pass
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tl = rec.timeline
    return {"spans_kept": len(tl.spans), "strings": len(tl.strings),
            "truncated": tl.truncated, "heap_peak_mb": peak / 2 ** 20,
            "rss_peak_mb": max(rss - rss0, 0) / 1024, "seconds": seconds}


def memory(spans: int, max_ops: int) -> list[dict]:
    rows = []
    for label, cap in (("no max_ops", None), (f"max_ops={max_ops:,}", max_ops)):
        cmd = [sys.executable, __file__, "--child", "--spans", str(spans)]
        if cap is not None:
            cmd += ["--max-ops", str(cap)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append({"case": label, **json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def loader_epochs(reps: int, threads: int = 0) -> dict:
    import torch
    import torch.utils.data as tud

    import cutimeline as ctl
    if threads:  # the parent's intra-op threads (0: torch's default)
        torch.set_num_threads(threads)

    class Items(tud.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            x = torch.rand(32, generator=g)
            return torch.tanh(x * 2 - 1).clamp(-0.9, 0.9), i % 10

    from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode

    class Passing(TorchDispatchMode):
        """The floor of a dispatch-mode recorder, which forked workers inherit."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    aside: list = []  # the "parent mode" case's mode, popped in a forked child

    def step_aside() -> None:
        if aside:
            aside.clear()
            _pop_mode()
    os.register_at_fork(after_in_child=step_aside)
    w = torch.randn(32, 16)

    def epoch(case: str) -> tuple[float, float, float]:
        loader = tud.DataLoader(Items(), batch_size=64, num_workers=2,
                                multiprocessing_context="fork")
        c0, t0 = _children_cpu(), time.thread_time()
        w0 = time.perf_counter()
        if case == "recorded":
            with ctl.record(device="cpu", measure=False) as rec:
                for x, y in loader:
                    (x @ w).relu().sum()
                    rec.step()
        else:
            with Passing() if case in ("mode", "parent mode") else contextlib.nullcontext() as m:
                if case == "parent mode":
                    aside.append(m)
                for x, y in loader:
                    (x @ w).relu().sum()
                aside.clear()
        wall = time.perf_counter() - w0
        return wall, time.thread_time() - t0, _children_cpu() - c0

    cases = ["bare", "recorded", "mode", "parent mode"]
    for case in cases:  # warm-up: imports, the first mode
        epoch(case)
    runs: dict[str, list[tuple]] = {c: [] for c in cases}
    for i in range(reps):  # the order turns each round: none always runs first
        k = i % len(cases)
        for case in cases[k:] + cases[:k]:
            runs[case].append(epoch(case))
    out: dict = {}
    for c, v in runs.items():
        out[f"{c}_s"] = [r[0] for r in v]
        for j, what in enumerate(("median_s", "main_cpu_s", "workers_cpu_s")):
            out[f"{c}_{what}"] = statistics.median(r[j] for r in v)
    return {**out, "ratio": out["recorded_median_s"] / out["bare_median_s"],
            "mode_ratio": out["mode_median_s"] / out["bare_median_s"],
            "parent_mode_ratio": out["parent mode_median_s"] / out["bare_median_s"]}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--max-ops", type=int, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=("memory", "loader", "parent"), default=None)
    ap.add_argument("--threads", type=int, default=0,
                    help="the loader parent's intra-op threads (0: torch's default)")
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.spans, a.max_ops)))
        return
    if a.only in (None, "memory"):
        print_memory(a.spans, a.max_ops or 1000)
    if a.only in (None, "loader"):
        print_loader(a.reps, a.threads)
    if a.only in (None, "parent"):
        print_parent(max(a.reps, 15))


def parent_epochs(reps: int) -> dict[str, float]:
    """The parent's side of the epoch alone, in a fresh process, no worker:
    64 fetches from a map-style dataset whose items are made as the parent
    rebuilds a worker's batch (``empty`` + ``set_`` per tensor), each with
    the step's matmul and sum; one intra-op thread, so that the main
    thread's CPU time (medians of ``reps``) is the work and no spin-wait."""
    import torch
    import torch.utils.data as tud
    from torch.utils._python_dispatch import TorchDispatchMode

    import cutimeline as ctl
    torch.set_num_threads(1)
    x, y, w = torch.randn(64, 32), torch.arange(64), torch.randn(32, 16)

    class Batches(tud.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return [torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, t.shape,
                                                      t.stride()) for t in (x, y)]

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    from cutimeline.recording.measures.sources import internal_file

    def epoch(case: str) -> float:
        loader = tud.DataLoader(Batches(), batch_size=None)
        if "before" in case:  # as before the cache: each recording checks paths anew
            internal_file.cache_clear()
        t0 = time.thread_time()
        if case.startswith("record"):
            with ctl.record(device="cpu", measure=False, stack="stack" in case) as rec:
                for a, b in loader:
                    (a @ w).relu().sum()
                    rec.step()
        else:
            with Passing() if case == "mode" else contextlib.nullcontext():
                for a, b in loader:
                    (a @ w).relu().sum()
        return time.thread_time() - t0

    cases = ["bare", "mode", "record()", "record(), file checks uncached (before)",
             "record(stack=True)"]
    for case in cases:
        epoch(case)
    runs: dict[str, list[float]] = {c: [] for c in cases}
    for i in range(reps):
        k = i % len(cases)
        for case in cases[k:] + cases[:k]:
            runs[case].append(epoch(case))
    return {c: statistics.median(v) for c, v in runs.items()}


def print_parent(reps: int) -> None:
    cmd = [sys.executable, "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); "
           "import bench_lifecycle as b; print(json.dumps(b.parent_epochs(int(sys.argv[2]))))",
           os.path.dirname(os.path.abspath(__file__)), str(reps)]
    d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True)
                   .stdout.strip().splitlines()[-1])
    print(f"\nThe parent's side of that epoch alone (64 fetches, 581 ops, no worker), main "
          f"thread CPU, medians of {reps}:")
    print("| case | CPU per epoch | over bare |")
    print("|---|---|---|")
    for c, v in d.items():
        print(f"| {c} | {v * 1e3:.2f} ms | +{(v - d['bare']) * 1e3:.2f} ms |")


def print_memory(spans: int, cap: int) -> None:
    rows = memory(spans, cap)
    print(f"recording {spans:,} user spans (each its own name), CPU, fresh process each:")
    print("| case | spans kept | strings | truncated | Python heap peak | peak RSS above "
          "start | time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['spans_kept']:,} | {r['strings']:,} | {r['truncated']} | "
              f"{r['heap_peak_mb']:.2f} MB | {r['rss_peak_mb']:.1f} MB | {r['seconds']:.2f} s |")


def print_loader(reps: int, threads: int = 0) -> None:
    import torch
    d = loader_epochs(reps, threads)
    print(f"\nDataLoader epoch (num_workers=2, 4096 items, batch 64, fork; the parent with "
          f"{torch.get_num_threads()} intra-op threads), medians of {reps}:")
    print("| case | median | main thread CPU | workers' CPU | all |")
    print("|---|---|---|---|---|")
    for key, label in (("bare", "bare"), ("recorded", "record()"),
                       ("mode", "a pass-through TorchDispatchMode (workers inherit it)"),
                       ("parent mode", "the same mode, stepping aside in workers (floor)")):
        runs = ", ".join(f"{t:.3f}" for t in d[f"{key}_s"])
        print(f"| {label} | {d[f'{key}_median_s']:.3f} s | "
              f"{d[f'{key}_main_cpu_s'] * 1e3:.1f} ms | {d[f'{key}_workers_cpu_s'] * 1e3:.1f} ms "
              f"| {runs} |")
    print(f"recorded / bare: {d['ratio']:.3f}× (goal ≤ 1.05×); pass-through mode / bare: "
          f"{d['mode_ratio']:.3f}×; stepping-aside mode / bare: {d['parent_mode_ratio']:.3f}×")


if __name__ == "__main__":
    main()
