"""Verdict rules and the offenders behind them."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.gaps import Cause
from cutimeline.analysis.verdict import offenders, verdicts
from cutimeline.timeline.schema import OpFlag, SpanKind

from handmade import timeline


def test_rules():
    idle = np.zeros((6, 5))
    for k, c in enumerate(Cause):
        idle[k, c] = 1
    busy = np.array([0.5] * 5 + [0.9])
    assert verdicts(busy, idle).tolist() == [
        "input-bound", "sync-bound", "launch-bound", "dependency-bound", "unknown",
        "GPU-bound"]
    assert verdicts(busy, idle, gpu_bound_at=0.95)[-1] == "input-bound"
    assert verdicts([0.1], [[1, 0, 0, 0, 0]], has_gpu=False).tolist() == ["host-only"]


def test_offenders_by_verdict():
    tl = timeline([(0, 10, 12, 100, "gemm"), (0, 200, 205, 210, "add")],
                  ops=[("aten::mm", 9, 11, OpFlag.LAUNCH), ("aten::add", 199, 201, OpFlag.LAUNCH),
                       ("aten::_local_scalar_dense", 120, 150, OpFlag.SYNC)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 150, 190)],
                  syncs=[(120, 150)])
    assert offenders(tl, ctl.analyze(tl).lanes, 0, 300, "GPU-bound")["ops"][0] == ("aten::mm", 88)
    sync = offenders(tl, None, 0, 300, "sync-bound")
    assert sync["ops"] == [("sync", 30)] and sync["count"] == 1  # not linked to an op: its kind
    data = offenders(tl, None, 0, 300, "input-bound")
    assert data["spans"] == [("next(DataLoader)", 40)] and data["mean_ns"] == 40
    host = offenders(tl, None, 0, 300, "launch-bound")
    assert host["ops"][0] == ("aten::_local_scalar_dense", 30)


def test_step_rows():
    tl = timeline([(0, 10, 12, 60), (0, 110, 112, 120)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 60, 105)],
                  steps=[(0, 0, 60), (1, 60, 130)])
    s = ctl.analyze(tl).steps
    assert s["number"].tolist() == [0, 1]
    assert s["verdict"].tolist() == ["launch-bound", "input-bound"]
    assert s["busy_ns"].tolist() == [48, 8]
    assert (s["busy_ns"] + s["idle_ns"] == s["duration_ns"]).all()
    assert s["data_ns"].tolist() == [0, 45] and s["host_data_ns"].tolist() == [0, 45]
    assert s["launches"].tolist() == [1, 1] and s["ops"].tolist() == [1, 1]
    assert s["lead_first_ns"].tolist() == [2, 2]


@pytest.mark.parametrize("seed", range(4))
def test_count_flag_twins_agree(seed):
    from cutimeline.analysis.verdict import _count_flag, _count_flag_np
    rng = np.random.default_rng(seed)
    flags = rng.integers(0, 16, 500).astype(np.uint8)  # ops.flags' own width
    i0 = rng.integers(0, 501, 60)
    i1 = np.clip(i0 + rng.integers(-20, 200, 60), 0, 500)  # some empty or reversed
    for bit in (int(OpFlag.LAUNCH), int(OpFlag.SYNC), 0):
        a, b = _count_flag(flags, bit, i0, i1), _count_flag_np(flags, bit, i0, i1)
        assert a.dtype == b.dtype == np.int64
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_count_flag(flags[:0], 1, i0[:0], i1[:0]),
                                  _count_flag_np(flags[:0], 1, i0[:0], i1[:0]))
