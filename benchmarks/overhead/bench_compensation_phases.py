"""Where recording's cost goes in a training step, by phase, against what
the overhead replay removes there: the MLP and transformer steps of
``bench_compensation.py``, each phase (forward with the loss, zero_grad and
backward, optimizer step) timed by hand with and without the recorder.

    python benchmarks/overhead/bench_compensation_phases.py [--steps 20] [--rounds 5]

"added" is the recorded phase minus the uninstrumented one (medians over
steps, then over rounds); "removed" is what ``costs.costs`` prices
the recorder's work inside that phase at (ops, module hooks), the same
medians. If the model of its own cost were right, the two would match in
every phase.

A second table times what the recorder's mode adds to one tiny op
(``relu`` of 16 floats) when a buffer of the given size is read between
ops (``numpy.sum``), pushing the recorder's code and data out of the CPU
caches as a training step's kernels do: median per-op difference of 20
ops with and without the mode, median of 15 interleaved rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from bench_compensation import mlp_parts, transformer_parts

from cutimeline.analysis.replay.costs import costs
from cutimeline.recording.recorder import record

PHASES = ("forward", "backward", "optimizer")


def marked_step(parts):
    forward, opt = parts
    now = time.perf_counter_ns

    def step(marks: list) -> None:
        marks.append(now())
        loss = forward()
        marks.append(now())
        opt.zero_grad()
        loss.backward()
        marks.append(now())
        opt.step()
        marks.append(now())
    return step


def one_round(step, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """Per phase: plain and recorded median ns, the median removed there;
    and the ops of each phase in the last recorded step."""
    for _ in range(3):
        step([])
    plain = []
    for _ in range(steps):
        m: list = []
        step(m)
        plain.append(np.diff(m))
    marks = []
    with record(device="cpu", steps="manual") as rec:
        for _ in range(steps):
            m = []
            step(m)
            marks.append(m)
            rec.step()
    tl = rec.timeline
    t, c = costs(tl)
    removed = [[c[(t >= a) & (t < b)].sum() for a, b in zip(m[:-1], m[1:])] for m in marks]
    begin = tl.ops.host_begin_ns
    last = marks[-1]
    ops = [int(np.sum((begin >= a) & (begin < b))) for a, b in zip(last[:-1], last[1:])]
    return (np.median(plain, 0), np.median([np.diff(m) for m in marks], 0),
            np.median(removed, 0), ops)


def evicted(size_kb: int, rounds: int = 15, n: int = 20) -> float:
    """What the mode adds to a tiny op (ns) with ``size_kb`` read between ops."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    from cutimeline.recording.opstream import Mode
    from cutimeline.recording.session import Session
    s = Session(None, max_ops=2 ** 62, steps="manual")
    mode = Mode(s, s.writer())
    x, buf = torch.zeros(16), np.ones(size_kb * 128)
    now = time.perf_counter_ns

    def ops() -> float:
        d = []
        for _ in range(n):
            if size_kb:
                buf.sum()
            t0 = now()
            torch.relu(x)
            d.append(now() - t0)
        return statistics.median(d)
    diffs = []
    for _ in range(rounds):
        plain = ops()
        _push_mode(mode)
        try:
            diffs.append(ops() - plain)
        finally:
            _pop_mode()
            s.writers[0].ops.clear()
    return statistics.median(diffs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| workload | phase | ops | uninstrumented µs | recorded µs | added µs (per op) | "
          "removed µs (per op) | removed ÷ added |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, parts in (("mlp", mlp_parts), ("transformer", transformer_parts)):
        step = marked_step(parts())
        rounds = [one_round(step, args.steps) for _ in range(args.rounds)]
        plain, rec, removed = (np.median([r[k] for r in rounds], 0) / 1e3 for k in range(3))
        ops = rounds[-1][3]
        for k, phase in enumerate(PHASES):
            added = rec[k] - plain[k]
            print(f"| {name} | {phase} | {ops[k]} | {plain[k]:.0f} | {rec[k]:.0f} | "
                  f"{added:.0f} ({added / max(ops[k], 1):.1f}) | "
                  f"{removed[k]:.0f} ({removed[k] / max(ops[k], 1):.1f}) | "
                  f"{removed[k] / added:.2f} |", flush=True)
    print("\n| read between ops | the mode's cost per tiny op |\n|---:|---:|")
    for kb in (0, 256, 1024, 4096):
        print(f"| {kb} KB | {evicted(kb) / 1e3:.1f} µs |", flush=True)


if __name__ == "__main__":
    main()
