"""formats/kineto/extra.py: torch.profiler's with_flops, profile_memory and
with_stack output read into the tables flops, memory and sources.

Each trace here is hand-made in the shape torch.profiler writes (the
[memory] and python_function events copied in form from a trace of torch
2.13 with profile_memory=True and with_stack=True), so every row is known.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kineto import kernel, op, runtime, write_trace

from cutimeline.formats.kineto import import_chrome
from cutimeline.formats.kineto.extra import user_frame
from cutimeline.timeline.schema import NONE, OpFlag


def memory(ts, size, total, device=0, kind=1, tid=1, **extra):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": 1, "tid": tid, "ts": ts,
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": size,
                     "Device Id": device, "Device Type": kind, "Addr": 94896715413504,
                     **extra}}


def frame(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid,
            "ts": ts, "dur": dur, "args": {"Python parent id": None, "Python id": 1}}


def with_args(event, **args):
    event["args"].update(args)
    return event


def test_flops_args_become_rows_of_their_ops(tmp_path):
    path = write_trace(tmp_path / "f.json", [
        with_args(op("aten::mm", 30, 5), flops=2 * 64**3),
        with_args(op("aten::addmm", 10, 5), flops=1.5e9),
        with_args(op("aten::relu", 20, 5), flops=0),
        with_args(op("aten::bad", 40, 5), flops="many"),
        op("aten::add", 50, 5), kernel("k", 60, 1, corr=1)])
    tl = import_chrome(path)
    names = tl.decode(tl.ops["name"])
    assert names.tolist() == ["aten::addmm", "aten::relu", "aten::mm", "aten::bad",
                              "aten::add"]
    assert tl.flops.op.tolist() == [0, 2]   # the op rows, in time order
    assert tl.flops.flops.tolist() == [1.5e9, 2.0 * 64**3]


def test_gpu_memory_events_become_rows_on_the_op_that_holds_them(tmp_path):
    path = write_trace(tmp_path / "m.json", [
        op("aten::empty", 10, 10), op("aten::mm", 30, 20), op("aten::inner", 35, 5),
        memory(12, 4096, 4096),                    # in aten::empty
        memory(36, 1 << 20, (1 << 20) + 4096),     # in aten::inner, inside aten::mm
        memory(50, -4096, 1 << 20),                # at aten::mm's last instant: its
        memory(60, -(1 << 20), 0, device=1),       # after every op: NONE; device 1
        memory(37, 999, 999, kind=0, device=-1),   # the CPU's: not read
        memory(38, 512, 512, tid=2),               # a thread without ops
        memory(39, "x", 1, device=0),              # damaged
        kernel("k", 70, 1, corr=1)])
    tl = import_chrome(path)
    m = tl.memory
    names = tl.decode(tl.ops["name"])
    assert [names[i] if i != NONE else None for i in m.op] == \
        ["aten::empty", "aten::inner", None, "aten::mm", None]
    assert m.host_ns.tolist() == [12_000, 36_000, 38_000, 50_000, 60_000]
    assert m.device.tolist() == [0, 0, 0, 0, 1]
    assert m.allocated.tolist() == [4096, 1 << 20, 512, 0, 0]
    assert m.freed.tolist() == [0, 0, 0, 4096, 1 << 20]
    assert m.in_use.tolist() == [4096, (1 << 20) + 4096, 512, 1 << 20, 0]
    assert any("1 GPU [memory] events" in w for w in tl.meta["import_warnings"])


def test_a_sync_op_gets_the_innermost_user_python_frame(tmp_path):
    """aten::item under torch's frames under the user's: the user's frame
    (its line as python_function names it); ops that do not wait get none."""
    path = write_trace(tmp_path / "s.json", [
        frame("train.py(9): <module>", 0, 1000),
        frame("train.py(40): step", 100, 800),
        frame("torch/nn/modules/module.py(1501): _call_impl", 150, 100),
        op("aten::mm", 160, 20),
        frame("<built-in method item of Tensor object at 0x7f>", 500, 60),
        op("aten::item", 510, 40), op("aten::_local_scalar_dense", 520, 20),
        frame("other.py(3): g", 0, 50, tid=2), op("aten::item", 900, 10, tid=2),
        op("aten::item", 10, 5, tid=2),
        kernel("k", 600, 1, corr=1)])
    tl = import_chrome(path)
    s = tl.sources
    names = tl.decode(tl.ops["name"])
    got = {(names[o], int(tl.ops.host_begin_ns[o]) // 1000): (f, line, fn)
           for o, f, line, fn in zip(s.op, tl.decode(s.file), s.line, tl.decode(s.function))}
    assert got == {("aten::item", 510): ("train.py", 40, "step"),
                   ("aten::_local_scalar_dense", 520): ("train.py", 40, "step"),
                   ("aten::item", 10): ("other.py", 3, "g")}   # tid 2 at 900: no frame
    assert (s.span == NONE).all() and (s.code == NONE).all()


def test_a_call_stack_arg_names_the_line_and_cuda_syncs_flag_the_op(tmp_path):
    """Older torch's "Call stack" (innermost first) beats python_function;
    an op that a cuda_sync event lies in is a sync op whatever its name."""
    wait = {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
            "ts": 205, "dur": 30, "args": {"correlation": 9, "device": 0, "stream": 7}}
    path = write_trace(tmp_path / "c.json", [
        frame("train.py(40): step", 0, 1000),
        with_args(op("aten::item", 100, 50),
                  **{"Call stack": "torch/_tensor.py(12): item;train.py(57): step;"
                                   "train.py(90): <module>"}),
        op("aten::copy_", 200, 50), runtime("cudaStreamSynchronize", 205, 9), wait,
        kernel("k", 300, 1, corr=1)])
    tl = import_chrome(path)
    names = tl.decode(tl.ops["name"])
    assert tl.ops.flags[names.tolist().index("aten::copy_")] & OpFlag.SYNC
    s = tl.sources
    assert [(names[o], f, int(line)) for o, f, line in
            zip(s.op, tl.decode(s.file), s.line)] == [("aten::item", "train.py", 57),
                                                       ("aten::copy_", "train.py", 40)]


@pytest.mark.parametrize("text, want", [
    ("train.py(57): main", ("train.py", 57, "main")),
    ("/home/me/run (2).py(8): <module>", ("/home/me/run (2).py", 8, "<module>")),
    ("torch/nn/modules/module.py(1501): _call_impl", None),
    ("/usr/lib/python3/site-packages/cutimeline/recording/recorder.py(3): f", None),
    ("<built-in method item of Tensor object at 0x7f>", None),
    ("no frame here", None),
])
def test_user_frame(text, want):
    assert user_frame(text) == want


def test_a_trace_without_extras_has_empty_tables(tmp_path):
    path = write_trace(tmp_path / "p.json", [op("aten::item", 1, 1), kernel("k", 3, 1, 1)])
    tl = import_chrome(path)
    assert len(tl.flops) == len(tl.memory) == len(tl.sources) == 0
    assert np.array_equal(tl.ops.flags, [0])
