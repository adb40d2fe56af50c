"""Saving and loading ``.ctl`` files, exporting Chrome traces, writing
Parquet: each against its "before" (kept below as it was), in one run.

    python benchmarks/speed/bench_io.py [--sizes 1e5 1e6] [--reps 5] [--streams 4]
                                  [--demo DIR] [--parts save export parquet]
                                  [--no-before]

The Timelines are ``bench_analyze.synthetic(n, streams=...)`` (one gpu row
per op; no events) and the demo's recording (``python -m cutimeline demo
--out DIR``, run here unless ``--demo`` names a folder that has
``demo.ctl``). Times are medians of ``--reps`` repetitions after one
warm-up round, the writers taking turns.

save: format 2's writer against today's (format 3); each repetition saves
with both and loads both files (``ctl.load`` reads either). "B/op" is the
file's size over the Timeline's ops. Each file is checked to load back
equal to the Timeline it was written from. Goal (10^6 ops): save ≤ 0.3 s
at ≤ 8 B/op, load no slower than before.

export: ``ctl.export_chrome`` against the exporter as it was before issue
25 (``export_before``: a Python string per event, gzip level 9), to .json
and .json.gz; the .json.gz once per gzip codec installed (``codec="zlib"``,
``codec="isal"``: ISA-L's igzip, the default where installed). "rows" are
the Timeline's rows (ops + gpu + syncs + spans); the warm-up round checks
that every file holds the same bytes (gunzipped).
"CPU s" is the process's CPU time (all threads), which other load on the
machine moves less than the wall time. Goal: ≥ 10^6 rows/s, gzip included.

parquet: ``Timeline.to_parquet`` (needs pyarrow): time and folder size.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.formats.gzipstream import CODECS, codec
from cutimeline.formats.kineto.schema import EXPORTER, KIND_ARG, SHIFT_KEY
from cutimeline.timeline.ctlfile.fileformat import _NPZ_ENCODING
from cutimeline.timeline.schema import NONE, SCHEMA, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.timeline import Timeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_analyze import synthetic  # noqa: E402

# -- before: format 2's writer, as cutimeline/timeline/ctlfile/fileformat.py had it --
_ENCODING_2 = _NPZ_ENCODING  # frozen there: files of version 2 are read with it


def _encode_2(table: str, col: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    a = cols[col]
    enc = _ENCODING_2.get((table, col))
    if enc is None or not len(a):
        return a
    if enc[0] == "delta":
        out = np.empty_like(a)
        out[0] = a[0]
        np.subtract(a[1:], a[:-1], out=out[1:])
        return out
    return a - cols[enc[1]]


def save_before(tl: Timeline, path: str) -> None:
    """Format 2: one np.savez_compressed archive (deflate level 6)."""
    meta_json = json.dumps({"format": "cutimeline", "format_version": 2,
                            "meta": tl.meta}, allow_nan=False)
    members: dict[str, np.ndarray] = {}
    for name in SCHEMA:
        cols = tl.table(name).columns
        for col in cols:
            members[f"{name}.{col}"] = _encode_2(name, col, cols)
    encoded = [s.encode("utf-8", "surrogatepass") for s in tl.strings]
    members["strings.blob"] = np.frombuffer(b"".join(encoded), np.uint8)
    members["strings.offsets"] = np.concatenate(
        [[0], np.cumsum([len(b) for b in encoded], dtype=np.int64)]).astype(np.int64)
    members["meta.json"] = np.frombuffer(meta_json.encode(), np.uint8)
    fd, tmp = tempfile.mkstemp(prefix=".ctl-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **members)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save_after(tl: Timeline, path: str) -> None:
    tl.save(path)


# -- before: the Chrome-trace export, as cutimeline/formats/chrome.py had it --
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


def export_before(tl: Timeline, path: str | os.PathLike) -> None:
    """Before issue 25: write ``tl`` as Chrome-trace JSON (gzip when ``path`` ends in .gz).

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


def queue_depth_before(tl: Timeline) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
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
        for (dev, st), (t, depth) in queue_depth_before(self.tl).items():
            name = json.dumps(f"queue depth (stream {st})")
            for ns, d in zip(t.tolist(), depth.tolist()):
                self.events.append(f'{{"ph": "C", "name": {name}, "pid": {dev}, '
                                   f'"ts": {self.ts(ns)}, "args": {{"depth": {d}}}}}')

    def _header(self) -> dict[str, Any]:
        from cutimeline._version import __version__
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


# -- the run -------------------------------------------------------------------

def same(a: Timeline, b: Timeline) -> bool:
    return a.strings == b.strings and a.meta == b.meta and all(
        np.array_equal(a.table(n)[c], b.table(n)[c]) and a.table(n)[c].dtype == b.table(n)[c].dtype
        for n in SCHEMA for c, _ in SCHEMA[n])


def measure(tl: Timeline, folder: str, reps: int) -> dict[str, dict[str, float]]:
    writers = {"before": save_before, "after": save_after}
    times: dict[str, dict[str, list[float]]] = {w: {"save": [], "load": []} for w in writers}
    for rep in range(reps + 1):  # round 0 warms up
        for w, save in writers.items():
            path = os.path.join(folder, f"{w}.ctl")
            t0 = time.perf_counter()
            save(tl, path)
            t1 = time.perf_counter()
            back = ctl.load(path)
            t2 = time.perf_counter()
            if rep:
                times[w]["save"].append(t1 - t0)
                times[w]["load"].append(t2 - t1)
            elif not same(tl, back):
                raise SystemExit(f"the {w} file did not load back equal")
            del back
    return {w: {"save": statistics.median(t["save"]), "load": statistics.median(t["load"]),
                "bytes": os.path.getsize(os.path.join(folder, f"{w}.ctl"))}
            for w, t in times.items()}


def demo_timeline(folder: str | None) -> Timeline:
    if folder is None or not os.path.exists(os.path.join(folder, "demo.ctl")):
        folder = folder or tempfile.mkdtemp(prefix="bench-io-demo-")
        subprocess.run([sys.executable, "-m", "cutimeline", "demo", "--out", folder],
                       check=True, stdout=subprocess.DEVNULL)
    return ctl.load(os.path.join(folder, "demo.ctl"))


def rows_of(tl: Timeline) -> int:
    return len(tl.ops) + len(tl.gpu) + len(tl.syncs) + len(tl.spans)


def text_of(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def export_writers(suffix: str, before: bool) -> dict[str, Any]:
    """The exporters timed on ``suffix``: the old one, and today's with
    each gzip codec installed (one, for plain JSON: no codec runs)."""
    writers: dict[str, Any] = {"before": export_before} if before else {}
    if not suffix.endswith(".gz"):
        return {**writers, "after": ctl.export_chrome}
    for name in CODECS:
        try:
            codec(name)
        except CutimelineError:
            print(f"({name} is not installed: its row is left out)", file=sys.stderr)
            continue
        writers[f"after, {name}"] = functools.partial(ctl.export_chrome, codec=name)
    return writers


def measure_export(tl: Timeline, folder: str, reps: int, suffix: str,
                   writers: dict[str, Any]) -> dict[str, dict]:
    times: dict[str, list[float]] = {w: [] for w in writers}
    cpu: dict[str, list[float]] = {w: [] for w in writers}
    files = {w: os.path.join(folder, f"{k}{suffix}") for k, w in enumerate(writers)}
    for rep in range(reps + 1):  # round 0 warms up and checks
        for w, export in writers.items():
            c0, t0 = cpu_s(), time.perf_counter()
            export(tl, files[w])
            if rep:
                times[w].append(time.perf_counter() - t0)
                cpu[w].append(cpu_s() - c0)
        if not rep and len({text_of(f) for f in files.values()}) != 1:
            raise SystemExit(f"the {suffix} exports differ")
    return {w: {"s": statistics.median(t), "cpu": statistics.median(cpu[w]),
                "bytes": os.path.getsize(files[w])}
            for w, t in times.items()}


def cpu_s() -> float:
    """CPU seconds of this process, all threads, user and system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure_parquet(tl: Timeline, folder: str, reps: int) -> dict[str, float]:
    out = os.path.join(folder, "parquet")
    times = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        tl.to_parquet(out)
        if rep:
            times.append(time.perf_counter() - t0)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    shutil.rmtree(out)
    return {"s": statistics.median(times), "bytes": size}


def run_save(cases: list[tuple[str, Timeline]], reps: int) -> None:
    print("| Timeline | ops | writer | save s | load s | file | B/op |")
    print("|---|---:|---|---:|---:|---:|---:|")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for label, tl in cases:
            n = len(tl.ops)
            r = measure(tl, folder, reps)
            for w in ("before", "after"):
                m = r[w]
                print(f"| {label} | {n:,} | {w} | {m['save']:.3f} | {m['load']:.3f} "
                      f"| {m['bytes'] / 1e6:.3f} MB | {m['bytes'] / n:.2f} |")
            b, a = r["before"], r["after"]
            ratios.append((label, n, b["save"] / a["save"], b["load"] / a["load"],
                           b["bytes"] / a["bytes"]))
    print("\n| Timeline | ops | save: before ÷ after | load: before ÷ after "
          "| size: before ÷ after |")
    print("|---|---:|---:|---:|---:|")
    for label, n, s, lo, b in ratios:
        print(f"| {label} | {n:,} | {s:.1f}× | {lo:.2f}× | {b:.2f}× |")


def run_export(cases: list[tuple[str, Timeline]], reps: int, before: bool = True) -> None:
    print("| Timeline | ops | rows | file | writer | s | rows/s | ops/s | CPU s | size |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for label, tl in cases:
            n, rows = len(tl.ops), rows_of(tl)
            for suffix in (".json", ".json.gz"):
                r = measure_export(tl, folder, reps, suffix, export_writers(suffix, before))
                for w, m in r.items():
                    print(f"| {label} | {n:,} | {rows:,} | {suffix} | {w} | {m['s']:.3f} "
                          f"| {rows / m['s'] / 1e6:.2f} M | {n / m['s'] / 1e6:.2f} M "
                          f"| {m['cpu']:.3f} | {m['bytes'] / 1e6:.1f} MB |")
                ratios.append((label, n, suffix, r))
    print("\n| Timeline | ops | file | before ÷ fastest | zlib ÷ isal: s | zlib ÷ isal: CPU s "
          "| isal size ÷ zlib size |")
    print("|---|---:|---|---:|---:|---:|---:|")
    nan = {"s": float("nan"), "cpu": float("nan"), "bytes": float("nan")}
    for label, n, suffix, r in ratios:
        if len(r) < 2:   # nothing to compare
            continue
        fastest = min(m["s"] for w, m in r.items() if w != "before")
        b, z, i = (r.get(w, nan) for w in ("before", "after, zlib", "after, isal"))
        b_x = f"{b['s'] / fastest:.1f}×" if "before" in r else "—"  # --no-before
        print(f"| {label} | {n:,} | {suffix} | {b_x} | {z['s'] / i['s']:.2f}× "
              f"| {z['cpu'] / i['cpu']:.2f}× | {i['bytes'] / z['bytes']:.3f} |")


def run_parquet(cases: list[tuple[str, Timeline]], reps: int) -> None:
    print("| Timeline | ops | rows | to_parquet s | rows/s | folder | B/row |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for label, tl in cases:
            n, rows = len(tl.ops), rows_of(tl)
            r = measure_parquet(tl, folder, reps)
            print(f"| {label} | {n:,} | {rows:,} | {r['s']:.3f} | {rows / r['s'] / 1e6:.2f} M "
                  f"| {r['bytes'] / 1e6:.2f} MB | {r['bytes'] / rows:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--demo", metavar="DIR", help="a folder with the demo's demo.ctl")
    ap.add_argument("--parts", nargs="+", default=["save", "export", "parquet"],
                    choices=["save", "export", "parquet"])
    ap.add_argument("--no-before", action="store_true",
                    help="export: time today's exporter alone (the old one takes a minute "
                         "at 10^6 ops)")
    args = ap.parse_args()
    label = f"synthetic, {args.streams} stream{'s' * (args.streams != 1)}"
    cases = [(label, synthetic(int(n), streams=args.streams)) for n in args.sizes]
    cases.append(("demo", demo_timeline(args.demo)))
    export = functools.partial(run_export, before=not args.no_before)
    for part, run in (("save", run_save), ("export", export), ("parquet", run_parquet)):
        if part in args.parts:
            print(f"\n### {part}\n", flush=True)
            run(cases, args.reps)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
