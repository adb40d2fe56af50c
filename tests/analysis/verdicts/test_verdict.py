"""Verdict rules and the offenders behind them."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.idle.gaps import CAUSES, Cause
from cutimeline.analysis.verdicts.margins import VERDICTS, Verdict, rank_causes, verdict_text
from cutimeline.analysis.verdicts.offenders import offenders
from cutimeline.timeline.schema import OpFlag, SpanKind

from handmade import timeline


def test_ranked_causes_and_the_verdict_text():
    r = rank_causes([[0, 21, 62, 17, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 5, 0, 0, 0]])
    assert r["cause"].tolist() == [Cause.LAUNCH, -1, Cause.LAUNCH]
    assert r["runner_up"].tolist() == [Cause.SYNC, -1, -1]
    np.testing.assert_allclose(r["share"], [0.62, 0, 1])
    np.testing.assert_allclose(r["runner_up_share"], [0.21, 0, 0])
    assert verdict_text("launch-bound", "graphs", 0.62, 0.3) == \
        "launch-bound — CUDA graphs, one launch per sync-free piece of the step −62%"
    assert verdict_text("mixed", "data", 0.45, 0.3, "host", 0.40) == \
        "mixed — batches ready when the step asks −45%, the Python between ops moved " \
        "out of the step −40%"
    assert verdict_text("GPU-bound", "host", 0.01, 0.91) == "GPU-bound — GPU busy 91%"
    assert verdict_text("communication-bound", "communication", 0.3, 0.9) == \
        "communication-bound — communication up to −30%"


def test_a_verdict_member_is_its_word():
    from cutimeline.analysis.advice import ADVICE
    assert tuple(v.value for v in Verdict) == VERDICTS
    for v in Verdict:  # tables hold the words; dicts keyed by members read them
        assert v == v.value and str(v) == f"{v}" == v.value
        assert v is Verdict.MIXED or ADVICE[v.value] is ADVICE[v]
    assert {Verdict.MIXED: 1}["mixed"] == 1


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


def test_a_profiler_fetch_is_an_input_offender_and_no_host_one():
    # a user span named like torch.profiler's fetches is a fetch everywhere
    # (``activity.fetch_spans``): its time is data, it is an input-bound
    # offender, and not a host-bound one
    tl = timeline([(0, 10, 12, 100, "gemm"), (0, 200, 205, 210, "add")],
                  ops=[("aten::mm", 9, 11, OpFlag.LAUNCH), ("aten::add", 199, 201, OpFlag.LAUNCH)],
                  spans=[(SpanKind.USER, "enumerate(DataLoader)#_Iter.__next__", 150, 190),
                         (SpanKind.USER, "log", 120, 140)])
    data = offenders(tl, None, 0, 300, "input-bound")
    assert data["spans"] == [("enumerate(DataLoader)#_Iter.__next__", 40)]
    assert offenders(tl, None, 0, 300, "host-bound")["spans"] == [("log", 20)]


def test_step_rows():
    # host steps [0,60) and [60,120) launch work at 10 and 110; the GPU runs
    # it over [12,60) and [112,120): step 0's device window opens with its
    # host window, [0,60); step 1's runs end to end from there, [60,120),
    # with the data fetch of its batch in its idle time: without it the
    # step's work would start 45 ns earlier, input-bound
    tl = timeline([(0, 10, 12, 60), (0, 110, 112, 120)],
                  spans=[(SpanKind.DATA, "next(DataLoader)", 60, 105)],
                  steps=[(0, 0, 60), (1, 60, 120)])
    s = ctl.analyze(tl).steps
    assert s["number"].tolist() == [0, 1]
    assert s["begin_ns"].tolist() == [0, 60] and s["end_ns"].tolist() == [60, 120]
    assert s["host_begin_ns"].tolist() == [0, 60] and s["host_end_ns"].tolist() == [60, 120]
    assert s["verdict"][1] == "input-bound" and s["fix"][1] == "data"
    assert s["gain"][1] == pytest.approx(45 / 60)
    assert s["busy_ns"].tolist() == [48, 8]
    assert (s["busy_ns"] + s["idle_ns"] == s["duration_ns"]).all()
    assert s["data_ns"].tolist() == [0, 45] and s["host_data_ns"].tolist() == [0, 45]
    assert s["launches"].tolist() == [1, 1] and s["ops"].tolist() == [1, 1]
    assert s["lead_first_ns"].tolist() == [2, 2]
    assert s["cause"][1] == "data" and s["share"][1] == 45 / 52
    assert s["runner_up"][1] == "launch"


@pytest.mark.parametrize("seed", range(4))
def test_count_flag_twins_agree(seed):
    from cutimeline.analysis.verdicts.steptable import _count_flag, _count_flag_np
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


def test_a_loop_computing_on_cpu_tensors_is_host_bound_with_its_cpu_ops_named():
    # two steps of 100 µs GPU work; between them the host runs a 2 ms op on
    # CPU tensors (no device, launches nothing): host time, not launching,
    # and the host-bound offenders and advice name the op
    ops = [("aten::mm", 0, 10_000, OpFlag.LAUNCH),
           ("aten::mm", 2_400_000, 2_410_000, OpFlag.LAUNCH),
           ("aten::div", 200_000, 2_200_000, 0)]
    tl = timeline([(0, 10_000, 15_000, 115_000), (0, 2_410_000, 2_415_000, 2_515_000)],
                  ops=ops)
    tl = tl.replace(ops=tl.ops.replace(device=np.array([0, 0, -1], np.int16)))
    rep = ctl.analyze(tl)
    assert rep.overall["verdict"] == "host-bound"
    host = offenders(tl, None, 115_000, 2_415_000, "host-bound")
    assert host["ops"][0] == ("aten::div", 2_000_000)
    assert "CPU ops aten::div" in rep.ranges()[0]["advice"]
    # on the device (an op that launched nothing) the same time is dispatch
    dev = tl.replace(ops=tl.ops.replace(device=np.array([0, 0, 0], np.int16)))
    assert ctl.analyze(dev).overall["verdict"] == "launch-bound"
