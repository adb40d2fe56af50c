"""Adversarial inputs, as generators: the damaged-but-loadable files, memory
bombs and special paths that issues 37 and 38 found, each made here from a
small base so the tests (``tests/test_deep_fuzz.py``, the budget tests)
can draw them again at any scale.

Each ``ctl_*``/``trace_*`` function returns the bytes of one file; ``CASES``
lists them by name with the suffix they are written with. ``write_raw``
writes tables as a ``.ctl`` file without the checks a Timeline makes, so
a file can hold what no Timeline would (a thread id of -5).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
import tempfile
import zipfile
import zlib

import numpy as np

from handmade import random_timeline

from cutimeline.timeline.ctlfile import fileformat
from cutimeline.timeline.schema import SCHEMA, GpuKind, OpFlag
from cutimeline.timeline.table import Table
from cutimeline.timeline.timeline import Timeline

INT64_MIN = -2 ** 63


class _Raw:
    """What ``fileformat.save`` reads of a Timeline, without its checks."""

    def __init__(self, tables: dict, strings, meta: dict):
        self._tables = {n: tables[n] if isinstance(tables.get(n), Table) else
                        Table(n, tables.get(n)) for n in SCHEMA}
        self.strings, self.meta = tuple(strings), dict(meta)

    def table(self, name: str) -> Table:
        return self._tables[name]


def write_raw(tables: dict, strings, meta: dict) -> bytes:
    """The bytes of a ``.ctl`` file of these tables (name → Table or
    columns), strings and meta, whatever they hold."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "raw.ctl")
        fileformat.save(_Raw(tables, strings, meta), path)
        with open(path, "rb") as f:
            return f.read()


def base(seed: int = 0, n: int = 200) -> Timeline:
    """A small valid Timeline: two streams, data spans, syncs and steps."""
    return random_timeline(seed, n=n)


def _edited(tl: Timeline, table: str, **cols) -> bytes:
    t = tl.table(table)
    fixed = {}
    for col, (row, value) in cols.items():
        a = np.array(t[col])
        a[row] = value
        fixed[col] = a
    tables = {n: tl.table(n) for n in SCHEMA}
    tables[table] = t.replace(**fixed)
    return write_raw(tables, tl.strings, tl.meta)


# -- values a loaded file used to carry into later stages ----------------------------

def ctl_thread(value: int) -> bytes:
    """An op on thread ``value`` (-5: IndexError in the plot's layout;
    2**31-1: a 16 GiB rank lookup)."""
    return _edited(base(), "ops", thread=(3, value))


def ctl_time(value: int = INT64_MIN) -> bytes:
    """An op that begins at ``value`` ns (int64's smallest: OverflowError in
    the plot's pixel columns)."""
    tl = base()
    return _edited(tl, "ops", host_begin_ns=(0, value))


def ctl_backwards(table: str = "spans") -> bytes:
    """A row that ends before it begins ("one-off host costs take 107 % of
    the window")."""
    tl = base()
    b, e = ("host_begin_ns", "host_end_ns") if table in ("ops", "syncs") else \
        ("begin_ns", "end_ns")
    t = tl.table(table)
    return _edited(tl, table, **{e: (0, int(t[b][0]) - 5_000_000)})


def ctl_far_apart() -> bytes:
    """One span 1,000 days after the rest (a time in the wrong unit)."""
    tl = base()
    t = tl.spans
    late = int(t.begin_ns[-1]) + 1000 * 86400 * 10 ** 9
    return _edited(tl, "spans", begin_ns=(len(t) - 1, late), end_ns=(len(t) - 1, late + 10))


def ctl_device(value: int = -3) -> bytes:
    """A gpu row on device ``value``."""
    return _edited(base(), "gpu", device=(0, value))


def ctl_meta(**fields) -> bytes:
    """The base with meta fields set (``rank=10**9``: a billion-entry list in merge)."""
    tl = base()
    return write_raw({n: tl.table(n) for n in SCHEMA}, tl.strings, {**tl.meta, **fields})


# -- claims past the bytes ------------------------------------------------------------

def _zip(items: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data, method in items:
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return out.getvalue()


def _members(data: bytes) -> list[tuple[str, bytes, int]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i), i.compress_type) for i in z.infolist()]


def ctl_claimed_rows(rows: int = 10 ** 8) -> bytes:
    """A ~100 KB file claiming ``rows`` ops: every column a constant (no
    bytes) but the last, whose deflated zeros (1,032 bytes per byte) vouch
    for the rows; reading it used to build the constants with ``np.full``
    (> 4 GiB for 10^8 rows)."""
    items = _members(write_raw({}, [], {"source": "test"}))
    head = json.loads(items[0][1])
    cols = head["manifest"]["columns"]
    plane = zlib.compress(b"\0" * (rows - 1), 9)
    payload = bytearray()
    for key in list(cols):
        e = cols[key]
        if key.startswith("ops."):
            e = {"encoding": e.get("encoding", ["raw"]), "first": 0}
            if key == "ops.host_end_ns":
                e.update(zigzag=False, width=1, planes=[["deflate", len(plane)]])
            else:
                e["fill"] = 0
        data = plane if key == "ops.host_end_ns" else b""
        if "size" in cols[key] and key != "ops.host_end_ns":
            data = items[1][1][cols[key]["offset"]:cols[key]["offset"] + cols[key]["size"]]
        cols[key] = dict(e, offset=len(payload), size=len(data))
        payload += data
    head["manifest"]["rows"]["ops"] = rows
    return _zip([("meta.json", json.dumps(head).encode(), zipfile.ZIP_DEFLATED),
                 ("columns.bin", bytes(payload), zipfile.ZIP_STORED)])


def _base_members(n: int = 20) -> list[tuple[str, bytes, int]]:
    tl = base(n=n)
    return _members(write_raw({k: tl.table(k) for k in SCHEMA}, tl.strings, tl.meta))


def ctl_meta_bomb(inflated: int = 64 << 20, honest: bool = True) -> bytes:
    """A file whose meta.json deflates ``inflated`` bytes (spaces before its
    last brace) into ~0.1 % of that; ``honest=False``: its zip header
    claims 100 bytes."""
    items = _base_members()
    text, columns = items[0][1], items[1][1]
    d = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b" " * (1 << 20)
    packed, crc, size = [d.compress(text[:-1])], zlib.crc32(text[:-1]), len(text)
    for _ in range(inflated >> 20):
        packed.append(d.compress(chunk))
        crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    packed.append(d.compress(text[-1:]) + d.flush())
    crc = zlib.crc32(text[-1:], crc)
    return _raw_zip([("meta.json", b"".join(packed), 8, crc, size if honest else 100),
                     ("columns.bin", columns, 0, zlib.crc32(columns), len(columns))])


def _raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip written field by field: (name, stored bytes, method, crc,
    claimed size) each, so a member may claim what it likes."""
    out, central = bytearray(), bytearray()
    for name, data, method, crc, size in members:
        at = len(out)
        n = name.encode()
        out += struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc,
                           len(data), size, len(n), 0) + n + data
        central += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21,
                               crc, len(data), size, len(n), 0, 0, 0, 0, 0, at) + n
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(members), len(members),
                      len(central), len(out), 0)
    return bytes(out + central + end)


def ctl_zip_flag(bit: int = 0) -> bytes:
    """The base with general-purpose flag ``bit`` of every member set (0:
    "encrypted": zipfile raised RuntimeError)."""
    data = bytearray(_zip(_base_members()))
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(sig)
        while at >= 0:
            flags = struct.unpack_from("<H", data, at + off)[0]
            struct.pack_into("<H", data, at + off, flags | (1 << bit))
            at = data.find(sig, at + 4)
    return bytes(data)


def ctl_zip_method(method: int = 99) -> bytes:
    """Every member claims compression ``method`` (99: AES, which zipfile
    does not implement)."""
    data = bytearray(_zip(_base_members()))
    for sig, off in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = data.find(sig)
        while at >= 0:
            struct.pack_into("<H", data, at + off, method)
            at = data.find(sig, at + 4)
    return bytes(data)


def ctl_bad_crc() -> bytes:
    """A member whose CRC disagrees with its bytes."""
    data = bytearray(_zip(_base_members()))
    for sig, off in ((b"PK\x03\x04", 14), (b"PK\x01\x02", 16)):
        at = data.find(sig)
        while at >= 0:
            crc = struct.unpack_from("<I", data, at + off)[0]
            struct.pack_into("<I", data, at + off, crc ^ 0x5A5A5A5A)
            at = data.find(sig, at + 4)
    return bytes(data)


def ctl_truncated(fraction: float = 0.6) -> bytes:
    data = _zip(_base_members())
    return data[:int(len(data) * fraction)]


# -- shapes that grew past linear ---------------------------------------------------

def many_streams(streams: int = 4000) -> Timeline:
    """One kernel on each of ``streams`` streams of one device, each
    launched by its own op (analysis memory grew as streams × kernels)."""
    n = streams
    t = 1_000_000 + np.arange(n, dtype=np.int64) * 10_000
    ops = {"seq": np.arange(n), "thread": np.zeros(n), "name": np.zeros(n),
           "device": np.zeros(n), "stream": np.arange(n), "flags": np.full(n, int(OpFlag.LAUNCH)),
           "host_begin_ns": t, "host_end_ns": t + 2_000}
    gpu = {"op": np.arange(n), "device": np.zeros(n), "stream": np.arange(n),
           "name": np.ones(n), "kind": np.full(n, int(GpuKind.KERNEL)),
           "launch_ns": t + 1_000, "begin_ns": t + 5_000, "end_ns": t + 9_000}
    return Timeline({"ops": ops, "gpu": gpu}, ["aten::mm", "gemm"],
                    {"source": "test", "aligned": True, "threads": ["MainThread"]})


def many_threads(threads: int = 3000) -> Timeline:
    """One op on each of ``threads`` host threads (the figure grew a lane
    per thread: 126,509 px tall for 3,000)."""
    n = threads
    t = 1_000_000 + np.arange(n, dtype=np.int64) * 10_000
    ops = {"seq": np.arange(n), "thread": np.arange(n), "name": np.zeros(n),
           "device": np.full(n, -1), "stream": np.full(n, -1), "flags": np.zeros(n),
           "host_begin_ns": t, "host_end_ns": t + 2_000}
    return Timeline({"ops": ops}, ["aten::add"],
                    {"source": "test", "aligned": True,
                     "threads": [f"worker {i}" for i in range(n)]})


def as_ctl(tl: Timeline) -> bytes:
    return write_raw({n: tl.table(n) for n in SCHEMA}, tl.strings, tl.meta)


# -- traces ---------------------------------------------------------------------------

def trace_events(kernels: int = 40, nan: int = 0) -> dict:
    """A small Kineto trace: a cpu_op launching each kernel on stream 7;
    ``nan`` kernels with a NaN ts (written as the JSON NaN Kineto's writers emit)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1,
           "tid": 1, "ts": 0.0, "dur": kernels * 10.0 + 50}]
    for k in range(kernels):
        ts = 10.0 + 10 * k
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                   "ts": ts, "dur": 4.0, "args": {"External id": k + 1}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": 1, "ts": ts + 1, "dur": 2.0, "args": {"correlation": 100 + k}})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                   "ts": float("nan") if k < nan else ts + 5, "dur": 6.0,
                   "args": {"correlation": 100 + k, "device": 0, "stream": 7}})
    return {"traceEvents": ev, "baseTimeNanoseconds": 1_700_000_000_000_000_000}


def trace_nan(kernels: int = 40, nan: int = 30) -> bytes:
    """30 of 40 kernels with NaN timestamps: an import that warns."""
    return json.dumps(trace_events(kernels, nan)).encode()


def trace_gzip_bomb(inflated: int = 128 << 20, honest: bool = True) -> bytes:
    """A valid trace followed by ``inflated`` bytes of spaces, gzipped (a 6
    MB .json.gz inflating to 6 GB, at a smaller scale); ``honest=False``:
    its trailer claims 100 bytes."""
    text = json.dumps(trace_events(4)).encode()
    d = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 20)
    parts = [d.compress(text)]
    for _ in range(inflated >> 20):
        parts.append(d.compress(chunk))
    parts.append(d.flush())
    data = b"".join(parts)
    return data if honest else data[:-4] + struct.pack("<I", 100)


def trace_plain() -> bytes:
    return gzip.compress(json.dumps(trace_events(8)).encode(), mtime=0)


#: name → (make the bytes, suffix); each is refused with a CutimelineError
#: or loads and goes through every stage
CASES = {
    "thread -5": (lambda: ctl_thread(-5), ".ctl"),
    "thread 2^31-1": (lambda: ctl_thread(2 ** 31 - 1), ".ctl"),
    "time int64 min": (lambda: ctl_time(INT64_MIN), ".ctl"),
    "span ends before it begins": (lambda: ctl_backwards("spans"), ".ctl"),
    "op ends before it begins": (lambda: ctl_backwards("ops"), ".ctl"),
    "times 1,000 days apart": (ctl_far_apart, ".ctl"),
    "gpu on device -3": (lambda: ctl_device(-3), ".ctl"),
    "meta rank 10^9": (lambda: ctl_meta(rank=10 ** 9), ".ctl"),
    "meta world 10^9": (lambda: ctl_meta(world_size=10 ** 9, rank=0), ".ctl"),
    "10^8 rows in 100 KB": (ctl_claimed_rows, ".ctl"),
    "meta.json inflating 64 MB": (ctl_meta_bomb, ".ctl"),
    "meta.json inflating 64 MB, claiming 100 B": (lambda: ctl_meta_bomb(honest=False),
                                                   ".ctl"),
    "zip flagged encrypted": (ctl_zip_flag, ".ctl"),
    "zip method 99": (ctl_zip_method, ".ctl"),
    "zip bad crc": (ctl_bad_crc, ".ctl"),
    "zip truncated": (ctl_truncated, ".ctl"),
    "4,000 one-kernel streams": (lambda: as_ctl(many_streams()), ".ctl"),
    "3,000 host threads": (lambda: as_ctl(many_threads()), ".ctl"),
    "30 of 40 kernels NaN": (trace_nan, ".json"),
    ".json.gz inflating 128 MB": (trace_gzip_bomb, ".json.gz"),
}


def special_paths(folder: str) -> dict[str, str]:
    """Paths that are no regular file: name → path (a FIFO made in ``folder``)."""
    fifo = os.path.join(folder, "fifo.json")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    return {"/dev/zero": "/dev/zero", "/dev/urandom": "/dev/urandom",
            "/dev/null": "/dev/null", "FIFO": fifo, "folder": folder}
