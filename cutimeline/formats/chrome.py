"""Timeline → Chrome-trace JSON for Perfetto and chrome://tracing, and
torch.profiler (Kineto) traces → Timeline (``import_chrome``, in kineto.py).

The export is laid out the way Kineto lays out its own traces, so that
``import_chrome`` reads it back and other Kineto tools can read it too:

- a host process per host pid, with a track per CPU thread: ops as
  ``cpu_op`` slices, host spans as ``user_annotation`` slices (steps named
  ``ProfilerStep#N``), each launch as a zero-length ``cuda_runtime`` slice at
  its launch time, and a "syncs" track of ``cuda_sync`` slices;
- a GPU process per device (pid = device index), with a track per stream:
  ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` slices carrying the
  correlation id of their launch;
- ``ac2g`` flow arrows from each launching op to its GPU work;
- a queue-depth counter track per stream (work launched but not finished);
- metadata events naming and ordering processes and threads.

Times are written in µs as exact decimals of the integer ns (``12.345``), so
nothing is lost; when times are too large for a float µs to hold ns
(beyond 2^43 µs), they are written relative to a whole second, kept in
``baseTimeNanoseconds`` and in ``cutimelineTimeShiftNanoseconds``.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from typing import Any

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.timeline import Timeline
from .kineto import import_chrome
from .kinetoschema import EXPORTER, KIND_ARG, SHIFT_KEY

__all__ = ["export_chrome", "import_chrome", "queue_depth"]

GPU_CATEGORY = {GpuKind.MEMCPY: "gpu_memcpy", GpuKind.MEMSET: "gpu_memset"}
LAUNCH_NAME = {GpuKind.MEMCPY: "cudaMemcpyAsync", GpuKind.MEMSET: "cudaMemsetAsync"}
SYNC_CALL = {"Stream Sync": "cudaStreamSynchronize", "Event Sync": "cudaEventSynchronize",
             "Context Sync": "cudaDeviceSynchronize",
             "Stream Wait Event": "cudaStreamWaitEvent"}
# Float µs hold ns exactly below 2^43 µs (see tracefile.to_ns).
EXACT_LIMIT_NS = (1 << 43) * 1000
HOST_PID = 1 << 20   # a pid no device index reaches
SYNC_TID = 1 << 30   # the host "syncs" track, apart from every thread
LAUNCH_TID = SYNC_TID + 1   # launches of GPU work whose op is unknown


def export_chrome(tl: Timeline, path: str | os.PathLike) -> None:
    """Write ``tl`` as Chrome-trace JSON (gzip when ``path`` ends in .gz).

    The GPU rows must be on the host clock (an aligned Timeline: recorded
    ones are aligned at stop, imported ones always are)."""
    path = os.fspath(path)
    if len(tl.gpu) and not tl.aligned:
        raise CutimelineError(
            "The Timeline is not aligned: its GPU times are still on the "
            "device clock, so they cannot share a time axis with the host; "
            "align it first with ctl.align(tl).")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CutimelineError(f"Cannot export to {path}: the folder {directory} "
                              f"does not exist; create it first.")
    text = _Trace(tl).json()
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.endswith(".gz"):
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
                    gz.write(text.encode("utf-8"))
            else:
                raw.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def queue_depth(tl: Timeline) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Work launched but not finished, per (device, stream): times (ns) at
    which the depth changes and the depth from each time on.

    Work enters the queue at its launch (``launch_ns``; else its op's end,
    the latest it can have been launched; else its own begin) and leaves at
    its end."""
    g, o = tl.gpu, tl.ops
    enq = g.launch_ns.copy()
    no_launch = enq == NONE
    has_op = no_launch & (g.op >= 0)
    enq[has_op] = o.host_end_ns[g.op[has_op]]
    enq[no_launch & ~has_op] = g.begin_ns[no_launch & ~has_op]
    enq = np.minimum(enq, g.end_ns)
    out = {}
    for dev, stream in sorted(set(zip(g.device.tolist(), g.stream.tolist()))):
        mine = (g.device == dev) & (g.stream == stream)
        t = np.concatenate([enq[mine], g.end_ns[mine]])
        step = np.concatenate([np.ones(mine.sum(), np.int64),
                               -np.ones(mine.sum(), np.int64)])
        order = np.lexsort((step, t))   # at one instant, leaving comes first
        t, depth = t[order], np.cumsum(step[order])
        last = np.append(t[1:] != t[:-1], True)   # the depth after each instant
        out[dev, stream] = (t[last], depth[last])
    return out


def _us(ns: int) -> str:
    """Exact µs decimal of an integer ns: 1234567 → "1234.567"."""
    if ns < 0:
        return "-" + _us(-ns)
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


class _Trace:
    """The events of one export, as JSON text fragments."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        times = [a for a in _times(tl) if len(a)]
        largest = max((int(np.abs(a).max()) for a in times), default=0)
        earliest = min((int(a.min()) for a in times), default=0)
        # Epoch-sized ns would lose their last digits in a float µs.
        self.shift = (earliest // 10**9) * 10**9 if largest >= EXACT_LIMIT_NS else 0
        self.esc = [json.dumps(s) for s in tl.strings]
        self.hosts = self._host_tracks()
        self.events: list[str] = []

    def host(self, thread: int) -> tuple[int, int]:
        return self.hosts[thread] if 0 <= thread < len(self.hosts) else (HOST_PID, thread)

    def name(self, sid: int) -> str:
        return '""' if sid == NONE else self.esc[sid]

    def ts(self, ns: int) -> str:
        return _us(ns - self.shift)

    def json(self) -> str:
        self._metadata()
        self._ops()
        self._spans()
        self._gpu()
        self._syncs()
        self._counters()
        return ('{"traceEvents": [\n' + ",\n".join(self.events) + "\n],\n"
                + json.dumps(self._header(), allow_nan=False)[1:])

    # -- tracks --------------------------------------------------------------
    def _host_tracks(self) -> list[tuple[int, int]]:
        """(pid, tid) of each thread index used by ops or spans."""
        n = 1 + max([int(a.max()) for a in (self.tl.ops.thread, self.tl.spans.thread)
                     if len(a)] + [0])
        info = self.tl.meta.get("threads") or []
        devices = set(self.tl.gpu.device.tolist())
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

    def _metadata(self) -> None:
        tl, meta, out = self.tl, self.tl.meta, self.events
        rank = meta.get("rank")
        host = "Host" + (f" (rank {rank})" if isinstance(rank, int) else "")
        info = meta.get("threads") or []
        for pid in sorted({p for p, _ in self.hosts} | {HOST_PID}):
            out.append(_meta_event("process_name", pid, 0, {"name": host}))
            out.append(_meta_event("process_sort_index", pid, 0, {"sort_index": 0}))
            out.append(_meta_event("thread_name", pid, SYNC_TID,
                                   {"name": "syncs (host waits for the GPU)"}))
            out.append(_meta_event("thread_name", pid, LAUNCH_TID,
                                   {"name": "launches from unknown ops"}))
        for i, (pid, tid) in enumerate(self.hosts):
            given = info[i].get("name") if i < len(info) and isinstance(info[i], dict) else ""
            out.append(_meta_event("thread_name", pid, tid,
                                   {"name": given or f"thread {i}"}))
            out.append(_meta_event("thread_sort_index", pid, tid, {"sort_index": i}))
        names = meta.get("device_names") or {}
        g = tl.gpu
        for dev in sorted(set(g.device.tolist())):
            label = f"GPU {dev}" + (f": {names[str(dev)]}" if names.get(str(dev)) else "")
            out.append(_meta_event("process_name", dev, 0, {"name": label}))
            out.append(_meta_event("process_sort_index", dev, 0, {"sort_index": 1 + dev}))
            streams = sorted(set(g.stream[g.device == dev].tolist()))
            for k, s in enumerate(streams):
                out.append(_meta_event("thread_name", dev, s, {"name": f"stream {s}"}))
                out.append(_meta_event("thread_sort_index", dev, s, {"sort_index": k}))

    # -- slices ----------------------------------------------------------------
    def _ops(self) -> None:
        o, out = self.tl.ops, self.events
        cols = zip(o.seq.tolist(), o.thread.tolist(), o["name"].tolist(), o.shapes.tolist(),
                   o.grad_fn.tolist(), o.module.tolist(), o.flags.tolist(),
                   o.device.tolist(), o.stream.tolist(),
                   o.host_begin_ns.tolist(), o.host_end_ns.tolist())
        for seq, th, nm, sh, gf, mod, fl, dev, st, b, e in cols:
            pid, tid = self.host(th)
            args = [f'"External id": {seq}']
            if dev != NONE:   # not "stream": Kineto tools take that for GPU work
                args.append(f'"op device": {dev}, "op stream": {st}')
            if sh != NONE:
                args.append(f'"Shapes": {self.name(sh)}')
            if gf != NONE:
                args.append(f'"grad_fn": {self.name(gf)}')
            if mod != NONE:
                args.append(f'"module": {self.name(mod)}')
            if fl:
                args.append(f'"flags": "{_flag_names(fl)}"')
            out.append(f'{{"ph": "X", "cat": "cpu_op", "name": {self.name(nm)}, '
                       f'"pid": {pid}, "tid": {tid}, "ts": {self.ts(b)}, '
                       f'"dur": {_us(e - b)}, "args": {{{", ".join(args)}}}}}')

    def _spans(self) -> None:
        s, out = self.tl.spans, self.events
        for kind, nm, th, num, b, e in zip(s.kind.tolist(), s["name"].tolist(),
                                           s.thread.tolist(), s.number.tolist(),
                                           s.begin_ns.tolist(), s.end_ns.tolist()):
            pid, tid = self.host(th)
            kname = SpanKind(kind).name.lower()
            label = (json.dumps(f"ProfilerStep#{num}") if kind == SpanKind.STEP
                     else self.name(nm))
            out.append(f'{{"ph": "X", "cat": "user_annotation", "name": {label}, '
                       f'"pid": {pid}, "tid": {tid}, "ts": {self.ts(b)}, '
                       f'"dur": {_us(e - b)}, "args": {{"{KIND_ARG}": "{kname}", '
                       f'"name": {self.name(nm)}}}}}')

    def _gpu(self) -> None:
        """GPU slices, their launch calls and flow arrows; correlation ids
        are row index + 1."""
        g, o, out = self.tl.gpu, self.tl.ops, self.events
        for i, (op, dev, st, nm, kind, launch, b, e) in enumerate(zip(
                g.op.tolist(), g.device.tolist(), g.stream.tolist(), g["name"].tolist(),
                g.kind.tolist(), g.launch_ns.tolist(), g.begin_ns.tolist(),
                g.end_ns.tolist())):
            corr = i + 1
            kind = GpuKind(kind)
            args = (f'"device": {dev}, "stream": {st}, "correlation": {corr}, '
                    f'"{KIND_ARG}": "{kind.name.lower()}"')
            if op != NONE:
                args += f', "External id": {int(o.seq[op])}'
            out.append(f'{{"ph": "X", "cat": "{GPU_CATEGORY.get(kind, "kernel")}", '
                       f'"name": {self.name(nm)}, "pid": {dev}, "tid": {st}, '
                       f'"ts": {self.ts(b)}, "dur": {_us(e - b)}, "args": {{{args}}}}}')
            if op == NONE:
                # Launched from a thread the Timeline does not know.
                if launch != NONE:
                    out.append(self._launch(kind, HOST_PID, LAUNCH_TID, launch, corr))
                continue
            pid, tid = self.host(int(o.thread[op]))
            at = int(o.host_begin_ns[op]) if launch == NONE else launch
            if launch != NONE:
                out.append(self._launch(kind, pid, tid, launch, corr))
            out.append(f'{{"ph": "s", "id": {corr}, "cat": "ac2g", "name": "ac2g", '
                       f'"pid": {pid}, "tid": {tid}, "ts": {self.ts(at)}}}')
            out.append(f'{{"ph": "f", "id": {corr}, "cat": "ac2g", "name": "ac2g", '
                       f'"pid": {dev}, "tid": {st}, "ts": {self.ts(b)}, "bp": "e"}}')

    def _launch(self, kind: GpuKind, pid: int, tid: int, ns: int, corr: int) -> str:
        return (f'{{"ph": "X", "cat": "cuda_runtime", '
                f'"name": "{LAUNCH_NAME.get(kind, "cudaLaunchKernel")}", '
                f'"pid": {pid}, "tid": {tid}, "ts": {self.ts(ns)}, '
                f'"dur": 0, "args": {{"correlation": {corr}}}}}')

    def _syncs(self) -> None:
        y, o, out = self.tl.syncs, self.tl.ops, self.events
        first = len(self.tl.gpu) + 1
        for j, (op, kind, dev, st, b, e) in enumerate(zip(
                y.op.tolist(), y.kind.tolist(), y.device.tolist(), y.stream.tolist(),
                y.host_begin_ns.tolist(), y.host_end_ns.tolist())):
            corr = first + j
            kname = self.tl.string(kind) or "sync"
            pid, tid = self.host(int(o.thread[op])) if op != NONE else (HOST_PID, 0)
            link = f', "External id": {int(o.seq[op])}' if op != NONE else ""
            out.append(f'{{"ph": "X", "cat": "cuda_sync", "name": {json.dumps(kname)}, '
                       f'"pid": {pid}, "tid": {SYNC_TID}, "ts": {self.ts(b)}, '
                       f'"dur": {_us(e - b)}, "args": {{"cuda_sync_kind": '
                       f'{json.dumps(kname)}, "device": {dev}, "stream": {st}, '
                       f'"correlation": {corr}{link}}}}}')
            # The blocking call on the op's own track, where it lies in the op.
            if op != NONE and int(o.host_begin_ns[op]) <= b <= int(o.host_end_ns[op]):
                call = SYNC_CALL.get(kname, "cudaDeviceSynchronize" if st == NONE
                                     else "cudaStreamSynchronize")
                end = min(e, int(o.host_end_ns[op]))
                out.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "{call}", '
                           f'"pid": {pid}, "tid": {tid}, "ts": {self.ts(b)}, '
                           f'"dur": {_us(max(0, end - b))}, '
                           f'"args": {{"correlation": {corr}}}}}')

    def _counters(self) -> None:
        for (dev, st), (t, depth) in queue_depth(self.tl).items():
            name = json.dumps(f"queue depth (stream {st})")
            for ns, d in zip(t.tolist(), depth.tolist()):
                self.events.append(f'{{"ph": "C", "name": {name}, "pid": {dev}, '
                                   f'"ts": {self.ts(ns)}, "args": {{"depth": {d}}}}}')

    def _header(self) -> dict[str, Any]:
        from .. import __version__
        meta = self.tl.meta
        head: dict[str, Any] = {"schemaVersion": 1, "displayTimeUnit": "ms",
                                "traceName": str(meta.get("file") or meta.get("trace_name")
                                                 or "cutimeline"),
                                "exportedBy": f"{EXPORTER} {__version__}"}
        base = int(meta.get("base_time_ns", 0) or 0)
        if base or self.shift:
            head["baseTimeNanoseconds"] = base + self.shift
        if self.shift:
            head[SHIFT_KEY] = self.shift
        if meta.get("devices"):
            head["deviceProperties"] = meta["devices"]
        if isinstance(meta.get("distributed"), dict):
            head["distributedInfo"] = meta["distributed"]
        elif isinstance(meta.get("rank"), int):
            head["distributedInfo"] = {"rank": meta["rank"],
                                       "world_size": meta.get("world_size", 1)}
        return head


def _times(tl: Timeline) -> list[np.ndarray]:
    o, g, s, y = tl.ops, tl.gpu, tl.spans, tl.syncs
    return [o.host_begin_ns, o.host_end_ns, g.begin_ns, g.end_ns,
            g.launch_ns[g.launch_ns != NONE], s.begin_ns, s.end_ns,
            y.host_begin_ns, y.host_end_ns]


def _flag_names(flags: int) -> str:
    return "|".join(f.name for f in OpFlag if flags & f)


def _meta_event(name: str, pid: int, tid: int, args: dict) -> str:
    return (f'{{"ph": "M", "name": "{name}", "pid": {pid}, "tid": {tid}, '
            f'"ts": 0, "args": {json.dumps(args)}}}')

