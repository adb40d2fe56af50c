"""timeline.py: the tables, their checks, slicing, windows, pandas and repr
(files: ctlfile/test_fileformat.py)."""


import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.timeline.table import Table

from handmade import make_timeline
from cutimeline.timeline.timeline import Timeline


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


def test_keep_rows_drops_what_refers_to_dropped_rows_and_renumbers_the_rest():
    # the comparison runner dropped spans with Table.take, leaving the
    # sources of a SimGPU's sync spans pointing past the spans table
    import torch
    from cutimeline.errors import CutimelineError
    from cutimeline.timeline.schema import SpanKind
    gpu = ctl.SimGPU()
    x = torch.randn(8, 8, device="meta")
    with ctl.record(device=gpu, measure=False) as rec:
        for _ in range(3):
            x @ x
            gpu.synchronize()
    tl = rec.timeline
    sync = np.asarray(tl.spans.kind) == SpanKind.SYNC
    assert sync.sum() == 3 and (tl.sources.span >= 0).sum() == 3
    first = np.flatnonzero(sync)[0]
    kept = tl.keep_rows(spans=np.arange(len(tl.spans)) != first)
    assert len(kept.spans) == len(tl.spans) - 1
    assert (kept.sources.span >= 0).sum() == 2
    assert (np.asarray(kept.spans.kind)[kept.sources.span[kept.sources.span >= 0]]
            == SpanKind.SYNC).all()
    assert len(kept.ops) == len(tl.ops)
    with pytest.raises(CutimelineError, match="no table 'span'"):
        tl.keep_rows(span=sync)
    with pytest.raises(CutimelineError, match="one bool per row"):
        tl.keep_rows(spans=sync[:-1])
