"""One-off host costs: a call far slower than its name's other calls is
named as warm-up, and the replay does not count it as launch cost."""

import pathlib

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables.oneoff import one_offs
from cutimeline.timeline.schema import OpFlag

from handmade import timeline

KINETO = pathlib.Path(__file__).resolve().parents[2] / "data" / "kineto"


def _loop(slow_ns, calls=10, steps=2):
    """``steps`` steps of ``calls`` 10 µs launches of "mm" with 2 µs
    kernels (launch-bound); the first call takes ``slow_ns`` on the host
    (with two steps both are the steady ones the headline reads)."""
    gpu, ops, spans = [], [], []
    t = 0
    for s in range(steps):
        begin = t
        for i in range(calls):
            dur = slow_ns if (s == 0 and i == 0) else 10_000
            ops.append(("mm", t, t + dur, OpFlag.LAUNCH))
            gpu.append((0, t + dur - 1_000, t + dur + 2_000, t + dur + 4_000, "mm"))
            t += dur + 1_000
        t += 30_000
        spans.append((s, begin, t))
    return timeline(gpu=gpu, ops=ops, steps=spans)


def test_a_call_far_slower_than_its_others_is_named_with_its_typical_time():
    tl = _loop(5_000_000)
    rep = ctl.analyze(tl)
    rows = rep.one_offs()
    assert len(rows) == 1
    r = rows[0]
    assert (r["name"], r["self_ns"], r["typical_ns"], r["calls"]) == \
        ("mm", 5_000_000, 10_000, 20)
    text = rep.summary()
    assert "one-off host costs: mm 5 ms once (its other 19 calls typically 10 µs)" in text
    assert "Warm-up first" in text.splitlines()[0]


@pytest.mark.parametrize("slow_ns", [150_000, 10_000])
def test_calls_within_twenty_times_their_typical_time_are_not_one_off(slow_ns):
    rep = ctl.analyze(_loop(slow_ns))
    assert len(rep.one_offs()) == 0
    assert "one-off" not in rep.summary() and "Warm-up" not in rep.summary()


def test_only_a_signatures_first_call_is_warm_up():
    """A slow call later in the run (a pause, a page fault) is no warm-up:
    the first call of its signature was as fast as the rest."""
    gpu, ops = [], []
    for i in range(20):
        dur = 5_000_000 if i == 10 else 10_000
        t = i * 6_000_000
        ops.append(("mm", t, t + dur, OpFlag.LAUNCH))
        gpu.append((0, t + dur - 1_000, t + dur + 2_000, t + dur + 4_000, "mm"))
    tl = timeline(gpu=gpu, ops=ops)
    assert len(one_offs(tl, tl.start_ns, tl.end_ns)) == 1  # no shapes: any call
    shaped = tl.replace(ops=tl.ops.replace(   # one signature: name and shapes
        shapes=np.full(len(tl.ops), tl.string_id("mm"), np.int32)))
    assert len(one_offs(shaped, tl.start_ns, tl.end_ns)) == 0


def test_a_sync_waiting_for_the_device_is_not_warm_up():
    ops = [("aten::_local_scalar_dense", i * 1_000_000, i * 1_000_000 + (800_000 if i == 0
                                                                         else 5_000),
            OpFlag.LAUNCH | OpFlag.SYNC) for i in range(5)]
    gpu = [(0, b + 10, b + 100, b + 200, n) for n, b, _, _ in ops]
    tl = timeline(gpu=gpu, ops=ops)
    assert len(one_offs(tl, tl.start_ns, tl.end_ns)) == 0


def test_a_name_called_once_is_never_one_off():
    tl = timeline(gpu=[(0, 10, 20, 30, "init"), (0, 5_000_000, 5_000_010, 5_000_020, "mm")],
                  ops=[("init", 0, 4_999_000, OpFlag.LAUNCH),
                       ("mm", 4_999_500, 5_000_500, OpFlag.LAUNCH)])
    assert len(one_offs(tl, tl.start_ns, tl.end_ns)) == 0


def test_the_replay_keeps_one_off_costs_a_faster_launch_path_would_not_remove():
    with_slow, without = ctl.analyze(_loop(5_000_000)), ctl.analyze(_loop(10_000))
    saved = {p.edit.name: p.step_ns - p.predicted_step_ns
             for p in with_slow.what_if()}
    plain = {p.edit.name: p.step_ns - p.predicted_step_ns for p in without.what_if()}
    # the same launches to save either way, the 5 ms call kept
    assert saved["launch"] == pytest.approx(plain["launch"], rel=0.25)


@pytest.mark.skipif(not (KINETO / "critical_path").exists(), reason="no kineto traces")
def test_alexnet_warm_up_is_the_cudnn_convolution_inside_conv2d():
    path = next((KINETO / "critical_path" / "alexnet").glob("*.json.gz"))
    rep = ctl.analyze(ctl.load(path))
    top = rep.one_offs()[0]
    assert (top["name"], top["outer"]) == ("aten::cudnn_convolution", "aten::conv2d")
    assert top["self_ns"] > 10e9 and top["typical_ns"] < 2e6
    assert "Warm-up first: one-off host costs take 98% of the window" in rep.summary()
    graphs = next(p for p in rep.what_if() if p.edit.name == "graphs")
    assert graphs.gain < 0.1  # the 10.8 s stay: a graph does not autotune faster
