"""memory.py: the peak per device, who held it (last in, first out), and per
step the peak and bytes allocated, on a known allocation sequence."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables.memory import _held, peak, step_memory
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

# (op, module, allocated, freed since the previous row); 1000 bytes were in
# use before the recording began
SEQUENCE = [("aten::empty", "", 100, 0),           # step 0: 1100 in use
            ("aten::mm", "model.fc1", 400, 0),     # 1500
            ("aten::relu", "model.act", 400, 0),   # 1900
            ("aten::add", "model.out", 50, 400),   # step 1: 1550 (frees relu's)
            ("aten::mm", "model.fc2", 600, 0),     # 2150: the peak
            ("aten::sum", "", 0, 1000)]            # 1150
BEFORE = 1000
IN_USE = [1100, 1500, 1900, 1550, 2150, 1150]


def allocating(with_gpu=True, device=0, extra_device=False):
    """Six ops 10 µs apart, three per 30 µs step, each with the memory row
    of ``SEQUENCE``, and a kernel each (``with_gpu``)."""
    st = Strings()
    n = len(SEQUENCE)
    begin = 10_000 * (np.arange(n) + 1)
    ops = {"seq": np.arange(n), "thread": np.zeros(n),
           "name": [st.intern(r[0]) for r in SEQUENCE],
           "module": [st.intern(r[1]) if r[1] else NONE for r in SEQUENCE],
           "host_begin_ns": begin, "host_end_ns": begin + 1_000,
           "flags": np.full(n, int(OpFlag.LAUNCH)), "device": np.zeros(n), "stream": np.zeros(n)}
    mem = {"op": np.arange(n), "device": np.full(n, device), "host_ns": begin + 1_000,
           "allocated": [r[2] for r in SEQUENCE], "freed": [r[3] for r in SEQUENCE],
           "in_use": IN_USE}
    if extra_device:  # device 1: one reading of 64 bytes
        mem = {k: np.concatenate([v, [w]]) for k, v, w in zip(
            mem, mem.values(), (0, 1, begin[0] + 1_000, 64, 0, 64))}
    tables = {"ops": ops, "memory": mem,
              "spans": {"kind": [int(SpanKind.STEP)] * 2, "name": [st.intern("step")] * 2,
                        "begin_ns": [5_000, 35_000], "end_ns": [35_000, 65_000],
                        "number": [0, 1], "thread": [0, 0], "depth": [0, 0]}}
    if with_gpu:
        tables["gpu"] = {"op": np.arange(n), "device": np.zeros(n), "stream": np.zeros(n),
                         "name": [st.intern("k")] * n, "kind": [GpuKind.KERNEL] * n,
                         "launch_ns": begin, "begin_ns": begin + 2_000,
                         "end_ns": begin + 8_000}
    return Timeline(tables, st, {"aligned": True, "source": "handmade"})


def test_the_peak_and_who_held_it():
    tl = allocating()
    rep = ctl.analyze(tl)
    m = rep.memory()
    assert m["device"] == 0 and len(m["devices"]) == 1
    d = m["devices"][0]
    assert d["peak_bytes"] == 2150 and d["peak_ns"] == 51_000 and d["step"] == 1
    assert d["op"] == "aten::mm"
    # LIFO: relu's 400 bytes were the ones add's frees took; before + held = peak
    assert d["before_bytes"] == BEFORE
    assert d["holders"] == [{"op": "aten::mm", "module": "model.fc2", "bytes": 600},
                            {"op": "aten::mm", "module": "model.fc1", "bytes": 400},
                            {"op": "aten::empty", "module": "", "bytes": 100}]
    assert d["step_allocators"] == [
        {"op": "aten::mm", "module": "model.fc2", "bytes": 600},
        {"op": "aten::add", "module": "model.out", "bytes": 50}]
    line = [x for x in rep.summary().splitlines() if x.startswith("Memory")]
    assert line == [
        "Memory: peak 2.1 KiB on device 0 at step 1, 46 µs in, held by aten::mm in "
        "model.fc2 600 B, aten::mm in model.fc1 400 B, aten::empty 100 B, 1000 B from "
        "before the recording (newest freed first); step 1 allocated most in aten::mm in "
        "model.fc2 600 B, aten::add in model.out 50 B"]


def test_lifo_holders_add_up_to_the_peak():
    a = np.array([r[2] for r in SEQUENCE], np.int64)
    u = np.array(IN_USE, np.int64)
    held, before = _held(a, u, u - a, 4)
    assert held.tolist() == [100, 400, 0, 50, 600] and before == BEFORE
    assert before + held.sum() == u[4]


def _stack_reference(a, f, u0):
    """Memory as a stack, one byte run per allocation: the plain loop the
    vectorised ``_held`` must match at every row."""
    stack, base, out = [], u0, []
    for ai, fi in zip(a.tolist(), f.tolist()):
        while fi > 0 and stack:
            take = min(fi, stack[-1][1])
            stack[-1][1] -= take
            fi -= take
            if stack[-1][1] == 0:
                stack.pop()
        base -= min(fi, base)
        stack.append([len(out), ai])
        held = np.zeros(len(out) + 1, np.int64)
        for j, b in stack:
            held[j] += b
        out.append((held, base))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_held_matches_a_stack_walk(seed):
    rng = np.random.default_rng(seed)
    n = 60
    a = rng.integers(0, 1000, n) * (rng.random(n) < 0.7)
    u0 = int(rng.integers(0, 3000))
    f = np.zeros(n, np.int64)
    level = u0
    for i in range(n):  # frees never exceed what is in use
        f[i] = rng.integers(0, level + 1) if rng.random() < 0.5 else 0
        level += a[i] - f[i]
    u = u0 + np.cumsum(a - f)
    want = _stack_reference(a, f, u0)
    for p in range(n):
        held, before = _held(a, u, np.maximum(u - a, 0), p)
        assert held.tolist() == want[p][0].tolist() and before == want[p][1], p


def test_per_step_peak_and_allocated_bytes():
    rep = ctl.analyze(allocating())
    s = rep.steps
    # step 0: 1100, 1500, 1900; step 1 begins at 1900, peaks at 2150
    assert s["mem_peak_bytes"].tolist() == [1900, 2150]
    assert s["mem_allocated_bytes"].tolist() == [900, 650]
    assert rep.overall["mem_peak_bytes"] == 2150
    steps = rep.memory()["steps"]
    assert steps[["number", "peak_bytes", "allocated_bytes", "freed_bytes"]].tolist() == [
        (0, 1900, 900, 0), (1, 2150, 650, 1400)]
    # a window before the first reading knows nothing; one after the last
    # keeps the last level
    got = step_memory(allocating(), 0, [0, 70_000], [5_000, 90_000])
    assert got["peak_bytes"].tolist() == [NONE, 1150]
    assert got["allocated_bytes"].tolist() == [0, 0]


def test_a_window_finds_the_peak_inside_it():
    tl = allocating()
    d = peak(tl, 0, 0, 35_000)
    assert d["peak_bytes"] == 1900 and d["holders"][0] == {
        "op": "aten::mm", "module": "model.fc1", "bytes": 400}
    d = peak(tl, 0, 55_000, 70_000)  # after the peak: the level it began with
    assert d["peak_bytes"] == 2150 and d["peak_ns"] == 55_000
    assert peak(tl, 0, 0, 5_000) is None


def test_each_device_has_its_peak_and_host_only_timelines_report_memory():
    rep = ctl.analyze(allocating(with_gpu=False, extra_device=True))
    m = rep.memory()
    assert [(d["device"], d["peak_bytes"]) for d in m["devices"]] == [(0, 2150), (1, 64)]
    assert m["device"] == 0  # no primary GPU device: the highest reading
    assert sum(x.startswith("Memory: peak") for x in rep.summary().splitlines()) == 2
    assert rep.to_dict()["memory"]["devices"][1]["peak_bytes"] == 64


def test_without_a_memory_table_nothing_is_said():
    tl = allocating()
    plain = tl.replace(memory={})
    rep = ctl.analyze(plain)
    assert rep.memory() is None and "Memory" not in rep.summary()
    assert "mem_peak_bytes" not in rep.steps.dtype.names and "memory" not in rep.to_dict()
