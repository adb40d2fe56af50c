"""Verdicts on the shared real torch.profiler traces, beside HolisticTraceAnalysis.

    python benchmarks/traces/bench_traces.py [--traces DIR]

For each trace under ``../shared/traces/kineto`` (recorded on real GPUs by
others): the run's verdict over its steady steps with its share and
runner-up, GPU busy, the idle time by cause, and our HTA-compatible
temporal breakdown beside the numbers HTA 0.5.0 printed on the same file
(from the traces' README, where it lists them). Prints a Markdown table
for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import time

import cutimeline as ctl
from cutimeline.analysis.idle.gaps import CAUSES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT = os.path.join(os.path.dirname(ROOT), "shared", "traces", "kineto")

TRACES = {  # short name -> (path under the kineto folder, HTA's idle/compute/non-compute %)
    "nccl_data (DDP CNN, A100)": ("nccl_parser_config/nccl_data.json.gz", (77.78, 17.26, 4.97)),
    "sampled rank 0 (recsys, 5 streams)": ("trace_filter/sampled_rank-0.json.gz",
                                           (53.56, 17.71, 28.74)),
    "sampled rank 1": ("trace_filter/sampled_rank-1.json.gz", (54.72, 22.57, 22.72)),
    "alexnet (benchmark, no steps)": (
        "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        (99.49, 0.08, 0.43)),
    "cuda_event_sync": ("critical_path/cuda_event_sync/event_sync_trace.json.gz", None),
    "event_sync multi-stream": (
        "critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz", None),
    "triton_example": ("triton_example/triton_example.json.gz", None),
    "ROCm mi250 toy": ("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", None),
}


def one(path: str) -> dict:
    t0 = time.perf_counter()
    rep = ctl.analyze(ctl.load(path))
    head = rep.summary().splitlines()[0]
    d = rep.devices[rep.primary] if len(rep.devices) else None
    o = rep.overall
    idle = {c: int(o[f"{c}_ns"]) for c in CAUSES}
    total = sum(idle.values()) or 1
    h = rep.hta["temporal_breakdown"] if rep.hta else None
    return {"verdict": head.removeprefix("Verdict: ").split(" (")[0].split(". Most")[0],
            "steps": len(rep.steps), "busy": None if d is None else float(d["busy_frac"]),
            "idle": {c: v / total for c, v in idle.items() if v},
            "hta": None if h is None else (h["idle_pct"], h["compute_pct"],
                                           h["non_compute_pct"]),
            "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=DEFAULT)
    args = ap.parse_args()
    print("| trace | steps | cutimeline verdict (steady steps) | GPU busy | idle by cause "
          "| ours: idle / compute / non-compute % | HTA 0.5.0 |")
    print("|---|---|---|---|---|---|---|")
    for name, (rel, peer) in TRACES.items():
        path = os.path.join(args.traces, rel)
        if not os.path.exists(path):
            print(f"| {name} | missing: {path} |")
            continue
        r = one(path)
        idle = ", ".join(f"{c} {v:.0%}" for c, v in sorted(r["idle"].items(),
                                                           key=lambda kv: -kv[1]))
        ours = "—" if r["hta"] is None else " / ".join(f"{v:.2f}" for v in r["hta"])
        theirs = "—" if peer is None else " / ".join(f"{v:.2f}" for v in peer)
        busy = "—" if r["busy"] is None else f"{r['busy']:.0%}"
        print(f"| {name} | {r['steps']} | {r['verdict']} | {busy} | {idle} | {ours} "
              f"| {theirs} |")


if __name__ == "__main__":
    main()
