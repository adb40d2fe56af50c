"""Kineto features the seven shared traces do not show, each in a small
hand-made trace of the shape libkineto's writer (output_json.cpp) gives it:
CUDA graph launches, the launch calls of other APIs and backends, host
waits recorded only as runtime calls, GPU-side annotations, instants and
counters, several GPUs, step nesting, time units, ids past 2^53, distributed
info, devices the import cannot read, CPU-only and truncated files. Each
checks the Timeline's rows and links and that the analysis says something
true of the trace.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from test_kineto import kernel, op, runtime, write_trace

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.formats.kineto import import_chrome
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind


def annotation(name, ts, dur, cat="user_annotation", pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
            "dur": dur, "args": {}}


def device_row(cat, name, ts, dur, corr, device=0, stream=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": device, "stream": stream, "correlation": corr,
                                 **args}}


def call(cat, name, ts, dur, corr, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
            "dur": dur, "args": {"cbid": 211, "correlation": corr}}


def names(tl, col):
    return list(tl.decode(col))


def summary(tl) -> str:
    text = ctl.analyze(tl).summary()
    assert text.startswith("Verdict: ")
    return text


# --- launches -------------------------------------------------------------

@pytest.mark.parametrize("enclosed", [True, False])
def test_a_cuda_graph_launch_links_all_its_kernels(tmp_path, enclosed):
    """cudaGraphLaunch: every kernel of the graph carries the launch's one
    correlation id (and a "graph node id"); all link to the one launch."""
    evs = [call("cuda_runtime", "cudaGraphLaunch", 12, 5, corr=9)]
    evs += [device_row("kernel", f"graph_k{i}", 30 + 10 * i, 8, corr=9,
                       **{"graph node id": 100 + i}) for i in range(3)]
    if enclosed:
        evs.append(op("aten::graph_replay", 10, 20))
    else:   # a replay from Python has no aten op around it
        evs.append(op("aten::add", 100, 5))
    tl = import_chrome(write_trace(tmp_path / "t.json", evs))
    assert len(tl.gpu) == 3
    assert np.all(tl.gpu.launch_ns == 12_000)
    if enclosed:
        assert np.all(tl.gpu.op == 0)
        assert tl.ops.flags[0] & OpFlag.LAUNCH
    else:
        assert np.all(tl.gpu.op == NONE)
    # the launch call is there: no "launched before the profiler" warning
    assert not any("before the profiler" in w for w in tl.meta["import_warnings"])
    assert "GPU busy" in summary(tl)


def test_every_launch_api_links_its_work_and_kind(tmp_path):
    """The runtime and driver calls CUDA code launches with, and copies
    and sets named as Kineto names them."""
    launches = [("cuda_runtime", "cudaLaunchKernelExC", "kernel", "k_ex"),
                ("cuda_driver", "cuLaunchKernelEx", "kernel", "triton_k"),
                ("cuda_runtime", "cudaLaunchCooperativeKernel", "kernel", "coop_k"),
                ("cuda_runtime", "cudaMemcpyAsync", "gpu_memcpy",
                 "Memcpy DtoH (Device -> Pageable)"),
                ("cuda_runtime", "cudaMemsetAsync", "gpu_memset", "Memset (Device)")]
    evs = []
    for i, (cat, api, gcat, gname) in enumerate(launches):
        t = 100 * i
        evs += [op(f"aten::op{i}", t, 20), call(cat, api, t + 5, 3, corr=i + 1),
                device_row(gcat, gname, t + 50, 10, corr=i + 1)]
    tl = import_chrome(write_trace(tmp_path / "t.json", evs))
    assert names(tl, tl.gpu["name"]) == [g for *_, g in launches]
    assert list(tl.gpu.op) == [0, 1, 2, 3, 4]
    assert list(tl.gpu.kind) == [GpuKind.KERNEL] * 3 + [GpuKind.MEMCPY, GpuKind.MEMSET]
    assert np.all(tl.ops.flags & OpFlag.LAUNCH)
    summary(tl)


@pytest.mark.parametrize("cat", ["xpu_runtime", "privateuse1_runtime", "privateuse1_driver"])
def test_other_backends_launch_calls_link_their_kernels(tmp_path, cat):
    """XPU and PrivateUse1 backends write device work as kernel rows and
    their launch calls in categories of their own."""
    tl = import_chrome(write_trace(tmp_path / "t.json", [
        op("aten::mm", 10, 20), call(cat, "Launch", 12, 2, corr=3),
        device_row("kernel", "gemm", 40, 30, corr=3)]))
    assert list(tl.gpu.op) == [0]
    assert tl.gpu.launch_ns[0] == 12_000
    assert tl.meta["import_warnings"] == []


@pytest.mark.parametrize("cat, device", [("mtia_ccp_events", "MTIA"),
                                         ("hpu_op", "Intel Gaudi")])
def test_device_work_the_import_cannot_read_is_refused_not_dropped(tmp_path, cat, device):
    evs = [op("aten::mm", 10, 20), call("mtia_runtime", "launch", 12, 2, corr=3),
           device_row(cat, "gemm", 40, 30, corr=3)]
    with pytest.raises(CutimelineError, match=rf"1 {cat} events \({device}.*"
                                              r"activities=\[ProfilerActivity.CPU\]"):
        import_chrome(write_trace(tmp_path / "t.json", evs))
    # beside CUDA work: read, with a warning naming what is left out
    evs += [call("cuda_runtime", "cudaLaunchKernel", 14, 2, corr=4),
            device_row("kernel", "k", 80, 5, corr=4)]
    tl = import_chrome(write_trace(tmp_path / "t.json", evs))
    assert len(tl.gpu) == 1
    assert any(cat in w and "not read" in w for w in tl.meta["import_warnings"])


# --- syncs ----------------------------------------------------------------

def _item_trace(tmp_path, with_sync_events: bool):
    """A kernel of 500 µs, then .item(): its _local_scalar_dense copies and
    waits in cudaStreamSynchronize till the kernel ends; the host launches
    the next kernel 40 µs after. Then torch.cuda.synchronize() outside
    any op, and a cudaStreamWaitEvent (a device-side wait)."""
    evs = [op("aten::mm", 10, 20), runtime("cudaLaunchKernel", 12, corr=1),
           kernel("k1", 40, 500, corr=1),
           op("aten::item", 50, 560), op("aten::_local_scalar_dense", 52, 556),
           call("cuda_runtime", "cudaMemcpyAsync", 54, 4, corr=2),
           kernel("copy", 545, 2, corr=2),
           call("cuda_runtime", "cudaStreamSynchronize", 60, 488, corr=3),
           op("aten::mm", 650, 20), runtime("cudaLaunchKernel", 652, corr=4),
           kernel("k2", 660, 300, corr=4),
           call("cuda_runtime", "cudaStreamWaitEvent", 680, 2, corr=5),
           call("cuda_runtime", "cudaDeviceSynchronize", 700, 262, corr=6)]
    evs[6]["cat"] = "gpu_memcpy"
    if with_sync_events:   # experimental_config(enable_cuda_sync_events=True)
        for corr, kind, ts, dur, stream in ((3, "Stream Sync", 60, 488, 7),
                                            (5, "Stream Wait Event", 680, 2, 7),
                                            (6, "Context Sync", 700, 262, -1)):
            evs.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": 0, "tid": 7,
                        "ts": ts, "dur": dur,
                        "args": {"cuda_sync_kind": kind, "stream": stream,
                                 "correlation": corr, "device": 0}})
    return import_chrome(write_trace(tmp_path / f"sync{with_sync_events}.json", evs))


def test_runtime_sync_calls_are_syncs_when_no_cuda_sync_events_are_written(tmp_path):
    tl = _item_trace(tmp_path, False)
    y = tl.syncs
    assert names(tl, y.kind) == ["Stream Sync", "Context Sync"]   # not the wait event
    dense = names(tl, tl.ops["name"]).index("aten::_local_scalar_dense")
    assert list(y.op) == [dense, NONE]
    assert list(y.host_begin_ns) == [60_000, 700_000]
    assert list(y.host_end_ns) == [548_000, 962_000]
    assert np.all(y.device == NONE) and np.all(y.stream == NONE)   # all streams
    assert tl.ops.flags[dense] & OpFlag.SYNC
    assert tl.meta["import_counts"]["syncs from runtime calls"] == 2
    rep = ctl.analyze(tl)
    assert rep.overall["sync_ns"] > 0
    assert "sync" in rep.summary()


def test_runtime_and_cuda_sync_records_of_one_wait_read_alike(tmp_path):
    """A cuda_sync event and its runtime call (one correlation id) are one
    sync, and the analysis reads the wait the same either way."""
    plain, evented = _item_trace(tmp_path, False), _item_trace(tmp_path, True)
    assert len(evented.syncs) == 3   # + the wait event, which does not block
    blocking = evented.syncs.kind != evented.string_id("Stream Wait Event")
    assert list(evented.syncs.op[blocking]) == list(plain.syncs.op)
    assert list(evented.syncs.host_begin_ns[blocking]) == list(plain.syncs.host_begin_ns)
    assert "syncs from runtime calls" not in evented.meta["import_counts"]
    a, b = ctl.analyze(plain).overall, ctl.analyze(evented).overall
    assert a["sync_ns"] == b["sync_ns"] > 0


def test_runtime_syncs_survive_export_chrome(tmp_path):
    """Their unknown device and stream are written and read back as such."""
    from cutimeline.formats.chrome import export_chrome
    tl = _item_trace(tmp_path, False)
    export_chrome(tl, tmp_path / "back.json")
    back = import_chrome(tmp_path / "back.json")
    assert back.meta["import_warnings"] == []
    assert names(back, back.syncs.kind) == names(tl, tl.syncs.kind)
    for col in ("op", "device", "stream", "host_begin_ns", "host_end_ns"):
        assert list(back.syncs[col]) == list(tl.syncs[col]), col


# --- host side: steps, annotations, instants, python frames ------------------

def test_gpu_annotations_instants_and_counters_add_no_rows(tmp_path):
    """gpu_user_annotation (the GPU-side copy of a record_function range),
    instant events other than [memory], counters and python_function
    events are not ops, steps or device work."""
    base = [annotation("ProfilerStep#3", 0, 200), op("aten::mm", 10, 20),
            runtime("cudaLaunchKernel", 12, corr=1), kernel("k", 40, 50, corr=1)]
    extra = [annotation("ProfilerStep#3", 40, 50, cat="gpu_user_annotation", pid=0, tid=7),
             annotation("my_range", 40, 50, cat="gpu_user_annotation", pid=0, tid=7),
             {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "checkpoint",
              "pid": 1, "tid": 1, "ts": 15, "args": {}},
             {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": 1,
              "tid": 1, "ts": 0},
             {"ph": "C", "name": "GPU utilization", "pid": 0, "ts": 40, "args": {"value": 1}},
             annotation("train.py(12): step", 5, 100, cat="python_function")]
    a = import_chrome(write_trace(tmp_path / "a.json", base))
    b = import_chrome(write_trace(tmp_path / "b.json", base + extra))
    for t in ("ops", "gpu", "spans", "syncs"):
        assert len(b.table(t)) == len(a.table(t)), t
    assert list(b.spans.number) == [3] and b.spans.kind[0] == SpanKind.STEP
    assert b.meta["import_skipped"] == {"gpu_user_annotation": 2}
    assert b.meta["import_warnings"] == []
    assert summary(b) == summary(a).replace("a.json", "b.json")


def test_nested_steps_are_step_windows_and_a_trace_without_any_is_one_window(tmp_path):
    evs = []
    for n in (1, 2, 3):
        t = 1000 * n
        evs += [annotation(f"ProfilerStep#{n}", t, 900),
                annotation("Optimizer.step#SGD.step", t + 500, 100),
                op("aten::mm", t + 10, 20), runtime("cudaLaunchKernel", t + 12, corr=n),
                kernel("k", t + 40, 400, corr=n)]
    tl = import_chrome(write_trace(tmp_path / "t.json", evs))
    steps = tl.spans.kind == SpanKind.STEP
    assert list(tl.spans.number[steps]) == [1, 2, 3]
    assert list(tl.spans.begin_ns[steps]) == [1_000_000, 2_000_000, 3_000_000]
    assert np.all(tl.spans.depth[steps] == 0) and np.all(tl.spans.depth[~steps] == 1)
    assert np.all(tl.spans.kind[~steps] == SpanKind.OPTIMIZER)
    assert len(ctl.analyze(tl).steps) == 3
    # without ProfilerStep ranges the optimizer's annotations end the steps
    plain = [e for e in evs if not e["name"].startswith("ProfilerStep#")]
    by_opt = import_chrome(write_trace(tmp_path / "o.json", plain))
    assert by_opt.meta["steps_from"] == "Optimizer.step#SGD.step"
    assert list(by_opt.spans.end_ns[by_opt.spans.kind == SpanKind.STEP]) == \
        [1_600_000, 2_600_000, 3_600_000]
    # with neither, none
    bare = [e for e in plain if not e["name"].startswith("Optimizer.")]
    tl = import_chrome(write_trace(tmp_path / "p.json", bare))
    assert "steps_from" not in tl.meta
    text = summary(tl)
    assert "0 steps" in text and "no steps" in text


# --- clocks, ids, devices, metadata ----------------------------------------

def test_time_units_and_base_time(tmp_path):
    """ts is µs whatever displayTimeUnit says (it only sets the viewer's
    unit); relative float µs count from baseTimeNanoseconds."""
    evs = [op("aten::mm", 10.5, 20.25), runtime("cudaLaunchKernel", 12.001, corr=1),
           kernel("k", 40.125, 5.5, corr=1)]
    for unit in ("ms", "ns"):
        tl = import_chrome(write_trace(tmp_path / f"{unit}.json", evs, displayTimeUnit=unit,
                                       baseTimeNanoseconds=1_700_000_000_000_000_000))
        assert tl.ops.host_begin_ns[0] == 10_500 and tl.ops.host_end_ns[0] == 30_750
        assert tl.gpu.begin_ns[0] == 40_125 and tl.gpu.launch_ns[0] == 12_001
        assert tl.meta["epoch_offset_ns"] == 1_700_000_000_000_000_000


def test_ids_past_2_to_the_53_link_exactly(tmp_path):
    """Correlation ids are uint64 in libkineto; two that a float64 would
    merge stay apart."""
    big = 2**64 - 2
    assert float(big) == float(big + 1)
    tl = import_chrome(write_trace(tmp_path / "t.json", [
        op("aten::a", 10, 20), runtime("cudaLaunchKernel", 12, corr=big),
        op("aten::b", 40, 20), runtime("cudaLaunchKernel", 42, corr=big + 1),
        kernel("ka", 100, 5, corr=big), kernel("kb", 110, 5, corr=big + 1)]))
    assert list(tl.gpu.op) == [0, 1]


def test_ids_past_int64_and_bytes_that_are_no_utf8_are_read(tmp_path):
    """Two damages HTA met in real traces ("Comms Id" past 2^63, names
    holding bytes that are no UTF-8): the trace is read, the bytes as U+FFFD."""
    evs = [op("aten::mm", 10, 20), runtime("cudaLaunchKernel", 12, corr=1),
           kernel("kernel_NAME", 40, 5, corr=1)]
    evs[0]["args"]["Comms Id"] = 2**70 + 1
    data = json.dumps({"traceEvents": evs}).encode().replace(b"NAME", b"\xe2\x28\xa1")
    (tmp_path / "t.json").write_bytes(data)
    tl = import_chrome(tmp_path / "t.json")
    assert names(tl, tl.gpu["name"]) == ["kernel_\ufffd(\ufffd"]
    assert list(tl.gpu.op) == [0]
    assert any("2 bytes that are no UTF-8" in w for w in tl.meta["import_warnings"])


def test_several_gpus_keep_their_devices(tmp_path):
    evs = []
    for d in (0, 1, 2):
        t = 100 * d
        evs += [op(f"aten::mm_{d}", t, 20), runtime("cudaLaunchKernel", t + 2, corr=d + 1),
                device_row("kernel", "k", t + 40, 30, corr=d + 1, device=d, stream=7 + d)]
    doc = {"deviceProperties": [{"id": d, "name": "NVIDIA H100"} for d in (0, 1, 2)]}
    tl = import_chrome(write_trace(tmp_path / "t.json", evs, **doc))
    assert list(tl.gpu.device) == [0, 1, 2] and list(tl.gpu.stream) == [7, 8, 9]
    assert list(tl.ops.device) == [0, 1, 2]
    assert set(tl.meta["device_names"]) == {"0", "1", "2"}
    rep = ctl.analyze(tl)
    assert len(rep.devices) == 3
    rep.summary()


def test_distributed_info_gives_rank_and_world_size(tmp_path):
    evs = [op("aten::mm", 10, 20), runtime("cudaLaunchKernel", 12, corr=1),
           kernel("k", 40, 5, corr=1)]
    dist = {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 2,
            "pg_config": [{"pg_name": "0", "ranks": list(range(8))}], "nccl_version": "2.21.5"}
    tl = import_chrome(write_trace(tmp_path / "t.json", evs, distributedInfo=dist))
    assert tl.meta["rank"] == 3 and tl.meta["world_size"] == 8
    assert tl.meta["distributed"]["backend"] == "nccl"


def test_a_cpu_only_trace_says_so(tmp_path):
    tl = import_chrome(write_trace(tmp_path / "t.json", [
        annotation("ProfilerStep#0", 0, 100), op("aten::mm", 10, 20),
        op("aten::add", 40, 10)]))
    assert len(tl.gpu) == 0 and len(tl.ops) == 2
    text = summary(tl)
    assert "host-only" in text and "No GPU work" in text


# --- damaged files -----------------------------------------------------------

@pytest.mark.parametrize("cut", ["mid-event", "after-event", "mid-string", "mid-character"])
@pytest.mark.parametrize("gz", [False, True])
def test_a_truncated_trace_is_named_truncated(tmp_path, cut, gz):
    text = json.dumps({"schemaVersion": 1, "traceEvents": [
        op("aten::mm", 10, 20), op("aten::add", 40, 10), op("kernel 5µs", 60, 1)],
        "traceName": "x"}, ensure_ascii=False).encode()
    end = {"mid-event": text.index(b'"ts": 40'),
           "after-event": text.index(b"}, {") + 1,
           "mid-string": text.index(b"aten::add") + 3,
           "mid-character": text.index("µ".encode()) + 1}[cut]
    data = text[:end]
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(CutimelineError, match="is truncated.*Record or copy it again"):
        import_chrome(path)


def test_an_empty_file_is_named_empty(tmp_path):
    (tmp_path / "t.json").write_bytes(b"  \n")
    with pytest.raises(CutimelineError, match="t.json is empty"):
        import_chrome(tmp_path / "t.json")


def test_a_trace_without_cpu_ops_warns_that_the_host_side_is_unknown(tmp_path):
    """activities=[ProfilerActivity.CUDA]: launch calls and kernels, no ops."""
    tl = import_chrome(write_trace(tmp_path / "t.json", [
        runtime("cudaLaunchKernel", 12, corr=1), kernel("k", 40, 500, corr=1)]))
    assert len(tl.ops) == 0 and list(tl.gpu.op) == [NONE]
    assert tl.gpu.launch_ns[0] == 12_000
    assert any("no cpu_op events" in w for w in tl.meta["import_warnings"])


def test_a_trace_without_cpu_ops_is_analysed(tmp_path):
    """GPU-bound verdict (its offenders) and the sync what-if on a trace of
    launch calls, kernels and a runtime sync, with no ops."""
    tl = import_chrome(write_trace(tmp_path / "t.json", [
        runtime("cudaLaunchKernel", 12, corr=1), kernel("k1", 40, 500, corr=1),
        call("cuda_runtime", "cudaDeviceSynchronize", 20, 525, corr=2),
        runtime("cudaLaunchKernel", 600, corr=3), kernel("k2", 610, 500, corr=3)]))
    assert len(tl.ops) == 0 and len(tl.syncs) == 1
    rep = ctl.analyze(tl)
    assert "GPU-bound" in rep.summary().splitlines()[0]
    rep.what_if()
