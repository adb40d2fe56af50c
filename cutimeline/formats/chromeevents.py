"""The events of a Chrome-trace export, as JSON text templates of whole
tables (``jsonrows.Rows``): each row of ops, spans, gpu, syncs and memory,
and each point of the queue-depth counters, with the events the Kineto
layout gives it (see chrome.py). Every event is preceded by ",\\n".

The tables of format 4 ride along where they have rows: an op's or span's
``sources`` row as args "source" ("train.py:57"), "function" and "code"
(the line's text); an op's FLOPs as args "flops" (a whole number, as
torch.profiler's ``with_flops`` writes it); each ``memory`` row as a point
of a "GPU memory" counter per device (args "allocated_bytes": bytes in
use, for Perfetto) and as a Kineto ``[memory]`` instant event on its op's
thread (what ``profile_memory=True`` writes; the import reads it back)."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.timeline import Timeline
from .jsonrows import Fragments, Rows, escape
from .kineto.schema import FREED_ARG, KIND_ARG, SYNC_STREAM_ARG

__all__ = ["Layout", "op_rows", "span_rows", "gpu_rows", "sync_rows", "counter_rows",
           "memory_rows", "HOST_PID", "SYNC_TID", "LAUNCH_TID", "FIRST_CORRELATION"]

HOST_PID = 1 << 20   # a pid no device index reaches
SYNC_TID = 1 << 30   # the host "syncs" track, apart from every thread
LAUNCH_TID = SYNC_TID + 1   # launches of GPU work whose op is unknown
# Correlation ids count from 2^15: HolisticTraceAnalysis narrows the column
# to the smallest int that holds its ids, then writes event row numbers
# into a copy of it. Ids all under 2^15 made that int16 (int8 under 128),
# and a file of more events failed there (a TypeError under pandas 3); from
# 2^15 on it is int32 at least, which holds any row number.
FIRST_CORRELATION = 1 << 15
GPU_CATEGORY = {GpuKind.MEMCPY: "gpu_memcpy", GpuKind.MEMSET: "gpu_memset"}
LAUNCH_NAME = {GpuKind.MEMCPY: "cudaMemcpyAsync", GpuKind.MEMSET: "cudaMemsetAsync"}
SYNC_CALL = {"Stream Sync": "cudaStreamSynchronize", "Event Sync": "cudaEventSynchronize",
             "Context Sync": "cudaDeviceSynchronize",
             "Stream Wait Event": "cudaStreamWaitEvent"}


class Layout:
    """What the templates of one export share: the escaped string table
    (NONE: ""), each thread's host track, and the time shift (ns)."""

    def __init__(self, tl: Timeline, hosts: list[tuple[int, int]], shift: int):
        self.tl, self.shift = tl, shift
        self.strings = Fragments(escape(tl.strings) + ['""'])
        # Threads outside the named tracks (negative ones) get a track of
        # their own number; then the launcher of unknown ops, then the
        # process-wide host track of syncs that have no op.
        threads = np.concatenate([tl.ops.thread, tl.spans.thread])
        self.negative = np.unique(threads[threads < 0])
        tracks = hosts + [(HOST_PID, int(t)) for t in self.negative]
        self.n_hosts = len(hosts)
        self.launcher, self.host = len(tracks), len(tracks) + 1
        tracks += [(HOST_PID, LAUNCH_TID), (HOST_PID, 0)]
        self.pidtid = Fragments([f'"pid": {p}, "tid": {t}' for p, t in tracks])
        self.pid = Fragments([f'"pid": {p}' for p, _ in tracks])
        self.open_strings = None   # each string without its closing quote, when needed

    def source_of(self, column: str, n: int) -> np.ndarray:
        """The ``sources`` row of each of the n rows of ops or spans
        (``column``: "op" or "span"), NONE for none; the first of several."""
        src = self.tl.sources
        out = np.full(n, NONE, np.int64)
        rows = np.flatnonzero(src[column] != NONE)
        refs, first = np.unique(src[column][rows], return_index=True)
        out[refs] = rows[first]
        return out

    def track(self, thread: np.ndarray) -> np.ndarray:
        """The track id of each thread index."""
        thread = thread.astype(np.int64)
        neg = thread < 0
        if not neg.any():
            return thread
        return np.where(neg, self.n_hosts + np.searchsorted(self.negative, thread), thread)

    def op_track(self, op: np.ndarray, otherwise: int) -> np.ndarray:
        """The track of each row's op (``otherwise`` where it has none)."""
        return np.where(op != NONE, self.track(_at(self.tl.ops.thread, op)), otherwise)


def op_rows(lay: Layout) -> Rows:
    o, strings = lay.tl.ops, lay.strings
    dev = o.device != NONE   # not "stream": Kineto tools take that for GPU work
    r = Rows(len(o)).text(',\n{"ph": "X", "cat": "cpu_op", "name": ').pick(strings, o["name"])
    r.text(", ").pick(lay.pidtid, lay.track(o.thread))
    r.text(', "ts": ').us(o.host_begin_ns, minus=lay.shift)
    r.text(', "dur": ').us(o.host_end_ns, minus=o.host_begin_ns)
    r.text(', "args": {"External id": ').int(o.seq)
    r.text(', "op device": ', dev).int(o.device, dev)
    r.text(', "op stream": ', dev).int(o.stream, dev)
    for key, col in (("Shapes", o.shapes), ("grad_fn", o.grad_fn), ("module", o.module)):
        has = col != NONE
        r.text(f', "{key}": ', has).pick(strings, col, has)
    flags = [f', "flags": "{"|".join(f.name for f in OpFlag if v & f)}"' if v else ""
             for v in range(256)]
    r.pick(Fragments(flags), o.flags)
    fl = lay.tl.flops
    if len(fl):
        flops = np.zeros(len(o), np.float64)
        flops[fl.op] = fl.flops
        has = flops > 0
        r.text(', "flops": ', has).int(np.rint(np.minimum(flops, 2.0**62)).astype(np.int64), has)
    _sources(r, lay, "op", len(o))
    return r.text("}}")


def span_rows(lay: Layout) -> Rows:
    s = lay.tl.spans
    kinds = _enum_names(s.kind, SpanKind, "spans.kind")
    step = s.kind == SpanKind.STEP
    other = ~step
    r = Rows(len(s)).text(',\n{"ph": "X", "cat": "user_annotation", "name": ')
    r.text('"ProfilerStep#', step).int(s.number, step).text('"', step)
    r.pick(lay.strings, s["name"], other)
    r.text(", ").pick(lay.pidtid, lay.track(s.thread))
    r.text(', "ts": ').us(s.begin_ns, minus=lay.shift)
    r.text(', "dur": ').us(s.end_ns, minus=s.begin_ns)
    r.text(f', "args": {{"{KIND_ARG}": "').pick(kinds, s.kind)
    r.text('", "name": ').pick(lay.strings, s["name"])
    _sources(r, lay, "span", len(s))
    return r.text("}}")


def _sources(r: Rows, lay: Layout, column: str, n: int) -> None:
    """Args "source": "file:line", "function" and "code" of the rows with a
    ``sources`` row (nothing at all when the table is empty)."""
    if not len(lay.tl.sources):
        return
    row = lay.source_of(column, n)
    has = row != NONE
    if not has.any():
        return
    src = lay.tl.sources
    file, line, func, code = (_at(src[c], row) for c in ("file", "line", "function", "code"))
    if lay.open_strings is None:
        lay.open_strings = Fragments([t[:-1] for t in escape(lay.tl.strings)] + ['"'])
    file = np.where(has & (file != NONE), file, NONE)
    r.text(', "source": ', has).pick(lay.open_strings, file, has)
    r.text(":", has).int(line, has).text('"', has)
    named = has & (func != NONE)
    r.text(', "function": ', named).pick(lay.strings, np.where(named, func, NONE), named)
    quoted = has & (code != NONE)
    r.text(', "code": ', quoted).pick(lay.strings, np.where(quoted, code, NONE), quoted)


def gpu_rows(lay: Layout) -> Rows:
    """Each GPU slice, its launch call and its flow arrow; correlation ids
    are ``FIRST_CORRELATION`` + row index."""
    g, o = lay.tl.gpu, lay.tl.ops
    n = len(g)
    corr = FIRST_CORRELATION + np.arange(n)
    has_op, launched = g.op != NONE, g.launch_ns != NONE
    launcher = lay.op_track(g.op, lay.launcher)   # launched from a thread it does not know
    cat = _enum_names(g.kind, GpuKind, "gpu.kind",
                      lambda k: GPU_CATEGORY.get(k, "kernel"))
    call = _enum_names(g.kind, GpuKind, "gpu.kind",
                       lambda k: LAUNCH_NAME.get(k, "cudaLaunchKernel"))
    r = Rows(n).text(',\n{"ph": "X", "cat": "').pick(cat, g.kind)
    r.text('", "name": ').pick(lay.strings, g["name"])
    r.text(', "pid": ').int(g.device).text(', "tid": ').int(g.stream)
    r.text(', "ts": ').us(g.begin_ns, minus=lay.shift)
    r.text(', "dur": ').us(g.end_ns, minus=g.begin_ns)
    r.text(', "args": {"device": ').int(g.device).text(', "stream": ').int(g.stream)
    r.text(', "correlation": ').int(corr)
    r.text(f', "{KIND_ARG}": "').pick(_enum_names(g.kind, GpuKind, "gpu.kind"), g.kind)
    r.text('"').text(', "External id": ', has_op).int(_at(o.seq, g.op), has_op).text("}}")
    r.text(',\n{"ph": "X", "cat": "cuda_runtime", "name": "', launched)
    r.pick(call, g.kind, launched).text('", ', launched).pick(lay.pidtid, launcher, launched)
    r.text(', "ts": ', launched).us(g.launch_ns, launched, minus=lay.shift)
    r.text(', "dur": 0, "args": {"correlation": ', launched).int(corr, launched)
    r.text("}}", launched)
    # The arrow leaves the launch call, or the op's begin when unknown.
    at = np.where(launched, g.launch_ns, _at(o.host_begin_ns, g.op))
    r.text(',\n{"ph": "s", "id": ', has_op).int(corr, has_op)
    r.text(', "cat": "ac2g", "name": "ac2g", ', has_op).pick(lay.pidtid, launcher, has_op)
    r.text(', "ts": ', has_op).us(at, has_op, minus=lay.shift)
    r.text('},\n{"ph": "f", "id": ', has_op).int(corr, has_op)
    r.text(', "cat": "ac2g", "name": "ac2g", "pid": ', has_op).int(g.device, has_op)
    r.text(', "tid": ', has_op).int(g.stream, has_op)
    r.text(', "ts": ', has_op).us(g.begin_ns, has_op, minus=lay.shift)
    return r.text(', "bp": "e"}', has_op)


def sync_rows(lay: Layout) -> Rows:
    """Each sync, and the blocking call on its op's track where the sync
    begins within the op; correlation ids follow the GPU rows'. The stream
    waited on is arg ``SYNC_STREAM_ARG``, not Kineto's "stream": an event
    with a "stream" and a correlation id is GPU work to HolisticTraceAnalysis,
    which would count the host's wait as busy GPU time."""
    tl, y, o = lay.tl, lay.tl.syncs, lay.tl.ops
    corr = FIRST_CORRELATION + len(tl.gpu) + np.arange(len(y))
    has_op = y.op != NONE
    kinds, which = np.unique(y.kind, return_inverse=True)
    names = [tl.string(int(k)) or "sync" for k in kinds]
    begin, end = _at(o.host_begin_ns, y.op), _at(o.host_end_ns, y.op)
    blocking = has_op & (begin <= y.host_begin_ns) & (y.host_begin_ns <= end)
    calls = [SYNC_CALL.get(k) for k in names]
    known = np.array([c is not None for c in calls] + [False], bool)
    call = np.where(known[which], which, len(names) + (y.stream != NONE))
    track = lay.op_track(y.op, lay.host)
    kind = Fragments([json.dumps(k) for k in names] + ['""'])
    r = Rows(len(y)).text(',\n{"ph": "X", "cat": "cuda_sync", "name": ').pick(kind, which)
    r.text(", ").pick(lay.pid, track).text(f', "tid": {SYNC_TID}, "ts": ')
    r.us(y.host_begin_ns, minus=lay.shift)
    r.text(', "dur": ').us(y.host_end_ns, minus=y.host_begin_ns)
    r.text(', "args": {"cuda_sync_kind": ').pick(kind, which)
    r.text(', "device": ').int(y.device).text(f', "{SYNC_STREAM_ARG}": ').int(y.stream)
    r.text(', "correlation": ').int(corr)
    r.text(', "External id": ', has_op).int(_at(o.seq, y.op), has_op).text("}}")
    # The call ends with the sync or the op, whichever is first.
    stop = np.maximum(np.minimum(y.host_end_ns, end), y.host_begin_ns)
    call_names = Fragments([c or "" for c in calls] + ["cudaDeviceSynchronize",
                                                       "cudaStreamSynchronize"])
    r.text(',\n{"ph": "X", "cat": "cuda_runtime", "name": "', blocking)
    r.pick(call_names, call, blocking).text('", ', blocking).pick(lay.pidtid, track, blocking)
    r.text(', "ts": ', blocking).us(y.host_begin_ns, blocking, minus=lay.shift)
    r.text(', "dur": ', blocking).us(stop, blocking, minus=y.host_begin_ns)
    r.text(', "args": {"correlation": ', blocking).int(corr, blocking)
    return r.text("}}", blocking)


def counter_rows(lay: Layout, device: np.ndarray, stream: np.ndarray,
                 t: np.ndarray, depth: np.ndarray) -> Rows:
    """The queue-depth points (``chrome.depth_points``), one a row."""
    keys, which = np.unique(stream, return_inverse=True)
    names = Fragments([json.dumps(f"queue depth (stream {int(s)})") for s in keys] + ['""'])
    r = Rows(len(t)).text(',\n{"ph": "C", "name": ').pick(names, which)
    r.text(', "pid": ').int(device).text(', "ts": ').us(t, minus=lay.shift)
    return r.text(', "args": {"depth": ').int(depth).text("}}")


def memory_rows(lay: Layout) -> Rows:
    """Each memory row as a point of its device's "GPU memory" counter and
    as a Kineto ``[memory]`` instant event: "Bytes" the net change (allocated
    less freed), "Total Allocated" the bytes in use after it, "Device Type"
    1 (CUDA); "External id" names its op and "cutimeline freed" the bytes
    freed, so that the import reads the row back exactly."""
    m, o = lay.tl.memory, lay.tl.ops
    has_op = m.op != NONE
    r = Rows(len(m)).text(',\n{"ph": "C", "name": "GPU memory", "pid": ').int(m.device)
    r.text(', "ts": ').us(m.host_ns, minus=lay.shift)
    r.text(', "args": {"allocated_bytes": ').int(m.in_use).text("}}")
    r.text(',\n{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", ')
    r.pick(lay.pidtid, lay.op_track(m.op, lay.host))
    r.text(', "ts": ').us(m.host_ns, minus=lay.shift)
    r.text(', "args": {"Bytes": ').int(m.allocated - m.freed)
    r.text(', "Total Allocated": ').int(m.in_use)
    r.text(', "Device Type": 1, "Device Id": ').int(m.device)
    r.text(f', "{FREED_ARG}": ').int(m.freed)
    r.text(', "External id": ', has_op).int(_at(o.seq, m.op), has_op)
    return r.text("}}")


def _at(col: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``col[rows]``, 0 where a row is NONE (those are masked out)."""
    if not len(col):
        return np.zeros(len(rows), col.dtype)
    return col[np.maximum(rows, 0)]


def _enum_names(values: np.ndarray, enum: type, column: str,
                name: Callable[[object], str] | None = None) -> Fragments:
    """Text of each of the 256 values of a uint8 enum column: ``name`` of
    the member (default: its name in lower case)."""
    members = {int(k) for k in enum}
    bad = sorted(set(np.unique(values).tolist()) - members)
    if bad:
        raise CutimelineError(
            f"Column {column} holds {bad[0]}, which is no {enum.__name__} "
            f"({', '.join(f'{int(k)} {k.name}' for k in enum)}); fix the "
            f"Timeline that made it.")
    name = name or (lambda k: k.name.lower())
    return Fragments([name(enum(v)) if v in members else ""
                      for v in range(256)])
