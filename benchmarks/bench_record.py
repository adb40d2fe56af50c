"""Recording overhead per op on a tiny-op CPU workload, side by side in one run.

    python benchmarks/bench_record.py [--ops 2000] [--reps 15]

Five ways to run the same loop of tiny CPU ops (``add``, ``mul``, ``relu``,
``sum`` on 16-element tensors; the ops where dispatch dominates): nothing;
a bare pass-through TorchDispatchMode (this design's floor); cutimeline's
recorder; its previous per-op path (``Before``, to see a change side by
side); torch.profiler with ``record_shapes=True``. The variants are
interleaved round by round so drift on a shared machine hits them alike;
each figure is the median over rounds of µs per op. Also: bytes per op of
the saved .ctl file beside torch.profiler's Kineto JSON of the same ops, and
the Python memory held per op while recording (tracemalloc).
"""

from __future__ import annotations

import argparse
import gzip
import operator
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl
from cutimeline.recording.opstream import (_TRUNCATED, _VIEW, NONE, Mode, _ident, _node, _now,
                                           _Tensor)
from cutimeline.recording.session import Session
from cutimeline.recording.signatures import _COLL

_META = operator.attrgetter("dtype", "shape", "device")


class Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Before(Mode):
    """The op stream's per-op path before this round of savings (three
    metadata reads per tensor, ``func(...)`` through ``OpOverload.__call__``,
    try/finally), kept here to be timed beside the current one."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        s = self.s
        if s.off:
            return func(*args, **kwargs)
        t0 = _now()
        seq = next(self.count)
        # id(func): OpOverload hashes in Python; the signature keeps func alive.
        # One C call reads a tensor's (dtype, shape, device): cheaper than three.
        key = [id(func)]
        for a in args:
            if isinstance(a, _Tensor):
                key.append(_META(a))
            elif type(a) is list or type(a) is tuple:
                for b in a:
                    if isinstance(b, _Tensor):
                        key.append(_META(b))
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, _Tensor):
                    key.append(_META(a))
        if len(key) > 1:
            dev = key[1][2]
        else:  # a factory: its device is an argument
            dev = kwargs.get("device")
            key.append(dev)
        key = tuple(key)
        try:
            sid, flags, rule, _ = self.sigs.get(key) or s.signature(key, func, dev, args,
                                                                    kwargs)
        except TypeError:  # symbolic shapes do not hash: key them by text
            key = tuple((k[0], tuple(map(str, k[1])), k[2]) if type(k) is tuple else k
                        for k in key)
            sid, flags, rule, _ = self.sigs.get(key) or s.signature(key, func, dev, args,
                                                                    kwargs)
        w = self.w
        gid = NONE
        if s.backward:  # only then can an autograd node be running
            node = _node()
            if node is not None:
                gid = s.nodes.get(type(node))
                if gid is None:
                    gid = s.node(node)
                if _ident() != self.ident:  # an autograd engine device thread
                    w = s.writer()
        if seq >= s.max_ops:
            if seq > s.max_ops:
                return func(*args, **kwargs)
            s.truncate()
            flags |= _TRUNCATED
        if rule >= _COLL:
            return s.collective(w, func, args, kwargs, seq, t0, sid, gid, flags, dev)
        if s.device is None or flags & (_VIEW | _TRUNCATED) or dev is None:
            pass
        elif rule:
            return s.launch_ruled(w, func, args, kwargs, seq, t0, sid, gid, flags,
                                  rule, dev)
        elif not (w.data and dev.type == "cpu") and s.device.owns(dev):
            return s.launch(w, func, args, kwargs, seq, t0, sid, gid, flags, False)
        try:
            out = func(*args, **kwargs)
        finally:
            w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
        return out


def workload(n_ops: int) -> None:
    x = torch.ones(16)
    y = torch.full((16,), 2.0)
    for _ in range(n_ops // 4):
        z = torch.add(x, y)
        z = torch.mul(z, y)
        z = torch.relu(z)
        z = torch.sum(z)


def timed(run, n_ops: int) -> float:
    t0 = time.perf_counter_ns()
    run(n_ops)
    return (time.perf_counter_ns() - t0) / n_ops / 1e3


def variants(n_ops: int) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile
    out = {"nothing": timed(workload, n_ops)}
    with Bare():
        out["bare mode"] = timed(workload, n_ops)
    with ctl.record(device="cpu", measure=False):
        out["cutimeline"] = timed(workload, n_ops)
    before = Session(None, max_ops=2 ** 62, steps="manual")
    with Before(before, before.writer()):
        out["cutimeline before"] = timed(workload, n_ops)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
        out["torch.profiler"] = timed(workload, n_ops)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000, help="ops per round")
    ap.add_argument("--reps", type=int, default=15, help="rounds (medians over them)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    variants(a.ops)  # warm-up
    rounds = [variants(a.ops) for _ in range(a.reps)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    low = {k: min(r[k] for r in rounds) for k in rounds[0]}
    print(f"# {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"# {a.ops} ops x {a.reps} rounds; µs/op, median (and fastest) round")
    for k, v in med.items():
        print(f"{k:16s} {v:8.2f} ({low[k]:6.2f}) µs/op   x{v / med['nothing']:5.2f} vs nothing")
    print(f"before - bare mode: {med['cutimeline before'] - med['bare mode']:+.2f} µs/op "
          f"({low['cutimeline before'] - low['bare mode']:+.2f} fastest)")
    print(f"cutimeline - bare mode: {med['cutimeline'] - med['bare mode']:+.2f} µs/op "
          f"({low['cutimeline'] - low['bare mode']:+.2f} fastest; goal ≤ +1.5); "
          f"cutimeline / torch.profiler: {med['cutimeline'] / med['torch.profiler']:.2f}")

    n = 20000
    tracemalloc.start()
    with ctl.record(device="cpu", measure=False) as rec:
        base = tracemalloc.get_traced_memory()[0]
        workload(n)
        held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    tl = rec.timeline
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        workload(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.ctl")
        tl.save(path)
        size = os.path.getsize(path)
        kineto = os.path.join(d, "run.json")
        prof.export_chrome_trace(kineto)
        with open(kineto, "rb") as f:
            raw = f.read()
    per = len(tl.ops)
    print(f"memory while recording: {held / per:.0f} B/op ({per} ops, tracemalloc)")
    print(f"file: {size / per:.1f} B/op on disk (.ctl, goal ≤ 40); torch.profiler's "
          f"Kineto JSON of the same ops: {len(raw) / per:.0f} B/op, "
          f"{len(gzip.compress(raw)) / per:.0f} B/op gzipped")


if __name__ == "__main__":
    sys.exit(main())
