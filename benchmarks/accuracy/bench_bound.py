"""How often the aligner's reported bound holds, against simulated truth:
each Timeline aligned with its clock's stated read error
(``meta["clock_resolution_ns"]``, what recordings carry now) and without it
(the bound of the clock line alone, as before 2026-12-03), side by side.

    python benchmarks/accuracy/bench_bound.py [--runs 10]

Two sources: recordings of a small loop through ``SimGPU`` (0.5 µs clock
tick, float32 elapsed times, 80 ppm drift; the host's real timing), and
``sim.synthetic_events`` traces (4 streams, syncs every 300 ops, random
offset, drift and latencies). For each: the median ``bound_max_ns``, the
median over runs of the largest error of an aligned event time, the share
of events whose error is within the bound (+1 ns of rounding), and the
worst run's share.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

from cutimeline.alignment.aligner import align, event_host_ns
from cutimeline.devices.sim import SimGPU, synthetic_events
from cutimeline.recording.recorder import record


def recorded(seed: int):
    with record(device=SimGPU(seed=seed, drift_ppm=80.0)) as rec:
        x = torch.ones(64, 64, device="meta")
        for _ in range(50):
            x = (x @ x).relu_() / 64
        x.sum().item()
    tl = rec.timeline
    return tl.replace(meta={**tl.meta, "aligned": False}, clocks={})


def synthetic(seed: int):
    rng = np.random.default_rng(seed)
    return synthetic_events(3000, streams=4, seed=seed,
                            offset_ns=int(rng.integers(0, 2 * 10**9)),
                            drift_ppm=float(rng.uniform(-100, 100)),
                            launch_latency_ns=int(rng.integers(1000, 8000)),
                            sync_every=300, anchor_interval_ns=5_000_000)


def score(tl, stated: bool) -> tuple[float, float, float]:
    meta = tl.meta if stated else {**tl.meta, "clock_resolution_ns": {}}
    a = align(tl.replace(meta=meta))
    truth = a.truth.host_ns[np.argsort(a.truth.event)]
    err = np.abs(event_host_ns(a) - truth)
    bound = float(a.clocks.bound_max_ns[0])
    return bound, float(err.max()), float(np.mean(err <= bound + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    print("| source | read error stated | bound_max (median) | largest error (median) | "
          "events within the bound | worst run |")
    print("|---|---|---:|---:|---:|---:|")
    for name, make in (("SimGPU recording", recorded), ("synthetic_events", synthetic)):
        tls = [make(seed) for seed in range(args.runs)]
        for stated in (False, True):
            r = np.array([score(tl, stated) for tl in tls])
            print(f"| {name} | {'yes' if stated else 'no (before)'} | "
                  f"{statistics.median(r[:, 0]) / 1e3:.2f} µs | "
                  f"{statistics.median(r[:, 1]) / 1e3:.2f} µs | {100 * r[:, 2].mean():.1f} % | "
                  f"{100 * r[:, 2].min():.1f} % |", flush=True)


if __name__ == "__main__":
    main()
