"""Hand-built Timelines with known answers, for the analysis tests."""

from __future__ import annotations

import numpy as np

from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline


def timeline(gpu=(), spans=(), syncs=(), ops=None, meta=None, steps=()):
    """gpu: (stream, launch, begin, end[, name[, device]]) — each gets an op
    from launch−1 to launch+1 unless ``ops`` is given as (name, begin, end,
    flags) tuples (then gpu row i belongs to op i); spans: (kind, name,
    begin, end); steps: (number, begin, end); syncs: (begin, end[, stream])."""
    st = Strings()
    gpu = [tuple(r) + (f"k{i}",) * (len(r) < 5) for i, r in enumerate(gpu)]
    gpu = [r + (0,) * (len(r) < 6) for r in gpu]
    if ops is None:
        ops = [(r[4], r[1] - 1, r[1] + 1, OpFlag.LAUNCH) for r in gpu]
    o = {"seq": np.arange(len(ops)), "thread": np.zeros(len(ops)),
         "name": [st.intern(n) for n, *_ in ops],
         "host_begin_ns": [b for _, b, _, _ in ops],
         "host_end_ns": [e for _, _, e, _ in ops],
         "flags": [int(f) for *_, f in ops],
         "device": [0] * len(ops), "stream": [0] * len(ops)}
    g = {"op": np.arange(len(gpu)) if len(gpu) <= len(ops) else np.full(len(gpu), NONE),
         "stream": [r[0] for r in gpu], "launch_ns": [r[1] for r in gpu],
         "begin_ns": [r[2] for r in gpu], "end_ns": [r[3] for r in gpu],
         "name": [st.intern(r[4]) for r in gpu], "device": [r[5] for r in gpu],
         "kind": [GpuKind.KERNEL] * len(gpu)}
    sp = [(int(k), st.intern(n), b, e, NONE) for k, n, b, e in spans] + \
        [(int(SpanKind.STEP), st.intern("step"), b, e, n) for n, b, e in steps]
    s = {"kind": [r[0] for r in sp], "name": [r[1] for r in sp],
         "begin_ns": [r[2] for r in sp], "end_ns": [r[3] for r in sp],
         "number": [r[4] for r in sp], "thread": [0] * len(sp), "depth": [0] * len(sp)}
    y = {"host_begin_ns": [r[0] for r in syncs], "host_end_ns": [r[1] for r in syncs],
         "stream": [r[2] if len(r) > 2 else NONE for r in syncs],
         "device": [0] * len(syncs), "kind": [st.intern("sync")] * len(syncs)}
    return Timeline({"ops": o, "gpu": g, "spans": s, "syncs": y}, st,
                    {"aligned": True, "source": "handmade", **(meta or {})})


def random_timeline(seed: int, n: int = 300, streams: int = 2, steps: int = 5):
    """A random multi-stream Timeline with data spans, syncs and steps."""
    rng = np.random.default_rng(seed)
    t = 1_000_000
    free = [0] * streams
    rows, spans, syncs, step_rows = [], [], [], []
    per_step = n // steps
    for k in range(steps):
        t0 = t
        if rng.random() < 0.7:  # a data fetch opens most steps
            d = int(rng.integers(1_000, 40_000))
            spans.append((SpanKind.DATA, "next(DataLoader)", t, t + d))
            t += d
        for _ in range(per_step):
            t += int(rng.integers(200, 9_000))
            s = int(rng.integers(0, streams))
            launch = t
            begin = max(free[s], launch + int(rng.integers(500, 3_000)))
            if rng.random() < 0.1:  # waits on another stream
                begin = max(begin, max(free) + int(rng.integers(0, 5_000)))
            end = begin + int(rng.integers(0, 12_000))
            free[s] = end
            rows.append((s, launch, begin, end, f"op{int(rng.integers(0, 6))}"))
            if rng.random() < 0.03:  # a sync on it
                syncs.append((t + 100, max(end, t + 100) + 700, s))
                t = max(end, t + 100) + 700
        t += int(rng.integers(0, 20_000))
        step_rows.append((k, t0, t))
    return timeline(rows, spans, syncs, steps=step_rows,
                    meta={"overhead_ns_per_op": 300, "overhead_ns_per_launch": 100})
