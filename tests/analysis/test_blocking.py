"""Syncs that block no host (a stream waiting on an event) are set aside
by the analysis: after one, the host dispatching on is launching, not a
sync's refill."""

import json

import pytest

import cutimeline as ctl
from cutimeline.analysis.analyzer import host_blocking


def _trace(tmp_path, kind):
    """A 10 µs kernel; at 60 µs a call of ``kind`` (a cuda_sync event);
    then the host dispatches one op for 340 µs before launching the next
    kernel at 400 µs."""
    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                "ts": ts, "dur": dur, "args": args}
    call = {"Stream Wait Event": "cudaStreamWaitEvent", "Stream Sync": "cudaStreamSynchronize"}
    evs = [x("cpu_op", "aten::mm", 10, 20), x("cuda_runtime", "cudaLaunchKernel", 12, 1,
                                              correlation=1),
           x("kernel", "k1", 40, 10, pid=0, tid=7, device=0, stream=7, correlation=1),
           x("cpu_op", "aten::wait", 58, 4),
           x("cuda_runtime", call[kind], 59, 2, correlation=2),
           x("cuda_sync", kind, 59, 2, pid=0, tid=7, device=0, stream=7, correlation=2,
             cuda_sync_kind=kind),
           x("cpu_op", "aten::mm", 62, 340),
           x("cuda_runtime", "cudaLaunchKernel", 398, 1, correlation=3),
           x("kernel", "k2", 410, 10, pid=0, tid=7, device=0, stream=7, correlation=3)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    return ctl.load(path)


def test_a_stream_wait_is_kept_in_the_timeline_and_set_aside_by_the_analysis(tmp_path):
    tl = _trace(tmp_path, "Stream Wait Event")
    assert len(tl.syncs) == 1 and len(host_blocking(tl).syncs) == 0
    rep = ctl.analyze(tl)
    assert rep.overall["sync_ns"] == 0
    assert rep.overall["launch_ns"] >= 300_000   # the host was dispatching
    # the report's Timeline (what its what-if replays read) has none either:
    # a replayed host would otherwise wait there for the stream to drain
    assert len(rep.timeline.syncs) == 0


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_a_host_sync_in_the_same_place_still_owns_the_refill(tmp_path, engine):
    tl = _trace(tmp_path, "Stream Sync")
    assert host_blocking(tl) is tl
    assert ctl.analyze(tl, engine=engine).overall["sync_ns"] > 0
