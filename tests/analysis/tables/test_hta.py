"""HTA-compatible measures: the peer's numbers on real traces, and the
rules on hand-built ones."""

import os

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables import hta
from cutimeline.timeline.schema import NONE, GpuKind

from handmade import random_timeline, timeline

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "kineto")

# HolisticTraceAnalysis 0.5.0 on the same files (tests/data/kineto/README.md):
# idle, compute and non-compute % (two decimals) and the GPU span in ms (one)
PEER = {"nccl_parser_config/nccl_data.json.gz": (77.78, 17.26, 4.97, 435.6),
        "trace_filter/sampled_rank-0.json.gz": (53.56, 17.71, 28.74, 600.1),
        "trace_filter/sampled_rank-1.json.gz": (54.72, 22.57, 22.72, 600.7),
        "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz":
            (99.49, 0.08, 0.43, 12996.0)}
ALEXNET = "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


@pytest.fixture(scope="module")
def traces():
    return {f: ctl.load(os.path.join(DATA, f)) for f in PEER}


@pytest.mark.parametrize("name", PEER)
def test_temporal_breakdown_matches_hta(traces, name):
    # the percentages are rounded to two decimals, as HTA's: they agree exactly
    t = hta.temporal_breakdown(traces[name])
    idle, compute, other, span_ms = PEER[name]
    assert (t["idle_pct"], t["compute_pct"], t["non_compute_pct"]) == (idle, compute, other)
    assert t["idle_ns"] + t["compute_ns"] + t["non_compute_ns"] == t["span_ns"]
    if name != ALEXNET:  # see test_alexnet_span_ends_where_htas_does
        assert abs(t["span_ns"] / 1e6 - span_ms) <= 0.05  # the README's 0.1 ms rounding


@pytest.mark.xfail(strict=True, reason="HTA's alexnet span (12996.0 ms) runs to the end "
                   "of the trace's last cuda_sync event; ours ends with the last kernel "
                   "(12920.2 ms). At 99.5 % idle the 75.8 ms move no percentage by 0.005 "
                   "points, so those still agree.")
def test_alexnet_span_ends_where_htas_does(traces):
    span_ms = PEER[ALEXNET][3]
    assert abs(hta.temporal_breakdown(traces[ALEXNET])["span_ns"] / 1e6 - span_ms) <= 0.05


def test_hta_rounding_is_what_makes_nccl_data_match(traces):
    tl = traces["nccl_parser_config/nccl_data.json.gz"]
    exact = hta.temporal_breakdown(tl, round_us=False)
    # without HTA's whole-µs rounding idle moves by 0.55 points
    assert (exact["idle_pct"], exact["compute_pct"], exact["non_compute_pct"]) == \
        (77.23, 17.66, 5.10)
    assert hta.temporal_breakdown(tl)["span_ns"] == 435_586_000


def test_queue_length_of_nccl_stream_7_matches_hta(traces):
    q = hta.queue_length(traces["nccl_parser_config/nccl_data.json.gz"])
    k = list(q["stream"]).index(7)
    assert q["count"][k] == 5004 and q["max"][k] == 10
    assert q["mean"][k] == pytest.approx(4118 / 5004, rel=1e-12)  # 0.8229
    # HTA says 0.81: 0.013 apart, as its unstable sort orders equal
    # timestamps differently (hta.py)
    assert abs(q["mean"][k] - 0.81) <= 0.013


def test_report_carries_the_hta_measures(traces):
    rep = ctl.analyze(traces["trace_filter/sampled_rank-0.json.gz"])
    t = rep.hta["temporal_breakdown"]
    assert (t["idle_pct"], t["compute_pct"], t["non_compute_pct"]) == (53.56, 17.71, 28.74)
    assert "HTA-compatible" in rep.summary()


def test_window_leaves_out_the_last_step():
    tl = timeline([(0, 5, 10, 20), (0, 25, 30, 40), (0, 55, 60, 90)],
                  steps=[(1, 0, 50), (2, 50, 100)])
    assert hta.hta_window(tl).tolist() == [True, True, False]
    t = hta.temporal_breakdown(tl)
    assert (t["span_ns"], t["idle_ns"], t["idle_pct"]) == (30, 10, 33.33)
    assert hta.window_name(tl) == "steps before the last"
    no_steps = timeline([(0, 5, 10, 20), (0, NONE, 30, 40)])
    assert hta.hta_window(no_steps).tolist() == [True, True]


def test_one_step_keeps_everything_as_hta_does():
    # HTA 0.5 filters by the last ProfilerStep only when there are two or
    # more; with one it warns and keeps every event
    tl = timeline([(0, 5, 10, 20), (0, 25, 30, 40), (0, 55, 60, 90)],
                  steps=[(1, 0, 100)])
    assert hta.hta_window(tl).tolist() == [True, True, True]
    t = hta.temporal_breakdown(tl)
    assert (t["span_ns"], t["idle_ns"]) == (80, 30)
    assert hta.window_name(tl).startswith("the whole trace")
    summary = ctl.analyze(tl).summary()
    assert "HTA-compatible (the whole trace: HTA keeps every step when there are " \
        "fewer than two): idle 37.5%" in summary


def test_compute_excludes_communication_and_memory():
    tl = timeline([(0, 0, 0, 10, "ncclKernel_AllReduce"), (1, 0, 0, 20, "Memcpy HtoD"),
                   (2, 0, 30, 40, "gemm"), (3, 0, 5, 8, "gloo:all_reduce")])
    t = hta.temporal_breakdown(tl)
    assert (t["span_ns"], t["idle_ns"], t["compute_ns"], t["non_compute_ns"]) == \
        (40, 10, 10, 20)


def test_idle_breakdown_categories():
    # kernels [0,10) [15,20) [100,110) [200,210); the second and third were
    # launched before the one ahead of them ended: their gaps (5 and 80 ns)
    # are kernel wait under the 50 ns threshold, other above it; the fourth
    # was launched after the third ended: host wait
    tl = timeline([(0, 0, 0, 10), (0, 1, 15, 20), (0, 2, 100, 110), (0, 150, 200, 210)])
    ib = hta.idle_breakdown(tl, consecutive_kernel_delay_ns=50)
    assert ib["host_wait_ns"].tolist() == [90]
    assert ib["kernel_wait_ns"].tolist() == [5]
    assert ib["other_ns"].tolist() == [80]


def test_queue_length_counts_launched_not_started():
    tl = timeline([(0, 0, 10, 20), (0, 1, 20, 30), (0, 2, 30, 40)])
    q = hta.queue_length(tl)
    # +1 +1 +1 at 0,1,2; −1 at 10,20,30: samples 1 2 3 2 1 0
    assert q["mean"].tolist() == [1.5] and q["max"].tolist() == [3]


@pytest.mark.parametrize("seed", range(3))
def test_twins_agree(seed):
    tl = random_timeline(seed, n=400, streams=3)
    for f in (hta.temporal_breakdown, hta.idle_breakdown, hta.queue_length):
        a, b = f(tl, engine="numba"), f(tl, engine="numpy")
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_kind_marks_memory_too():
    tl = timeline([(0, 0, 0, 10, "copy"), (0, 0, 20, 30, "add")])
    tl = tl.replace(gpu=tl.gpu.replace(kind=np.array([GpuKind.MEMCPY, GpuKind.KERNEL])))
    t = hta.temporal_breakdown(tl)
    assert (t["compute_ns"], t["non_compute_ns"]) == (10, 10)


@pytest.mark.parametrize("seed", range(3))
def test_measures_reusing_lanes_agree_with_their_own(seed):
    from cutimeline.analysis.idle.activity import host_activity
    from cutimeline.analysis.idle.lanes import lanes
    for streams in (1, 3):
        tl = random_timeline(seed, n=300, streams=streams, steps=1)
        ln = lanes(tl, host_activity(tl), [tl.start_ns], [tl.end_ns])
        a, b = hta.measures(tl, ln=ln), hta.measures(tl)
        assert a["temporal_breakdown"] == b["temporal_breakdown"]
        for part in ("idle_breakdown", "queue_length"):
            for k in a[part]:
                np.testing.assert_array_equal(a[part][k], b[part][k])
