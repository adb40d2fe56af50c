"""The recorder's footprint on the program it records: the memory a 10^6-span
recording holds with ``max_ops`` set and without, and a DataLoader epoch's
time with and without ``record()`` around it.

    python benchmarks/bench_lifecycle.py [--spans 1000000] [--max-ops 1000] [--reps 5]
                                         [--only memory|loader]

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
recorder cost before it stepped aside in forked workers, ``forks.py``).
``--reps`` rounds of one epoch of each case, the order turning each round,
after one warm-up epoch of each; medians. Goal: recorded ≤ 1.05× bare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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


def loader_epochs(reps: int) -> dict:
    import torch
    import torch.utils.data as tud

    import cutimeline as ctl

    class Items(tud.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            x = torch.rand(32, generator=g)
            return torch.tanh(x * 2 - 1).clamp(-0.9, 0.9), i % 10

    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        """The floor of a dispatch-mode recorder, which forked workers inherit."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    w = torch.randn(32, 16)

    def epoch(case: str) -> float:
        loader = tud.DataLoader(Items(), batch_size=64, num_workers=2,
                                multiprocessing_context="fork")
        t0 = time.perf_counter()
        if case == "recorded":
            with ctl.record(device="cpu", measure=False) as rec:
                for x, y in loader:
                    (x @ w).relu().sum()
                    rec.step()
        else:
            with Passing() if case == "mode" else contextlib.nullcontext():
                for x, y in loader:
                    (x @ w).relu().sum()
        return time.perf_counter() - t0

    cases = ["bare", "recorded", "mode"]
    for case in cases:  # warm-up: imports, the first mode
        epoch(case)
    runs: dict[str, list[float]] = {c: [] for c in cases}
    for i in range(reps):  # the order turns each round: none always runs first
        for case in cases[i % 3:] + cases[:i % 3]:
            runs[case].append(epoch(case))
    med = {c: statistics.median(v) for c, v in runs.items()}
    return {**{f"{c}_s": v for c, v in runs.items()},
            **{f"{c}_median_s": m for c, m in med.items()},
            "ratio": med["recorded"] / med["bare"], "mode_ratio": med["mode"] / med["bare"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--max-ops", type=int, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=("memory", "loader"), default=None)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.spans, a.max_ops)))
        return
    if a.only != "loader":
        print_memory(a.spans, a.max_ops or 1000)
    if a.only != "memory":
        print_loader(a.reps)


def print_memory(spans: int, cap: int) -> None:
    rows = memory(spans, cap)
    print(f"recording {spans:,} user spans (each its own name), CPU, fresh process each:")
    print("| case | spans kept | strings | truncated | Python heap peak | peak RSS above "
          "start | time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['spans_kept']:,} | {r['strings']:,} | {r['truncated']} | "
              f"{r['heap_peak_mb']:.2f} MB | {r['rss_peak_mb']:.1f} MB | {r['seconds']:.2f} s |")


def print_loader(reps: int) -> None:
    d = loader_epochs(reps)
    print(f"\nDataLoader epoch (num_workers=2, 4096 items, batch 64, fork), medians of "
          f"{reps}:")
    print("| case | median | all |")
    print("|---|---|---|")
    for key, label in (("bare", "bare"), ("recorded", "record()"),
                       ("mode", "a pass-through TorchDispatchMode (workers inherit it)")):
        runs = ", ".join(f"{t:.3f}" for t in d[f"{key}_s"])
        print(f"| {label} | {d[f'{key}_median_s']:.3f} s | {runs} |")
    print(f"recorded / bare: {d['ratio']:.3f}× (goal ≤ 1.05×); pass-through mode / bare: "
          f"{d['mode_ratio']:.3f}×")


if __name__ == "__main__":
    main()
