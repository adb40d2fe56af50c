"""torch.profiler (Kineto) traces → Timeline.

A Kineto trace is Chrome-trace JSON: complete ("X") events in categories
``cpu_op`` (aten ops), ``user_annotation`` (record_function ranges,
``ProfilerStep#N``), ``cuda_runtime``/``cuda_driver`` (launch calls, also
``hip*`` on ROCm), ``kernel``/``gpu_memcpy``/``gpu_memset`` (device work) and
``cuda_sync``; the first traces (torch 1.8-1.10) name them ``Operator``,
``Runtime``, ``Kernel``, ``Memcpy`` and ``Memset`` and put GPU rows on tid
"stream <n>", which read the same. The host side (threads, ops linked to the launch calls inside
them, spans) is read by ``kinetohost``, the device side (GPU rows, syncs and
the op flags they imply) by ``kinetodevice``; the category and arg names
both read are in ``kinetoschema``.

Times: Kineto writes microseconds, as floats relative to
``baseTimeNanoseconds`` (newer traces) or as whole µs since the epoch
(older). Both are converted to integer ns exactly (a float's whole µs and
its fraction are converted apart, which is exact below 2^43 µs), never
rounded down to whole µs. Host times are kept as the file gives them;
``meta["epoch_offset_ns"]`` relates them to the epoch. Kineto puts device
times on the host clock already, so the Timeline is ``aligned``.
"""

from __future__ import annotations

import gc
import os
from typing import Any, Callable

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.table import Strings
from ..timeline.timeline import Timeline
from .kinetodevice import _flag_ops, _gpu, _syncs
from .kinetohost import _link_explicitly, _ops, _probes, _spans, _thread_index
from .kinetoschema import (EXPORTER, GPU_CATEGORIES, LAUNCH_CATEGORIES, OLD_CATEGORIES,
                           READ_CATEGORIES, SHIFT_KEY, STEP_RE, _int)
from .tracefile import bucket_events, columns, concat, read_trace, take

__all__ = ["import_chrome"]


def import_chrome(path: str | os.PathLike, *,
                  progress: Callable[[str, float], None] | None = None) -> Timeline:
    """Read a torch.profiler (Kineto) trace, ``.json`` or ``.json.gz``.

    Returns an aligned Timeline (all times integer ns on the trace's host
    clock). What could not be read is listed in ``meta["import_warnings"]``;
    a file that is not a trace raises ``CutimelineError``.
    ``progress(stage, fraction)`` is called as the import goes (the CLI
    draws a bar with it).
    """
    # Parsing makes ~10^5 small dicts and lists, none of them cyclic; the
    # cyclic collector would rescan them again and again (a third of the
    # time), so it pauses while the trace is read.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _import(os.fspath(path), progress or (lambda stage, fraction: None))
    finally:
        if collecting:
            gc.enable()


def _import(path: str, progress: Callable[[str, float], None]) -> Timeline:
    name = os.path.basename(path)
    doc = read_trace(path, progress)
    progress("sorting", 0.6)
    cats, flows, thread_names, skipped = bucket_events(doc["traceEvents"],
                                                       READ_CATEGORIES, OLD_CATEGORIES)
    progress("linking", 0.7)
    warnings: list[str] = []
    ours = str(doc.get("exportedBy", "")).startswith(EXPORTER)
    if not ours and not any(cats[c] for c in ("cpu_op", *GPU_CATEGORIES)):
        raise CutimelineError(
            f"{name} holds no cpu_op, kernel, memcpy or memset events, so "
            f"there is no timeline to import; record it with torch.profiler "
            f"with activities CPU and CUDA while the workload runs.")
    shift = int(doc.get(SHIFT_KEY, 0) or 0)
    ev = {c: columns(c, cats[c], shift, warnings) for c in READ_CATEGORIES}
    # ProfilerStep ranges are steps, never ops (older torch wrote cpu_op).
    is_step_op = np.array([STEP_RE.match(n) is not None for n in ev["cpu_op"]["name"]],
                          bool)
    span_ev = concat(ev["user_annotation"], take(ev["cpu_op"], is_step_op))
    op_ev = take(ev["cpu_op"], ~is_step_op)
    launch_ev = concat(*(ev[c] for c in LAUNCH_CATEGORIES))
    gpu_ev = concat(*(ev[c] for c in GPU_CATEGORIES))

    strings = Strings()
    probes = _probes(launch_ev, gpu_ev, ev["cuda_sync"], flows, shift)
    (op_thread, span_thread), probe_thread, threads = _thread_index(
        [op_ev, span_ev], probes, thread_names)
    ops, links, rank = _ops(op_ev, op_thread, probes, probe_thread, strings, ours)
    if ours:   # export_chrome's file: links, flags and devices are explicit
        by_ext = dict(zip((a.get("External id") for a in op_ev["args"]), rank.tolist()))
        _link_explicitly(gpu_ev, links, by_ext)
        _link_explicitly(ev["cuda_sync"], links, by_ext)
        for col in ("device", "stream"):
            ops[col][rank] = [_int(a.get("op " + col), NONE) for a in op_ev["args"]]
    gpu = _gpu(gpu_ev, links, strings, warnings, name, ours)
    syncs = _syncs(ev["cuda_sync"], links, strings, ours)
    # a sync event sits on its stream's row: the thread that waited is its op's
    op_thread = np.asarray(ops["thread"], np.int64)
    syncs["thread"] = np.where(syncs["op"] >= 0, op_thread[np.maximum(syncs["op"], 0)],
                               NONE) if len(op_thread) else np.full(len(syncs["op"]), NONE)
    if not ours:
        _flag_ops(ops, gpu, syncs, strings)
    spans = _spans(span_ev, span_thread, strings, ours)
    progress("building", 0.95)

    meta = _meta(doc, name, threads, ev["Trace"], shift)
    meta["import_counts"] = {c: len(cats[c]) for c in READ_CATEGORIES if cats[c]}
    meta["import_skipped"] = dict(skipped)
    if any(k.startswith("ph ") for k in skipped):
        phases = sorted(k for k in skipped if k.startswith("ph "))
        warnings.append(f"Events of phase {', '.join(p[3:] for p in phases)} are "
                        f"not read (only complete 'X' events carry Kineto's "
                        f"ops and device work).")
    meta["import_warnings"] = warnings
    return Timeline({"ops": ops, "gpu": gpu, "syncs": syncs, "spans": spans},
                    strings, meta)


def _meta(doc: dict, name: str, threads: list, trace_ev: dict, shift: int) -> dict:
    base = _int(doc.get("baseTimeNanoseconds"), 0) - shift
    devices = [d for d in doc.get("deviceProperties") or [] if isinstance(d, dict)]
    dist = doc.get("distributedInfo")
    meta: dict[str, Any] = {
        "source": "kineto", "file": name, "aligned": True,
        "trace_name": doc.get("traceName", ""),
        "schema_version": doc.get("schemaVersion"),
        # Relative traces count from baseTimeNanoseconds; whole-µs traces
        # are epoch times already.
        "base_time_ns": base, "epoch_offset_ns": base,
        "devices": devices,
        "device_names": {str(d.get("id", i)): str(d.get("name", ""))
                         for i, d in enumerate(devices)},
        "threads": threads,
    }
    if devices:
        meta["device_name"] = str(devices[0].get("name", ""))
    if isinstance(dist, dict):
        meta["distributed"] = dist
        if isinstance(dist.get("rank"), int):
            meta["rank"] = dist["rank"]
        if isinstance(dist.get("world_size"), int):
            meta["world_size"] = dist["world_size"]
    if len(trace_ev["begin"]):
        meta["profiler_window_ns"] = [int(trace_ev["begin"].min()),
                                      int(trace_ev["end"].max())]
    return meta
