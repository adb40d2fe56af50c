"""torch.profiler (Kineto) traces → Timeline.

A Kineto trace is Chrome-trace JSON: complete ("X") events in categories
``cpu_op`` (aten ops), ``user_annotation`` (record_function ranges,
``ProfilerStep#N``), ``cuda_runtime``/``cuda_driver`` (launch calls, also
``hip*`` on ROCm), ``kernel``/``gpu_memcpy``/``gpu_memset`` (device work) and
``cuda_sync``. Device work names its launch call by ``args.correlation``; the
launch call lies inside the aten op that made it, on the same thread, so the
innermost enclosing ``cpu_op`` is the launching op. Traces whose launch calls
are missing fall back on ``ac2g`` flow starts, which sit at the launch.

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
import re
from typing import Any, Callable

import numpy as np

from ..errors import CutimelineError
from .tracefile import bucket_events, columns, concat, read_trace, take, to_ns
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.table import Strings
from ..timeline.timeline import Timeline

__all__ = ["import_chrome"]

GPU_CATEGORIES = {"kernel": GpuKind.KERNEL, "gpu_memcpy": GpuKind.MEMCPY,
                  "gpu_memset": GpuKind.MEMSET}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
READ_CATEGORIES = ("cpu_op", "user_annotation", "cuda_sync", "Trace",
                   *GPU_CATEGORIES, *LAUNCH_CATEGORIES)
# Kineto writes the "no stream" of device-wide syncs both ways.
NO_STREAM = (-1, 4294967295)
# cudaStreamWaitEvent: a device-side wait, the host does not block.
NON_BLOCKING_SYNCS = ("Stream Wait Event",)
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
# Written by export_chrome when it shifted times to keep ns precision.
SHIFT_KEY = "cutimelineTimeShiftNanoseconds"
# Written by export_chrome so kinds Kineto lacks (op, graph) survive.
KIND_ARG = "cutimeline kind"
# export_chrome's "exportedBy": its External ids link GPU work to ops exactly.
EXPORTER = "cutimeline"


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
                                                       READ_CATEGORIES)
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


# -- host side ------------------------------------------------------------------
def _thread_index(threads: list[dict], probes: dict, names: dict):
    """Thread index of each op/span event (one array per part of
    ``threads``) and of each probe, numbering the (pid, tid) pairs of ops
    and spans in order of first activity; and those threads' pid, tid and
    name. A probe on another track gets an index past them, holding none."""
    raw: dict[tuple, int] = {}
    ids = [np.array([raw.setdefault(k, len(raw)) for k in zip(p["pid"], p["tid"])],
                    np.int64) for p in threads]
    first = np.full(len(raw), np.iinfo(np.int64).max)
    for i, p in zip(ids, threads):
        np.minimum.at(first, i, p["begin"])
    keys = list(raw)
    order = sorted(range(len(keys)), key=lambda j: (int(first[j]), str(keys[j])))
    renum = {keys[j]: k for k, j in enumerate(order)}
    info = [{"pid": keys[j][0], "tid": keys[j][1], "name": names.get(keys[j], "")}
            for j in order]
    probe = np.array([renum.setdefault(k, len(renum)) for k in zip(probes["pid"],
                                                                    probes["tid"])], np.int32)
    table = np.array([renum[k] for k in keys], np.int32)
    return [table[i] for i in ids], probe, info


def _probes(launch_ev: dict, gpu_ev: dict, sync_ev: dict, flows: dict,
            shift: int) -> dict:
    """The launch calls that device work or a sync refers to, and flow starts
    standing in for launch calls the trace lacks (their launch time NONE)."""
    wanted = {a.get("correlation") for a in gpu_ev["args"]}
    wanted |= {a.get("correlation") for a in sync_ev["args"]}
    wanted.discard(None)
    rt = [i for i, a in enumerate(launch_ev["args"]) if a.get("correlation") in wanted]
    corr = [launch_ev["args"][i]["correlation"] for i in rt]
    fl = [(c, flows[c]) for c in wanted.difference(corr) if c in flows]
    fl = [(c, f, ns + shift) for c, f in fl if (ns := _flow_ns(f)) != NONE]
    begin = np.concatenate([launch_ev["begin"][rt], np.array([x[2] for x in fl], np.int64)])
    return {"corr": corr + [x[0] for x in fl],
            "pid": [launch_ev["pid"][i] for i in rt] + [x[1].get("pid") for x in fl],
            "tid": [launch_ev["tid"][i] for i in rt] + [x[1].get("tid") for x in fl],
            "begin": begin,
            "launch": np.concatenate([begin[:len(rt)], np.full(len(fl), NONE, np.int64)])}


def _nest(thread: np.ndarray, begin: np.ndarray, end: np.ndarray, n_items: int,
          own: np.ndarray):
    """Nesting of intervals per thread, and the innermost interval holding
    each probe (a launch call or flow start).

    The first ``n_items`` rows are intervals, the rest probes (their end is
    unused). ``own`` holds a value per interval that its descendants inherit
    unless they have their own (NONE: inherit). Returns the depth and the
    inherited value of each interval, and each probe's owner row (NONE:
    none)."""
    probe = np.arange(len(begin)) >= n_items
    order = np.lexsort((-(end - begin), probe, begin, thread)).tolist()
    th, b, e, mine = thread.tolist(), begin.tolist(), end.tolist(), own.tolist()
    depth, value = [0] * n_items, [NONE] * n_items
    owner = [NONE] * (len(b) - n_items)
    stack_end: list[int] = []
    stack_row: list[int] = []
    current = None
    for k in order:
        if th[k] != current:
            current, stack_end, stack_row = th[k], [], []
        t = b[k]
        if k < n_items:
            # An interval that ended at t does not hold one that begins at t.
            while stack_end and stack_end[-1] <= t:
                stack_end.pop(), stack_row.pop()
            depth[k] = len(stack_row)
            v = mine[k]
            value[k] = v if v != NONE else (value[stack_row[-1]] if stack_row else NONE)
            stack_end.append(e[k])
            stack_row.append(k)
        else:
            # A probe at an interval's last instant still belongs to it.
            while stack_end and stack_end[-1] < t:
                stack_end.pop(), stack_row.pop()
            owner[k - n_items] = stack_row[-1] if stack_row else NONE
    return (np.array(depth, np.int64), np.array(value, np.int64),
            np.array(owner, np.int64))


def _signature(args: dict) -> str:
    """A shape/dtype signature from Kineto's ``Input Dims``/``Input type``,
    one ``dtype[dims]`` per input: "float[32,3,224,224], float[64], Scalar"."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if dims is None and types is None:
        shapes = args.get("Shapes")   # written by export_chrome
        return shapes if isinstance(shapes, str) else ""
    dims, types = dims or [], types or []
    parts = []
    for i in range(max(len(dims), len(types))):
        t = str(types[i]) if i < len(types) else ""
        d = dims[i] if i < len(dims) else []
        parts.append(t + (str(d).replace(" ", "") if d != [] else ""))
    return ", ".join(parts)


def _ops(op_ev: dict, thread: np.ndarray, probes: dict, probe_thread: np.ndarray,
         strings: Strings, ours: bool) -> tuple[dict, dict, np.ndarray]:
    """The ops table (time order; export_chrome's files keep theirs), the
    links: correlation id → (op row, launch ns), and each event's op row."""
    n = len(op_ev["name"])
    intern = strings.intern
    name_id = np.array([intern(s) for s in op_ev["name"]], np.int32)
    grad_own = {strings.ids[s]: intern(s[len(BACKWARD_PREFIX):])
                for s in set(op_ev["name"]) if s.startswith(BACKWARD_PREFIX)}
    own = np.array([grad_own.get(i, NONE) for i in name_id.tolist()], np.int64)
    depth, grad, owner = _nest(np.concatenate([thread, probe_thread]),
                               np.concatenate([op_ev["begin"], probes["begin"]]),
                               np.concatenate([op_ev["end"], probes["begin"]]), n, own)
    # Time order; at equal begin the enclosing (longer) op first.
    order = np.arange(n) if ours else np.lexsort(
        (-(op_ev["end"] - op_ev["begin"]), thread, op_ev["begin"]))
    rank = np.empty(n + 1, np.int64)
    rank[order], rank[n] = np.arange(n), NONE  # rank[NONE] is NONE

    shapes = np.array([intern(_signature(a)) for a in op_ev["args"]], np.int32)
    flags = np.array([_named_flags(a) for a in op_ev["args"]], np.uint8)
    seq = [_int(a.get("External id"), i) for i, a in enumerate(op_ev["args"])] if ours \
        else np.arange(n)
    ops = {"seq": np.asarray(seq, np.int64), "thread": thread[order], "name": name_id[order],
           "shapes": shapes[order], "module": np.full(n, NONE), "grad_fn": grad[order],
           "device": np.full(n, NONE), "stream": np.full(n, NONE),
           "flags": flags[order],
           "depth": depth[order], "host_begin_ns": op_ev["begin"][order],
           "host_end_ns": op_ev["end"][order]}
    links = dict(zip(probes["corr"], zip(rank[owner].tolist(), probes["launch"].tolist())))
    return ops, links, rank[:n]


def _named_flags(args: dict) -> int:
    """COLLECTIVE for c10d ops, and the flags export_chrome wrote by name."""
    flags = int(OpFlag.COLLECTIVE) if "Collective name" in args else 0
    named = args.get("flags")
    if isinstance(named, str):
        for part in named.split("|"):
            flags |= int(OpFlag.__members__.get(part, 0))
    return flags


def _link_explicitly(cols: dict, links: dict, by_ext: dict) -> None:
    """In export_chrome's files each GPU row and sync names its op's
    External id, which beats nesting where ops begin at one instant."""
    for a in cols["args"]:
        corr = a.get("correlation")
        if corr is not None:
            links[corr] = (by_ext.get(a.get("External id"), NONE),
                           links.get(corr, (NONE, NONE))[1])


def _flow_ns(f: dict) -> int:
    try:
        return int(to_ns(np.array([float(f.get("ts"))]))[0])
    except (TypeError, ValueError):
        return NONE


def _int(v: Any, default: int) -> int:
    """An int from a Kineto arg (ints, or hex strings such as "0x0")."""
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return default
    return default


# -- device side ------------------------------------------------------------------
def _gpu(gpu_ev: dict, links: dict, strings: Strings, warnings: list[str],
         name: str, ours: bool) -> dict:
    """One gpu row per kernel/memcpy/memset, in begin order (export_chrome's
    files keep theirs)."""
    args = gpu_ev["args"]
    n = len(args)
    intern = strings.intern
    kinds = {k.name.lower(): int(k) for k in GpuKind}
    kind = np.empty(n, np.uint8)
    for i, (nm, cat, a) in enumerate(zip(gpu_ev["name"], gpu_ev["cat"], args)):
        k = kinds.get(a.get(KIND_ARG), GPU_CATEGORIES[cat])
        if k == GpuKind.KERNEL and "nccl" in nm.lower():
            k = GpuKind.COLLECTIVE   # NCCL (and RCCL) communication kernels
        kind[i] = k
    link = [links.get(a.get("correlation"), (NONE, NONE)) for a in args]
    op = np.array([lk[0] for lk in link], np.int64)
    unlinked = int(sum(lk == (NONE, NONE) for lk in link))
    if unlinked:
        warnings.append(
            f"{unlinked} of {n} GPU rows in {name} have no launch call in the "
            f"trace (most likely launched before the profiler started), so "
            f"their op is NONE.")
    rows = {"op": op, "launch_ns": np.array([lk[1] for lk in link], np.int64),
            "device": np.array([_int(a.get("device"), _int(p, 0))
                                for a, p in zip(args, gpu_ev["pid"])], np.int64),
            "stream": np.array([_int(a.get("stream"), _int(t, NONE))
                                for a, t in zip(args, gpu_ev["tid"])], np.int64),
            "name": np.array([intern(s) for s in gpu_ev["name"]], np.int32),
            "kind": kind, "begin_ns": gpu_ev["begin"], "end_ns": gpu_ev["end"]}
    if ours:   # correlation ids are row numbers + 1 there
        order = np.argsort([_int(a.get("correlation"), 0) for a in args], kind="stable")
    else:
        order = np.lexsort((rows["stream"], rows["device"], rows["begin_ns"]))
    return {k: v[order] for k, v in rows.items()}


def _syncs(sync_ev: dict, links: dict, strings: Strings, ours: bool) -> dict:
    """One syncs row per cuda_sync event; kind is its name ("Stream Sync")."""
    args = sync_ev["args"]
    stream = np.array([_int(a.get("stream"), NONE) for a in args], np.int64)
    rows = {"op": np.array([links.get(a.get("correlation"), (NONE,))[0] for a in args],
                           np.int64),
            "kind": np.array([strings.intern(s) for s in sync_ev["name"]], np.int32),
            "device": np.array([_int(a.get("device"), _int(p, NONE))
                                for a, p in zip(args, sync_ev["pid"])], np.int64),
            "stream": np.where(np.isin(stream, NO_STREAM), NONE, stream),
            "host_begin_ns": sync_ev["begin"], "host_end_ns": sync_ev["end"]}
    order = np.arange(len(args)) if ours else np.argsort(rows["host_begin_ns"],
                                                          kind="stable")
    return {k: v[order] for k, v in rows.items()}


def _flag_ops(ops: dict, gpu: dict, syncs: dict, strings: Strings) -> None:
    """LAUNCH (and device, stream of the first work), COLLECTIVE and SYNC."""
    flags = ops["flags"]
    linked = gpu["op"] >= 0
    op, first = np.unique(gpu["op"][linked], return_index=True)
    flags[op] |= int(OpFlag.LAUNCH)
    ops["device"][op] = gpu["device"][linked][first]
    ops["stream"][op] = gpu["stream"][linked][first]
    coll = gpu["op"][linked & (gpu["kind"] == GpuKind.COLLECTIVE)]
    flags[coll] |= int(OpFlag.COLLECTIVE)
    waits = [strings.ids[s] for s in NON_BLOCKING_SYNCS if s in strings.ids]
    blocking = (syncs["op"] >= 0) & ~np.isin(syncs["kind"], waits)
    flags[syncs["op"][blocking]] |= int(OpFlag.SYNC)


def _span_kind(name: str, args: dict) -> tuple[int, int]:
    """(SpanKind, step number or NONE) of a record_function range."""
    m = STEP_RE.match(name)
    if m:
        return SpanKind.STEP, int(m.group(1))
    given = str(args.get(KIND_ARG, "")).upper()
    if given in SpanKind.__members__:
        return SpanKind[given], NONE
    if name.startswith("enumerate(DataLoader)"):
        return SpanKind.DATA, NONE
    if name.startswith("Optimizer."):   # Optimizer.step#SGD.step, .zero_grad
        return SpanKind.OPTIMIZER, NONE
    return SpanKind.USER, NONE


def _spans(span_ev: dict, thread: np.ndarray, strings: Strings, ours: bool) -> dict:
    n = len(span_ev["name"])
    kind_number = [_span_kind(s, a) for s, a in zip(span_ev["name"], span_ev["args"])]
    # export_chrome keeps a span's own name beside its Kineto one.
    names = [a.get("name") if isinstance(a.get("name"), str) and KIND_ARG in a else s
             for s, a in zip(span_ev["name"], span_ev["args"])]
    depth, _, _ = _nest(thread, span_ev["begin"], span_ev["end"], n,
                        np.full(n, NONE, np.int64))
    rows = {"kind": np.array([k for k, _ in kind_number], np.uint8),
            "number": np.array([x for _, x in kind_number], np.int64),
            "name": np.array([strings.intern(s) for s in names], np.int32),
            "thread": thread, "depth": depth,
            "begin_ns": span_ev["begin"], "end_ns": span_ev["end"]}
    order = np.arange(n) if ours else np.lexsort(
        (-(rows["end_ns"] - rows["begin_ns"]), rows["begin_ns"]))
    return {k: v[order] for k, v in rows.items()}


# -- meta -------------------------------------------------------------------------
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
