"""The journal: a recording's rows on disk while it runs, append-only, so
that a process killed at any moment leaves a file ``ctl.load`` opens.

``record(out_dir=...)`` writes ``rank-<r>.ctl`` as a journal from its
start (``recording/control/flusher.py`` appends every ``PERIOD_S``) and
replaces it with an ordinary ``.ctl`` file (``fileformat``) at stop. Only
a process that dies without a word (SIGKILL, the OOM killer, a segfault,
``os._exit``) leaves the journal itself, which ``fileformat.read``
recognises by its first bytes. It holds the host side only: device work
is read from the device at stop.

Layout: the 16 bytes ``MAGIC``, then chunks, each

    b"CTLJ" | header bytes H (u32 LE) | payload bytes P (u32 LE)
            | CRC-32 of the 8 length bytes, the header and the payload (u32 LE)
            | header: H bytes of UTF-8 JSON | payload: P bytes

numbered from 0 in its header's ``chunk``. Chunk 0 (``kind`` "start")
holds ``format``, ``format_version`` (the tables' schema's, ``schema.py``),
``journal`` (this layout's version) and the recording's ``meta`` at
start. A "rows" chunk holds what was appended since the chunk before:
``strings`` (``from``: the id of the first, which must be the count
before; ``count``; ``lengths``; ``blob``), ``tables`` (per table of
``TABLES``, ``rows`` and per stored column a ``columncodec`` entry with
``offset`` and ``size`` in the payload, and ``delta`` (differences from
the previous row) or ``minus`` (a column of the same row subtracted)),
``threads_from``, ``threads``, ``step``, ``host_ns`` and ``truncated``.
An "end" chunk says the recording stopped; its file should have
replaced the journal, and did not.

The reader trusts nothing: it holds the rows the headers claim to the
budgets of a ``.ctl`` file before decoding any (``budgets.row_budget``,
``budgets.memory_budget``). A chunk whose lengths, CRC, JSON, numbering
or columns are wrong ends the reading there, as a torn last write does;
what came before is kept, ``meta["journal"]`` says how many chunks were
read and how many bytes were not, and ``meta["partial"]`` that the
recording ended unseen. Ops are in completion order on disk; the reader
sorts them by ``seq`` and spans by begin, as a stop does.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from ...errors import CutimelineError
from .. import budgets, destination
from .archive import json_member
from .columncodec import CodecError, pack, pack_bytes, unpack, unpack_bytes
from ..schema import FORMAT, FORMAT_VERSION, SCHEMA
from ..table import Table

__all__ = ["MAGIC", "TABLES", "Journal", "is_journal", "read"]

MAGIC = b"\x89CTL-JOURNAL\r\n\x1a\n"  # PNG-like: a text-mode copy garbles it
VERSION = 1
TABLES = ("ops", "spans")  # tables a journal holds: none refers to another's rows
_CHUNK = b"CTLJ"
_PREFIX = struct.Struct("<4sIII")
MAX_HEADER = 1 << 24  # bytes; the writer's are a few kB
MAX_PAYLOAD = 1 << 30
MAX_ROWS = 1 << 22  # rows of one table in one chunk (the writer's: flusher.CHUNK_ROWS)
# stored as differences: from the row before, or from another column of the row
_DELTA = {("ops", "seq"), ("ops", "host_begin_ns"), ("spans", "begin_ns")}
_MINUS = {("ops", "host_end_ns"): "host_begin_ns", ("spans", "end_ns"): "begin_ns"}


class Journal:
    """An open journal: ``append`` rows as the recording goes, ``end`` when
    it stops, ``close``. Made whole at ``path`` (replacing what was there,
    as ``destination`` allows) before the constructor returns."""

    def __init__(self, path: str | os.PathLike, meta: Mapping[str, Any]):
        self.path = os.fspath(path)
        self.chunks = 0
        self.strings = 0  # strings written so far
        head = {"format": FORMAT, "format_version": FORMAT_VERSION, "journal": VERSION,
                "meta": dict(meta)}
        fd, tmp = destination.temporary(self.path)
        self._file: BinaryIO | None = os.fdopen(fd, "wb", buffering=0)
        try:
            self._write(MAGIC + self._chunk("start", head, b""))
            destination.commit(tmp, self.path)
        except BaseException:
            self._file.close()
            self._file = None
            os.unlink(tmp)
            raise
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)  # to tell later whether path is still ours

    def append(self, tables: Mapping[str, Mapping[str, np.ndarray]], strings: Sequence[str],
               info: Mapping[str, Any]) -> int:
        """Write one "rows" chunk: ``tables`` (columns of tables ``TABLES``),
        the strings interned since the last chunk and ``info`` (step,
        host_ns, truncated, threads_from, threads); the bytes written."""
        parts: list[bytes] = []
        at = 0

        def add(entry: dict, data: bytes) -> dict:
            nonlocal at
            parts.append(data)
            entry = dict(entry, offset=at, size=len(data))
            at += len(data)
            return entry

        out: dict[str, Any] = {}
        for name, cols in tables.items():
            entries = {}
            for col, values in cols.items():
                v = np.asarray(values, np.int64)
                extra: dict[str, Any] = {}
                if (name, col) in _DELTA:  # int64 differences wrap, and so does the sum
                    v, extra = np.concatenate([v[:1], np.diff(v)]), {"delta": True}
                elif (name, col) in _MINUS:
                    base = _MINUS[name, col]
                    v, extra = v - np.asarray(cols[base], np.int64), {"minus": base}
                entry, data = pack(v, fill=False)
                entries[col] = add({**entry, **extra}, data)
            out[name] = {"rows": len(next(iter(cols.values()), ())), "columns": entries}
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        text = {"from": self.strings, "count": len(encoded),
                "lengths": add(*pack(lengths, fill=False)),
                "blob": add(*pack_bytes(b"".join(encoded)))}
        chunk = self._chunk("rows", {**info, "strings": text, "tables": out}, b"".join(parts))
        self._write(chunk)
        self.strings += len(encoded)
        return len(chunk)

    def end(self, info: Mapping[str, Any]) -> None:
        """Write the "end" chunk: the recording stopped."""
        self._write(self._chunk("end", dict(info), b""))

    @property
    def closed(self) -> bool:
        return self._file is None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _chunk(self, kind: str, header: dict, payload: bytes) -> bytes:
        head = json.dumps({"chunk": self.chunks, "kind": kind, **header},
                          allow_nan=False).encode()
        sizes = struct.pack("<II", len(head), len(payload))
        crc = zlib.crc32(payload, zlib.crc32(head, zlib.crc32(sizes)))
        self.chunks += 1
        return _CHUNK + sizes + struct.pack("<I", crc) + head + payload

    def _write(self, data: bytes) -> None:
        """One chunk, whole: a write cut short is finished (or raises)."""
        view = memoryview(data)
        while view:
            view = view[self._file.write(view):]


# -- reading ---------------------------------------------------------------------------

def is_journal(path: str | os.PathLike) -> bool:
    """Whether ``path`` begins as a journal does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class _Stop(Exception):
    """A chunk that cannot be read: the reading ends before it."""


def read(path: str | os.PathLike, max_bytes: int | None = None
         ) -> tuple[dict[str, Table], list[str], dict[str, Any]]:
    """The tables, strings and meta of a journal, up to its last whole
    chunk (see the module doc); CutimelineError when not even its start is,
    or when its chunks claim more than ``budgets`` allow (memory: to
    ``max_bytes``, see ``budgets.max_bytes``)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    rows, strings_claimed = _claims(path, size)
    budgets.row_budget(path, sum(rows.values()) + strings_claimed, size)
    budgets.memory_budget(path, budgets.timeline_bytes(rows, strings_claimed),
                          budgets.rows_claimed(rows, strings_claimed), max_bytes)
    cols: dict[str, dict[str, list[np.ndarray]]] = {t: {} for t in TABLES}
    strings: list[str] = []
    threads: list[str] = []
    last: dict[str, Any] = {}
    chunks, why, ended = 0, None, False
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise CutimelineError(f"{path} is not a cutimeline journal.")
        try:
            head, _ = _chunk(f, size, 0)
            if head is None:
                raise _Stop("it ends after its first bytes")
        except _Stop as exc:
            raise CutimelineError(f"{path} is a cutimeline journal whose first chunk is "
                                  f"damaged or missing ({exc}): it holds nothing "
                                  f"to read.") from None
        if head.get("kind") != "start" or not isinstance(head.get("meta"), dict):
            raise CutimelineError(f"{path} is damaged: its journal does not begin with "
                                  f"the recording's meta.")
        if head.get("journal") != VERSION:
            raise CutimelineError(f"{path} is a journal of layout {head.get('journal')!r}; "
                                  f"this cutimeline reads layout {VERSION}: upgrade it.")
        chunks, good = 1, f.tell()
        while not ended:
            try:
                h, payload = _chunk(f, size, chunks)
                if h is None:
                    break
                if h.get("kind") == "end":
                    ended = True
                else:
                    _rows(h, payload, cols, strings, threads)
                last = h
            except _Stop as exc:
                why = str(exc)
                break
            chunks, good = chunks + 1, f.tell()
    tables = {name: Table(name, {c: np.concatenate(v) for c, v in cols[name].items()})
              for name in TABLES}
    tables["ops"] = tables["ops"].take(np.argsort(tables["ops"]["seq"], kind="stable"))
    tables["spans"] = tables["spans"].take(np.argsort(tables["spans"]["begin_ns"],
                                                      kind="stable"))
    meta = dict(head["meta"])
    step = last.get("step", 0)
    meta.update(threads=threads, aligned=True, truncated=last.get("truncated") is True,
                journal={"chunks": chunks, "unread_bytes": size - good,
                         "stopped": ended, "why_unread": why})
    meta["partial"] = (f"stopped at step {step}, but the process ended before its file "
                       f"was written; this is its journal (host side only)" if ended else
                       f"unknown cause at step {step}: the process ended while recording "
                       f"(SIGKILL, a crash or os._exit?); this is its journal up to its "
                       f"last whole chunk (host side only)")
    return tables, strings, meta


def _claims(path: str, size: int) -> tuple[dict[str, int], int]:
    """The rows per table and the strings the "rows" chunks claim in their
    headers, read without their payloads (nor CRCs) up to the first chunk
    whose framing, header or counts are not what this layout writes, where
    ``read`` stops too."""
    rows, strings = dict.fromkeys(TABLES, 0), 0
    with open(path, "rb") as f:
        f.seek(len(MAGIC))
        while True:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                break
            tag, h, p, _ = _PREFIX.unpack(prefix)
            if tag != _CHUNK or h > MAX_HEADER or p > MAX_PAYLOAD or f.tell() + h + p > size:
                break
            try:
                header = json_member(path, f.read(h), "a chunk")
            except (ValueError, UnicodeDecodeError, CutimelineError):
                break
            f.seek(p, os.SEEK_CUR)
            if not isinstance(header, dict) or header.get("kind") == "end":
                break  # read stops after an end chunk
            if header.get("kind") != "rows":
                continue
            tables, text = header.get("tables"), header.get("strings")
            counts = [(name, t.get("rows") if isinstance(t, dict) else None)
                      for name, t in (tables.items() if isinstance(tables, dict) else ())]
            counts.append(("strings", text.get("count") if isinstance(text, dict) else None))
            if not all(_count(n) and n <= MAX_ROWS and name in (*TABLES, "strings")
                       for name, n in counts):
                break  # read stops at this chunk too
            for name, n in counts:
                if name == "strings":
                    strings += n
                else:
                    rows[name] += n
    return rows, strings


def _chunk(f: BinaryIO, size: int, number: int) -> tuple[dict | None, bytes]:
    """The next chunk's header and payload; (None, b"") at the end of the file."""
    prefix = f.read(_PREFIX.size)
    if not prefix:
        return None, b""
    if len(prefix) < _PREFIX.size:
        raise _Stop("a chunk cut short")
    tag, h, p, crc = _PREFIX.unpack(prefix)
    if tag != _CHUNK:
        raise _Stop(f"chunk {number} does not begin with {_CHUNK!r}")
    if h > MAX_HEADER or p > MAX_PAYLOAD or f.tell() + h + p > size:
        raise _Stop(f"chunk {number} claims {h}+{p} bytes, past the file's end "
                    f"or a journal's limits")
    head, payload = f.read(h), f.read(p)
    if zlib.crc32(payload, zlib.crc32(head, zlib.crc32(prefix[4:12]))) != crc:
        raise _Stop(f"chunk {number} fails its CRC")
    try:
        header = json_member(f.name, head, f"chunk {number}")
    except (ValueError, UnicodeDecodeError, CutimelineError) as exc:
        raise _Stop(f"chunk {number}'s header is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("chunk") != number:
        raise _Stop(f"chunk {number} is not numbered {number}")
    return header, payload


def _rows(h: dict, payload: bytes, cols: dict, strings: list[str], threads: list[str]) -> None:
    """Add a "rows" chunk's rows, strings and threads (all or none)."""
    view = memoryview(payload)

    def located(entry: Any) -> memoryview:
        at, n = (entry.get("offset"), entry.get("size")) if isinstance(entry, dict) else (0, 0)
        if not _count(at) or not _count(n) or at + n > len(payload) or "fill" in entry:
            raise _Stop(f"chunk {h['chunk']} has a column entry this layout does not write")
        return view[at:at + n]

    try:
        text, tables = h.get("strings"), h.get("tables")
        if h.get("kind") != "rows" or not isinstance(text, dict) or \
                not isinstance(tables, dict) or not set(tables) <= set(TABLES) or \
                text.get("from") != len(strings) or not _count(text.get("count")) or \
                text["count"] > MAX_ROWS:
            raise _Stop(f"chunk {h['chunk']} is not a rows chunk this layout writes")
        lengths = unpack(text["lengths"], located(text["lengths"]), text["count"], "i")
        blob = bytes(unpack_bytes(text["blob"], located(text["blob"])))
        if len(lengths) and (lengths.min() < 0 or int(lengths.sum()) != len(blob)):
            raise _Stop(f"chunk {h['chunk']}'s string lengths do not fit its strings")
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        new = [blob[a:b].decode("utf-8", "surrogatepass")
               for a, b in zip(bounds[:-1], bounds[1:])]
        got: dict[str, dict[str, np.ndarray]] = {}
        for name, t in tables.items():
            rows, entries = t.get("rows") if isinstance(t, dict) else None, \
                t.get("columns") if isinstance(t, dict) else None
            known = dict(SCHEMA[name])
            if not _count(rows) or rows > MAX_ROWS or not isinstance(entries, dict) or \
                    set(entries) != set(known):
                raise _Stop(f"chunk {h['chunk']}'s table {name} is not one this layout writes")
            raw = {c: unpack(e, located(e), rows, "i") for c, e in entries.items()}
            for c, e in entries.items():
                if e.get("delta") is True:
                    raw[c] = np.cumsum(raw[c])
            for c, e in entries.items():
                base = e.get("minus")
                if base is not None:
                    if base not in raw or entries[base].get("minus") is not None:
                        raise _Stop(f"chunk {h['chunk']}'s column {name}.{c} subtracts "
                                    f"{base!r}, which it cannot")
                    raw[c] = raw[c] + raw[base]
            got[name] = dict(Table(name, raw).columns)  # dtypes and ranges checked
        names = h.get("threads", [])
        if h.get("threads_from", len(threads)) != len(threads) or \
                not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Stop(f"chunk {h['chunk']}'s threads do not follow the chunk before")
    except (CodecError, CutimelineError, KeyError, TypeError, ValueError,
            UnicodeDecodeError, OverflowError) as exc:
        raise _Stop(f"chunk {h.get('chunk')}: {exc}") from None
    for name, columns in got.items():
        for c, v in columns.items():
            cols[name].setdefault(c, []).append(v)
    strings += new
    threads += names


def _count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0
