"""Timeline → Chrome-trace JSON for Perfetto and chrome://tracing.

The export is laid out as Kineto lays out its own traces, so that the
Kineto import (``formats.kineto``, ``ctl.load``) reads it back and other
Kineto tools can read it too:

- a host process per host pid, a track per CPU thread: ops as ``cpu_op``
  slices, host spans as ``user_annotation`` (steps ``ProfilerStep#N``),
  each launch a zero-length ``cuda_runtime`` slice, a "syncs" track of
  ``cuda_sync`` slices;
- a GPU process per device (pid = device index), a track per stream:
  ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` slices carrying their
  launch's correlation id; ``ac2g`` flow arrows from each launching op;
- a queue-depth counter track per stream (``queue_depth``);
- source lines, FLOPs and memory where the Timeline has them
  (chromeevents.py);
- metadata events naming and ordering processes and threads, and
  before "traceEvents" Kineto's header keys, ``distributedInfo`` first
  where the Timeline has a rank.

HolisticTraceAnalysis 0.5 reads the file as a Kineto trace: correlation
ids start at 2^15 (its int narrowing overflowed on smaller ones), a
sync's stream is an arg of our own (an event with a "stream" and a
correlation id is GPU work to HTA), and the rank is ``"rank": N`` in the
first line (the form its file scan looks for).

Times are µs written as exact decimals of the integer ns (``12.345``):
nothing is lost. Beyond 2^43 µs, where a float µs cannot hold ns, they
are relative to a whole second kept in ``baseTimeNanoseconds`` and
``cutimelineTimeShiftNanoseconds`` (``_shift``). HTA rounds fractional µs
(begins up, ends down) unless ``HTA_DISABLE_NS_ROUNDING=1``; a file
whose times are all whole µs is written in integers, which it reads as
they are.

Each table's events are formatted as whole columns (chromeevents.py,
jsonrows.py) and written a chunk at a time, gzipped on every core for a
.gz path (chunkwriter.py, gzipstream.py): no Python object per row,
memory a few chunks.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import CutimelineError
from ..numeric.queuedepth import stream_depths
from ..text import need_path
from ..timeline import destination
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline, as_timeline
from . import chromeevents as ev
from .chromeevents import HOST_PID, LAUNCH_TID, SYNC_TID
from .chunkwriter import write_chunks
from .gzipstream import AUTO, codec as find_codec
from .kineto.schema import EXPORTER, SHIFT_KEY

__all__ = ["export_chrome", "queue_depth", "depth_points"]

# Float µs hold ns exactly below 2^43 µs (see kineto.tracefile.to_ns).
EXACT_LIMIT_NS = (1 << 43) * 1000
# Below this many rows one thread formats faster than a pool starts.
POOL_ROWS = 20_000


def export_chrome(tl: Timeline, path: str | os.PathLike, *, codec: str = AUTO) -> None:
    """Write ``tl`` as Chrome-trace JSON (gzip when ``path`` ends in .gz).

    The GPU rows must be on the host clock (an aligned Timeline: recorded
    ones are aligned at stop, imported ones always are). ``codec``, for a
    .gz path: "auto" (ISA-L's igzip when the ``isal`` package is installed,
    else zlib), "isal" or "zlib"; the file gunzips to the same bytes
    whichever deflated it."""
    tl = as_timeline(tl, "export_chrome")
    path = need_path(path, "path", "export_chrome")
    find_codec(codec)   # a bad or missing codec fails before any work
    if len(tl.gpu) and not tl.aligned:
        raise CutimelineError(
            "The Timeline is not aligned: its GPU times are still on the "
            "device clock, so they cannot share a time axis with the host; "
            "align it first with cutimeline.alignment.align(tl).")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CutimelineError(f"Cannot export to {path}: the folder {directory} "
                              f"does not exist; create it first.")
    shift = _shift(tl)
    rows = len(tl.ops) + 3 * len(tl.gpu) + len(tl.syncs) + len(tl.spans) + len(tl.memory)
    # the target is replaced only once whole, and only if it is a regular
    # file (timeline/destination.py: the policy save and plot share)
    with destination.replacing(path) as raw:
        pool = rows >= POOL_ROWS
        write_chunks(raw, _jobs(tl, shift, ahead=pool), gzip=path.endswith(".gz"),
                     threads=None if pool else 1, codec=codec)


def queue_depth(tl: Timeline) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Work launched but not finished, per (device, stream): times (ns) at
    which the depth changes and the depth from each time on.

    The model is ``numeric.queuedepth``'s, the one ``Report.queue_depth``
    reads: work enters the queue at its launch (``launch_ns``) and leaves
    at its end; work with no launch time is not counted."""
    dev, stream, t, depth = depth_points(tl)
    cut = np.flatnonzero((dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])) + 1
    bounds = np.concatenate([[0], cut, [len(t)]]) if len(t) else np.zeros(1, np.int64)
    return {(int(dev[a]), int(stream[a])): (t[a:b], depth[a:b])
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())}


def depth_points(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``queue_depth`` as columns (device, stream, time ns, depth), sorted
    by device, stream and time (``numeric.queuedepth.stream_depths``)."""
    g = tl.gpu
    return stream_depths(g.device, g.stream, g.launch_ns, g.begin_ns, g.end_ns)


def _shift(tl: Timeline) -> int:
    """The ns subtracted from every time: 0, or a whole second when times
    are too large for a float µs to hold ns."""
    times = [a for a in _times(tl) if len(a)]
    largest = max((max(int(a.max()), -int(a.min())) for a in times), default=0)
    if largest < EXACT_LIMIT_NS:
        return 0
    earliest = min(int(a.min()) for a in times)
    shift = (earliest // 10**9) * 10**9
    if shift < -2**63:
        raise CutimelineError(
            f"The Timeline holds a time of {earliest} ns, too close to the "
            f"least int64 for a trace to hold; drop or fix that row first.")
    return shift


def _jobs(tl: Timeline, shift: int, ahead: bool = False) -> Iterator[Callable[[], Any]]:
    """The file, as functions that each return the next chunk of it.
    ``ahead``: sort the queue depth's points in a thread of its own while
    the rows before them are written (done here, between chunks, its sort
    left the workers idle: 0.1-0.3 s at 10^6 gpu rows)."""
    early = ThreadPoolExecutor(1, thread_name_prefix="cutimeline-depth") if ahead else None
    try:
        depth = early.submit(depth_points, tl).result if early else functools.partial(
            depth_points, tl)
        hosts = _host_tracks(tl)
        # The header comes first, on a line of its own, as Kineto writes it:
        # HolisticTraceAnalysis finds a file's rank by the first line that
        # matches '"rank":\s+N' (json.dumps' ": " has the space it needs),
        # and its streaming parser reads no key after "traceEvents".
        header = json.dumps(_header(tl, shift), allow_nan=False)
        head = (header[:-1] + ',\n"traceEvents": [\n'
                + ",\n".join(_metadata(tl, hosts)))
        yield functools.partial(str.encode, head)
        lay = ev.Layout(tl, hosts, shift)
        templates = [ev.op_rows, ev.span_rows, ev.gpu_rows, ev.sync_rows,
                     lambda lay: ev.counter_rows(lay, *depth())]
        if len(tl.memory):
            templates.append(ev.memory_rows)
        for template in templates:
            rows = template(lay)
            for a, b in rows.ranges():
                yield functools.partial(rows.render, a, b)
        yield functools.partial(str.encode, "\n]}")
    finally:
        if early:
            early.shutdown(wait=True, cancel_futures=True)


def _host_tracks(tl: Timeline) -> list[tuple[int, int]]:
    """(pid, tid) of each thread index used by ops or spans."""
    n = 1 + max([int(a.max()) for a in (tl.ops.thread, tl.spans.thread) if len(a)] + [0])
    info = tl.meta.get("threads") or []
    devices = set(np.unique(tl.gpu.device).tolist())
    tracks = []
    for i in range(n):
        t = info[i] if i < len(info) and isinstance(info[i], dict) else {}
        pid, tid = t.get("pid"), t.get("tid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid in devices:
            pid = HOST_PID
        if not isinstance(tid, int) or isinstance(tid, bool):
            tid = i
        tracks.append((pid, tid))
    if len(set(tracks)) < len(tracks):   # names collided: number them
        tracks = [(HOST_PID, i) for i in range(n)]
    return tracks


def _metadata(tl: Timeline, hosts: list[tuple[int, int]]) -> list[str]:
    """The events naming and ordering processes and threads."""
    meta, out = tl.meta, []
    rank = meta.get("rank")
    host = "Host" + (f" (rank {rank})" if isinstance(rank, int) else "")
    info = meta.get("threads") or []
    for pid in sorted({p for p, _ in hosts} | {HOST_PID}):
        out.append(_meta_event("process_name", pid, 0, {"name": host}))
        out.append(_meta_event("process_sort_index", pid, 0, {"sort_index": 0}))
        out.append(_meta_event("thread_name", pid, SYNC_TID,
                               {"name": "syncs (host waits for the GPU)"}))
        out.append(_meta_event("thread_name", pid, LAUNCH_TID,
                               {"name": "launches from unknown ops"}))
    for i, (pid, tid) in enumerate(hosts):
        given = info[i].get("name") if i < len(info) and isinstance(info[i], dict) else ""
        out.append(_meta_event("thread_name", pid, tid, {"name": given or f"thread {i}"}))
        out.append(_meta_event("thread_sort_index", pid, tid, {"sort_index": i}))
    names = meta.get("device_names") or {}
    g = tl.gpu
    for dev in np.unique(g.device).tolist():
        label = f"GPU {dev}" + (f": {names[str(dev)]}" if names.get(str(dev)) else "")
        out.append(_meta_event("process_name", dev, 0, {"name": label}))
        out.append(_meta_event("process_sort_index", dev, 0, {"sort_index": 1 + dev}))
        for k, s in enumerate(np.unique(g.stream[g.device == dev]).tolist()):
            out.append(_meta_event("thread_name", dev, s, {"name": f"stream {s}"}))
            out.append(_meta_event("thread_sort_index", dev, s, {"sort_index": k}))
    return out


def _header(tl: Timeline, shift: int) -> dict[str, Any]:
    """The keys beside "traceEvents"; "distributedInfo" (where the Timeline
    has a rank) right after "schemaVersion", so that its "rank" is the
    first in the file."""
    meta = tl.meta
    head: dict[str, Any] = {"schemaVersion": 1}
    info = meta.get("distributed")
    rank = info.get("rank") if isinstance(info, dict) else meta.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        rest = info if isinstance(info, dict) else {"world_size": meta.get("world_size", 1)}
        head["distributedInfo"] = {"rank": rank, **{k: v for k, v in rest.items()
                                                    if k != "rank"}}
    elif isinstance(info, dict):
        head["distributedInfo"] = info
    head.update({"displayTimeUnit": "ms",
                 "traceName": str(meta.get("file") or meta.get("trace_name") or "cutimeline"),
                 "exportedBy": f"{EXPORTER} {__version__}"})
    base = int(meta.get("base_time_ns", 0) or 0)
    if base or shift:
        head["baseTimeNanoseconds"] = base + shift
    if shift:
        head[SHIFT_KEY] = shift
    if meta.get("devices"):
        head["deviceProperties"] = meta["devices"]
    return head


def _times(tl: Timeline) -> list[np.ndarray]:
    o, g, s, y = tl.ops, tl.gpu, tl.spans, tl.syncs
    return [o.host_begin_ns, o.host_end_ns, g.begin_ns, g.end_ns,
            g.launch_ns[g.launch_ns != NONE], s.begin_ns, s.end_ns,
            y.host_begin_ns, y.host_end_ns, tl.memory.host_ns]


def _meta_event(name: str, pid: int, tid: int, args: dict) -> str:
    return (f'{{"ph": "M", "name": "{name}", "pid": {pid}, "tid": {tid}, '
            f'"ts": 0, "args": {json.dumps(args)}}}')
