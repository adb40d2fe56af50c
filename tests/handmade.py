"""Hand-built Timelines with known answers, for the analysis tests; one
with every table filled, and the check that two Timelines are the same, for
the store's tests; a small CPU training step (``mlp_step``) for the
comparison's tests."""

from __future__ import annotations

import numpy as np
import torch

from cutimeline.timeline.schema import NONE, SCHEMA, GpuKind, OpFlag, SpanKind
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


def make_timeline(n=50, seed=0, extras=True):
    """A small hand-built Timeline with every table filled (``extras=False``:
    those of format 3 only, as tests/data/ctl/v3.ctl was written from)."""
    rng = np.random.default_rng(seed)
    s = Strings()
    names = [s.intern(f"aten::op{i}") for i in range(5)]
    begin = np.cumsum(rng.integers(1_000, 5_000, n)).astype(np.int64) + 10**12
    end = begin + rng.integers(100, 900, n)
    ops = dict(seq=np.arange(n), thread=np.zeros(n), name=rng.choice(names, n),
               shapes=np.full(n, s.intern("f32[4, 4]")), module=np.full(n, NONE),
               grad_fn=np.where(np.arange(n) > n // 2, s.intern("AddBackward0"), NONE),
               device=np.zeros(n), stream=np.full(n, 7), flags=np.full(n, 8),
               depth=np.zeros(n), host_begin_ns=begin, host_end_ns=end)
    ev = dict(device=np.zeros(2 * n), stream=np.full(2 * n, 7),
              kind=np.tile([0, 1], n), op=np.repeat(np.arange(n), 2),
              raw_ns=np.sort(rng.integers(0, 10**9, 2 * n)),
              host_record_ns=np.stack([begin, end], 1).reshape(-1))
    gpu = dict(op=np.arange(n), device=np.zeros(n), stream=np.full(n, 7),
               name=ops["name"], kind=np.full(n, GpuKind.OP),
               begin_event=np.arange(0, 2 * n, 2), end_event=np.arange(1, 2 * n, 2),
               launch_ns=begin, begin_ns=begin + 3000, end_ns=end + 4000)
    syncs = dict(op=[n - 1], kind=[s.intern("item")], device=[0], stream=[7],
                 last_event=[2 * n - 2], host_begin_ns=[begin[-1]], host_end_ns=[end[-1]],
                 thread=[0])
    half = begin[n // 2]
    spans = dict(kind=[SpanKind.STEP, SpanKind.STEP, SpanKind.USER],
                 name=[s.intern("step 0"), s.intern("step 1"), s.intern("eval")],
                 thread=[0, 0, 0], depth=[0, 0, 1], number=[0, 1, NONE],
                 begin_ns=[begin[0], half, begin[3]], end_ns=[half, end[-1], end[5]])
    clocks = dict(device=[0], ref_raw_ns=[0], offset_ns=[10**12], slope=[1.00005],
                  bound_ns=[250.0], bound_max_ns=[400.0], relax_ns=[0.0],
                  n_lower=[2 * n], n_upper=[1], ping_offset_ns=[10**12 + 30])
    truth = dict(event=np.arange(2 * n), host_ns=ev["host_record_ns"] + 2000)
    tables = dict(ops=ops, events=ev, gpu=gpu, syncs=syncs, spans=spans,
                  clocks=clocks, truth=truth)
    if extras:
        line = s.intern("loss.item()")
        tables["sources"] = dict(op=[n - 1, NONE], span=[NONE, 2],
                                 file=[s.intern("train.py")] * 2, line=[57, 12],
                                 function=[s.intern("main")] * 2, code=[line, NONE])
        m = np.arange(0, n, 5)
        tables["memory"] = dict(op=m, device=np.zeros(len(m)), host_ns=end[m],
                                allocated=(m + 1) * 4096, freed=m * 1024,
                                in_use=np.cumsum((m + 1) * 4096 - m * 1024))
        tables["flops"] = dict(op=m, flops=m * 2.0e6)
        c = np.arange(2, n, 7)  # all-reduces on group 0, a broadcast from rank 1 on group 1
        tables["collectives"] = dict(
            op=c, group=np.arange(len(c)) % 2, kind=np.arange(len(c)) % 2,
            number=np.arange(len(c)) // 2, peer=np.where(np.arange(len(c)) % 2, 1, NONE),
            done_ns=np.where(np.arange(len(c)) == 1, NONE, end[c] - 50))
    meta = {"source": "test", "aligned": True, "nested": {"a": [1, 2]}}
    if extras:
        meta["groups"] = [{"name": "0", "ranks": [0, 1], "backend": "gloo"},
                          {"name": "1", "ranks": [1, 0], "backend": "gloo"}]
    return Timeline(tables, s, meta)


def assert_same(a: Timeline, b: Timeline):
    assert a.strings == b.strings
    assert a.meta == b.meta
    for name in SCHEMA:
        ta, tb = a.table(name), b.table(name)
        assert len(ta) == len(tb), name
        for col in ta.columns:
            assert ta[col].dtype == tb[col].dtype
            np.testing.assert_array_equal(ta[col], tb[col], err_msg=f"{name}.{col}")


def mlp_step():
    """A step of a small MLP with Adam on CPU tensors (a fixed seed)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return step
