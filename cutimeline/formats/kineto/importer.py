"""torch.profiler (Kineto) traces → Timeline: ``import_chrome``, the entry.

A Kineto trace is Chrome-trace JSON: complete ("X") events in categories
``cpu_op``, ``user_annotation``, ``cuda_runtime``/``cuda_driver`` (launch
calls, ``hip*`` on ROCm), ``kernel``/``gpu_memcpy``/``gpu_memset`` and
``cuda_sync`` (written only with ``enable_cuda_sync_events``: without it
the blocking ``cuda*Synchronize`` runtime calls are read as the syncs);
the names read are ``schema``'s. XPU and PrivateUse1 backends' launch
categories and ``kernel`` rows read the same; device work in categories
not read (MTIA, Gaudi) is refused, never dropped silently. The first
traces (torch 1.8-1.10: ``Operator``, ``Runtime``, ``Kernel``, GPU rows
on tid "stream <n>", ranges as ``Operator`` events) read the same.

The parts: ``host`` (threads, ops linked to their launch calls, spans),
``device`` (GPU rows, syncs and the op flags they imply), ``steps``
(which ranges make the steps), ``extra`` (FLOPs, ``[memory]`` events,
call stacks), ``tracefile`` (the JSON file, µs → ns exactly).

Times: Kineto writes µs, as floats relative to ``baseTimeNanoseconds``
(newer traces) or whole µs since the epoch (older); both become integer
ns exactly (a float's whole µs and its fraction converted apart, exact
below 2^43 µs), never rounded to whole µs. Host times stay as the file
gives them (``meta["epoch_offset_ns"]`` relates them to the epoch);
Kineto puts device times on the host clock already, so the Timeline is
``aligned``.
"""

from __future__ import annotations

import gc
import math
import os
from typing import Any, Callable

import numpy as np

from ...errors import CutimelineError
from ...timeline import budgets
from ...timeline.budgets import PEAK_PER_EVENT, memory_budget, out_of_memory
from ...timeline.invariants import check
from ...timeline.schema import NONE, SCHEMA
from ...timeline.table import Strings
from ...timeline.timeline import Timeline
from .device import flag_ops, read_gpu, read_syncs, runtime_syncs
from .extra import read_flops, read_memory, read_sources
from .host import launch_probes, link_explicitly, read_ops, read_spans, span_kind, thread_index
from .schema import (DEVICES, EXPORTER, GPU_CATEGORIES, INT64, LAUNCH_CATEGORIES, MEMORY_EVENT,
                     OLD_CATEGORIES, READ_CATEGORIES, READ_INSTANTS, SHIFT_KEY, STREAMS,
                     TIME_LIMIT_NS, UNREAD_DEVICE_CATEGORIES, arg_keys, int_arg)
from .steps import derive_steps, is_range
from .tracefile import bucket_events, columns, concat, read_trace, take

__all__ = ["import_chrome"]

# Ranks and world sizes a distributed run can have (one bigger is damage).
RANKS = (0, 2**24)


def import_chrome(path: str | os.PathLike, *,
                  progress: Callable[[str, float], None] | None = None,
                  steps_from: str | None = None, max_bytes: int | None = None) -> Timeline:
    """Read a torch.profiler (Kineto) trace, ``.json`` or ``.json.gz``.

    Returns an aligned Timeline (all times integer ns on the trace's host
    clock). What could not be read is listed in ``meta["import_warnings"]``;
    a file that is not a trace raises ``CutimelineError``.
    ``progress(stage, fraction)`` is called as the import goes (the CLI
    draws a bar with it). Steps come from ``ProfilerStep#N`` ranges, else
    from the optimizer's ``Optimizer.step#...`` annotations; ``steps_from``
    names the ranges that end each step instead (``steps.py``);
    ``meta["steps_from"]`` says which marker made them. A trace whose
    text or events would take more than ``max_bytes`` of memory through
    import and analysis is refused before they are parsed or made into
    columns (``timeline/budgets.py``: by default ``$CUTIMELINE_MAX_BYTES``,
    else 4 GiB or half this machine's memory).
    """
    # Parsing makes ~10^5 small dicts and lists, none of them cyclic; the
    # cyclic collector would rescan them again and again (a third of the
    # time), so it pauses while the trace is read.
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise CutimelineError(f"import_chrome wants the path of a torch.profiler trace "
                              f"(a str or os.PathLike); got {type(path).__name__}.")
    if progress is not None and not callable(progress):
        raise CutimelineError(f"import_chrome's progress wants a function (stage, "
                              f"fraction); got {type(progress).__name__}.")
    budgets.max_bytes(max_bytes)  # a bad budget is refused whatever the trace
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _import(os.fspath(path), progress or (lambda stage, fraction: None),
                       steps_from, max_bytes)
    except MemoryError:
        raise out_of_memory(os.fspath(path), f"{os.path.getsize(path):,} bytes of trace "
                            f"on disk") from None
    finally:
        if collecting:
            gc.enable()


def _import(path: str, progress: Callable[[str, float], None],
            steps_from: str | None = None, max_bytes: int | None = None) -> Timeline:
    name = os.path.basename(path)
    warnings: list[str] = []
    doc = read_trace(path, progress, warnings, max_bytes)
    # each event may become a row; the budget is held before any is made
    memory_budget(path, PEAK_PER_EVENT * len(doc["traceEvents"]),
                  f"{len(doc['traceEvents']):,} trace events", max_bytes)
    progress("sorting", 0.6)
    cats, flows, thread_names, skipped = bucket_events(
        doc["traceEvents"], READ_CATEGORIES, OLD_CATEGORIES, READ_INSTANTS)
    progress("linking", 0.7)
    exporter = doc.get("exportedBy")
    ours = isinstance(exporter, str) and exporter.startswith(EXPORTER)
    _unread_devices(skipped, any(cats[c] for c in GPU_CATEGORIES), name, warnings)
    if not ours and not any(cats[c] for c in ("cpu_op", *GPU_CATEGORIES)):
        raise CutimelineError(
            f"{name} holds no cpu_op, kernel, memcpy or memset events, so "
            f"there is no timeline to import; record it with torch.profiler "
            f"with activities CPU and CUDA while the workload runs.")
    shift = _shift(doc, name)
    ev = {c: columns(c, cats[c], shift, warnings, TIME_LIMIT_NS)
          for c in (*READ_CATEGORIES, *READ_INSTANTS)}
    # never an empty Timeline for a damaged file; an export of an empty
    # Timeline has none of these events to read, a damaged one has some
    work = ("cpu_op", *GPU_CATEGORIES)
    if not any(ev[c]["name"] for c in work) and (not ours or any(cats[c] for c in work)):
        raise CutimelineError(
            f"{name}: none of its cpu_op, kernel, memcpy or memset events can be "
            f"read ({'; '.join(w.rstrip('.') for w in warnings[:3])}); the file "
            f"is damaged.")
    if not ours and not cats["cpu_op"]:
        warnings.append(f"{name} holds no cpu_op events (recorded without "
                        f"ProfilerActivity.CPU?): its GPU rows have no ops, so the host "
                        f"side of GPU idle time (launching or not) cannot be told apart.")
    # record_function ranges are spans, never ops: the first traces wrote
    # ProfilerStep, DataLoader and optimizer ranges as cpu_op (Operator)
    ranges = is_range(ev["cpu_op"]["name"], steps_from)
    span_ev = concat(ev["user_annotation"], take(ev["cpu_op"], ranges))
    op_ev = take(ev["cpu_op"], ~ranges)
    kinds = [span_kind(s, a) for s, a in zip(span_ev["name"], span_ev["args"])]
    firsts = [e["begin"].min() for e in (op_ev, span_ev) if len(e["begin"])]
    span_ev, kinds, steps_meta = derive_steps(span_ev, kinds, int(min(firsts, default=0)),
                                              steps_from, name)
    warnings += steps_meta.pop("warnings", [])
    launch_ev = concat(*(ev[c] for c in LAUNCH_CATEGORIES))
    gpu_ev = concat(*(ev[c] for c in GPU_CATEGORIES))
    for cols in (launch_ev, gpu_ev, ev["cuda_sync"]):
        cols["corr"] = arg_keys(cols["args"], "correlation")
    if not ours:   # host waits recorded only as runtime calls
        from_runtime = runtime_syncs(launch_ev, ev["cuda_sync"]["corr"])
        ev["cuda_sync"] = concat(ev["cuda_sync"], from_runtime)

    strings = Strings()
    probes = launch_probes(launch_ev, gpu_ev, ev["cuda_sync"], flows, shift)
    (op_thread, span_thread), probe_thread, threads = thread_index(
        [op_ev, span_ev], probes, thread_names)
    ops, links, rank = read_ops(op_ev, op_thread, probes, probe_thread, strings, ours)
    by_ext = None
    if ours:   # export_chrome's file: links, flags and devices are explicit
        by_ext = dict(zip(arg_keys(op_ev["args"], "External id"), rank.tolist()))
        link_explicitly(gpu_ev, links, by_ext)
        link_explicitly(ev["cuda_sync"], links, by_ext)
        for col, bounds in (("device", DEVICES), ("stream", STREAMS)):
            ops[col][rank] = [int_arg(a.get("op " + col), NONE, bounds)
                              for a in op_ev["args"]]
    gpu = read_gpu(gpu_ev, links, strings, warnings, name, ours)
    syncs = read_syncs(ev["cuda_sync"], links, strings, ours, warnings, name)
    # a sync event sits on its stream's row: the thread that waited is its op's
    op_thread = np.asarray(ops["thread"], np.int64)
    syncs["thread"] = np.where(syncs["op"] >= 0, op_thread[np.maximum(syncs["op"], 0)],
                               NONE) if len(op_thread) else np.full(len(syncs["op"]), NONE)
    if not ours:
        flag_ops(ops, gpu, syncs, strings)
    spans = read_spans(span_ev, span_thread, strings, ours, kinds)
    # format 4's tables: with_flops, profile_memory and with_stack
    extra = {"flops": read_flops(op_ev, rank),
             "memory": read_memory(ev[MEMORY_EVENT], ops, threads, by_ext, warnings, name),
             "sources": read_sources(ops, op_ev, rank, span_ev, np.arange(len(spans["kind"])),
                                     ev["python_function"], threads, strings, ours)}
    progress("building", 0.95)

    meta = _meta(doc, name, threads, ev["Trace"], shift)
    meta.update(steps_meta)
    meta["import_counts"] = {c: len(cats[c]) for c in (*READ_CATEGORIES, *READ_INSTANTS)
                             if cats[c]}
    meta["import_skipped"] = dict(skipped)
    if not ours and len(from_runtime["name"]):
        meta["import_counts"]["syncs from runtime calls"] = len(from_runtime["name"])
    if any(k.startswith("ph ") for k in skipped):
        phases = sorted(k for k in skipped if k.startswith("ph "))
        warnings.append(f"Events of phase {', '.join(p[3:] for p in phases)} are "
                        f"not read (only complete 'X' events carry Kineto's "
                        f"ops and device work).")
    meta["import_warnings"] = warnings
    try:
        tl = Timeline({"ops": ops, "gpu": gpu, "syncs": syncs, "spans": spans, **extra},
                      strings, meta)
    except CutimelineError as exc:   # a value the checks above let through
        raise CutimelineError(f"{name} cannot be read: {exc}") from None
    check({n: tl.table(n) for n in SCHEMA}, tl.strings, tl.meta, f"{name} cannot be read")
    return tl


def _unread_devices(skipped: dict, has_gpu: bool, name: str, warnings: list[str]) -> None:
    """A trace of a device whose work Kineto writes in categories of its own
    (MTIA, Gaudi) is refused rather than read as a host-only run, which
    would report its device as absent; beside CUDA work it is a warning."""
    found = [c for c in UNREAD_DEVICE_CATEGORIES if skipped.get(c)]
    if not found:
        return
    what = ", ".join(f"{skipped[c]} {c} events ({UNREAD_DEVICE_CATEGORIES[c]} device work)"
                     for c in found)
    if not has_gpu:
        raise CutimelineError(
            f"{name} holds {what}, which cutimeline cannot read: it reads device work "
            f"only as Kineto's kernel, gpu_memcpy and gpu_memset events (CUDA, ROCm, "
            f"XPU and PrivateUse1 devices). To analyse the host side alone, record "
            f"with activities=[ProfilerActivity.CPU].")
    warnings.append(f"{name} holds {what}, which are not read; the analysis sees only "
                    f"the kernel, gpu_memcpy and gpu_memset rows.")


def _shift(doc: dict, name: str) -> int:
    """export_chrome's time shift (ns): it moves every time, so a damaged
    one is an error, not a warning."""
    shift = doc.get(SHIFT_KEY) or 0
    if type(shift) is not int or abs(shift) >= TIME_LIMIT_NS:
        raise CutimelineError(
            f"{name}: '{SHIFT_KEY}' is {_short(shift)}, not a whole number of ns "
            f"within ±2^62; the file is damaged (export it again with "
            f"ctl.export_chrome).")
    return shift


def _short(v: Any) -> str:
    """A JSON value for a message, cut short (a damaged one may be huge)."""
    text = repr(v) if type(v) in (int, float, str, bool, type(None)) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _plain(v: Any, depth: int = 6) -> Any:
    """``v`` as plain JSON for meta: containers ``depth`` levels deep at
    most, numbers finite and in int64 range; what is not is left out
    (None in its place at the top)."""
    if type(v) in (str, bool, type(None)):
        return v
    if type(v) is int:
        return v if INT64[0] <= v <= INT64[1] else None
    if type(v) is float:
        return v if math.isfinite(v) else None
    if depth and type(v) is list:
        return [x for x in (_plain(y, depth - 1) for y in v) if x is not None]
    if depth and type(v) is dict:
        return {k: x for k, x in ((k, _plain(x, depth - 1)) for k, x in v.items())
                if x is not None}
    return None


def _meta(doc: dict, name: str, threads: list, trace_ev: dict, shift: int) -> dict:
    base = int_arg(doc.get("baseTimeNanoseconds"), 0, (-TIME_LIMIT_NS, TIME_LIMIT_NS))
    base -= shift
    listed = _plain(doc.get("deviceProperties"), 3)
    devices = [d for d in listed if isinstance(d, dict)] if type(listed) is list else []
    dist = _plain(doc.get("distributedInfo"))
    trace_name, version = doc.get("traceName", ""), doc.get("schemaVersion")
    meta: dict[str, Any] = {
        "source": "kineto", "file": name, "aligned": True,
        "trace_name": trace_name if type(trace_name) is str else "",
        "schema_version": version if type(version) in (int, str) else None,
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
        rank = int_arg(dist.get("rank"), NONE, RANKS)
        world = int_arg(dist.get("world_size"), 0, RANKS)
        if rank != NONE:
            meta["rank"] = rank
        if world > 0:
            meta["world_size"] = world
    if len(trace_ev["begin"]):
        meta["profiler_window_ns"] = [int(trace_ev["begin"].min()),
                                      int(trace_ev["end"].max())]
    return meta
