"""timeline.py: the tables, their checks, slicing, windows, pandas and repr
(files: test_fileformat.py)."""


import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.timeline.schema import NONE, SCHEMA, GpuKind, SpanKind
from cutimeline.timeline.table import Strings, Table
from cutimeline.timeline.timeline import Timeline


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
    return Timeline(tables, s, {"source": "test", "aligned": True, "nested": {"a": [1, 2]}})


def assert_same(a: Timeline, b: Timeline):
    assert a.strings == b.strings
    assert a.meta == b.meta
    for name in SCHEMA:
        ta, tb = a.table(name), b.table(name)
        assert len(ta) == len(tb), name
        for col in ta.columns:
            assert ta[col].dtype == tb[col].dtype
            np.testing.assert_array_equal(ta[col], tb[col], err_msg=f"{name}.{col}")


def test_columns_are_read_only():
    tl = make_timeline()
    with pytest.raises(ValueError):
        tl.ops.host_begin_ns[0] = 0


def test_bad_construction_is_a_sentence():
    with pytest.raises(ctl.CutimelineError, match="no column 'bogus'"):
        Table("ops", {"bogus": [1]})
    with pytest.raises(ctl.CutimelineError, match="differ in length"):
        Table("ops", {"seq": [1, 2], "thread": [1]})
    with pytest.raises(ctl.CutimelineError, match="outside int16"):
        Table("ops", {"device": [70000]})
    with pytest.raises(ctl.CutimelineError, match="refers to rows outside"):
        Timeline({"gpu": {"op": [3]}})
    with pytest.raises(ctl.CutimelineError, match="string ids outside"):
        Timeline({"ops": {"name": [0]}})
    with pytest.raises(ctl.CutimelineError, match="no table"):
        Timeline({"kernels": {}})


def test_slice_by_step_renumbers_references():
    tl = make_timeline()
    part = tl.slice_steps(1)
    b, e = tl.step_bounds(1)
    assert len(part.ops) < len(tl.ops)
    assert np.all(part.ops.host_end_ns >= b) and np.all(part.ops.host_begin_ns < e)
    # every kept gpu row still points at the op that launched it
    kept = part.gpu.op >= 0
    np.testing.assert_array_equal(part.ops.seq[part.gpu.op[kept]],
                                  tl.ops.seq[tl.gpu.op][np.isin(tl.ops.seq[tl.gpu.op],
                                                                part.ops.seq[part.gpu.op[kept]])])
    ev = part.gpu.begin_event[part.gpu.begin_event >= 0]
    assert np.all(part.events.kind[ev] == 0)
    assert part.meta["window"] == [b, e]
    assert len(part.clocks) == 1


def test_window_forms():
    tl = make_timeline()
    assert tl.window_bounds(0) == tl.step_bounds(0)
    assert tl.window_bounds((0, 1)) == (tl.step_bounds(0)[0], tl.step_bounds(1)[1])
    assert tl.window_bounds(range(0, 2)) == tl.window_bounds((0, 1))
    t0 = tl.start_ns
    assert tl.window_bounds((0.0, 1e-6)) == (t0, t0 + 1000)
    with pytest.raises(ctl.CutimelineError, match="no step 7; it has steps 0–1"):
        tl.window_bounds(7)
    with pytest.raises(ctl.CutimelineError, match="not understood"):
        tl.window_bounds("soon")


def test_to_pandas_decodes_strings_and_kinds():
    pytest.importorskip("pandas")
    tl = make_timeline()
    df = tl.to_pandas("ops")
    assert set(df["name"]) <= {f"aten::op{i}" for i in range(5)}
    assert set(df["grad_fn"]) == {"", "AddBackward0"}
    assert list(tl.to_pandas("spans")["kind"]) == ["step", "step", "user"]


def test_repr_is_useful():
    r = repr(make_timeline())
    assert "50 ops" in r and "50 gpu rows on 1 stream" in r and "2 steps" in r
    assert "±0.4 µs" in r
