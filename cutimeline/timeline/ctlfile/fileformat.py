"""The ``.ctl`` file: one zip archive of columns and JSON, no pickle.

Formats 3 to 5 (5 written, ``schema.FORMAT_VERSION``; 4 adds the tables
sources, memory and flops, 5 the table collectives, ``schema.TABLE_ADDED``)
have two members.
``meta.json``: UTF-8 JSON with ``format``, ``format_version``, the
Timeline's ``meta`` and a ``manifest``:
the rows of each table, the number of strings, and for each column
(``<table>.<column>``, ``strings.lengths``: the UTF-8 length of each string,
``strings.blob``: their bytes) its prediction (``encoding``, see
``schema.ENCODING`` and ``prediction``), how its bytes are stored
(``first``, ``fill``, ``width``, ``zigzag``, ``planes``, see
``columncodec``), and where they are in ``columns.bin`` (``offset``,
``size``). ``columns.bin`` is stored as it is: its columns are deflated
plane by plane (the zip's CRC covers them all). Older cutimelines read
``meta.json`` too, and refuse the file as newer than they are.

Formats 1 and 2 (read) are ``.npz`` archives: ``<table>.<column>.npy``
arrays in the schema's dtypes (columns of ``_NPZ_ENCODING`` stored as
differences), ``strings.blob``/``strings.offsets`` and ``meta.json`` as
uint8 arrays. ``save`` writes a Timeline (``write``: to a file the caller
opened); ``read`` returns its parts, which ``timeline.load`` makes into
one; it reads a recording's journal (``journal.py``, what a killed
process leaves) too. A file older than a table reads with it empty, but
for collectives: formats 1–4 kept them in ``meta["collectives"]``, which
``read`` makes the table (``collectives.from_meta``) and drops from meta.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ...errors import CutimelineError
from .. import destination
from . import journal
from .archive import check_names, json_member, member, npy_array
from .. import budgets
from ..collectives import from_meta
from ..budgets import input_file, memory_budget, meta_budget, out_of_memory, row_budget
from .columncodec import CodecError, pack, pack_bytes, unpack, unpack_bytes
from .prediction import candidates, choose, decode, residual
from ..schema import FORMAT, FORMAT_VERSION, SCHEMA, TABLE_ADDED
from ..table import Table

if TYPE_CHECKING:
    from ..timeline import Timeline

__all__ = ["save", "write", "read"]

HEAD, COLUMNS = "meta.json", "columns.bin"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip entry times: the same Timeline, the same bytes


def save(tl: Timeline, path: str | os.PathLike) -> None:
    """Write ``tl`` to ``path``, whole or not at all (``destination.py``:
    what it may replace, and how)."""
    path = os.fspath(path)
    destination.check(path)  # before the work
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CutimelineError(f"Cannot save to {path}: the folder {folder} "
                              f"does not exist.")
    head, payload = _encode(tl)
    with destination.replacing(path) as f:
        _write(f, head, payload)


def write(tl: Timeline, f: BinaryIO) -> None:
    """Write ``tl`` as a ``.ctl`` to ``f``, a new file open for binary
    writing: ``save`` for a caller that made the file itself (the
    on-demand capture, in a folder it holds by descriptor)."""
    _write(f, *_encode(tl))


def _encode(tl: Timeline) -> tuple[bytes, bytes]:
    """The bytes of ``meta.json`` and of ``columns.bin``."""
    manifest, payload = _columns(tl)
    try:
        head = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION,
                           "meta": tl.meta, "manifest": manifest}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CutimelineError(f"The Timeline's meta cannot be saved as JSON "
                              f"({exc}); keep meta to str, numbers, lists and "
                              f"dicts.") from None
    return head.encode(), payload


def _write(f: BinaryIO, head: bytes, payload: bytes) -> None:
    with zipfile.ZipFile(f, "w") as z:
        z.writestr(zipfile.ZipInfo(HEAD, _EPOCH), head, zipfile.ZIP_DEFLATED, 6)
        z.writestr(zipfile.ZipInfo(COLUMNS, _EPOCH), payload, zipfile.ZIP_STORED)


def _columns(tl: Timeline) -> tuple[dict[str, Any], bytes]:
    """The manifest and the bytes of ``columns.bin``."""
    tables = {name: tl.table(name).columns for name in SCHEMA}
    parts: list[bytes] = []
    entries: dict[str, dict[str, Any]] = {}
    offset = 0

    def add(key: str, entry: dict[str, Any], data: bytes) -> None:
        nonlocal offset
        entries[key] = dict(entry, offset=offset, size=len(data))
        parts.append(data)
        offset += len(data)

    for name, schema in SCHEMA.items():
        for i, (col, dtype) in enumerate(schema):
            if dtype.kind == "f":
                add(f"{name}.{col}", *pack(tables[name][col]))
                continue
            enc, res = choose(name, col, tables)
            if res is None:
                res = residual(enc, name, col, tables)
            # the last column of a table of constants stores its bytes: they
            # vouch for the table's rows (see _decode)
            vouched = any("fill" not in entries[f"{name}.{c}"] for c, _ in schema[:i])
            entry, data = pack(res, fill=vouched or i < len(schema) - 1)
            add(f"{name}.{col}", {"encoding": list(enc), **entry}, data)
    encoded = [s.encode("utf-8", "surrogatepass") for s in tl.strings]
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    add("strings.lengths", *pack(lengths, fill=False))
    add("strings.blob", *pack_bytes(b"".join(encoded)))
    manifest = {"rows": {name: len(tl.table(name)) for name in SCHEMA},
                "strings": len(encoded), "columns": entries}
    return manifest, b"".join(parts)


def read(path: str | os.PathLike, max_bytes: int | None = None
         ) -> tuple[dict[str, Table], list[str], dict[str, Any]]:
    """The tables, strings and meta of a ``.ctl`` file; a damaged, foreign or
    newer file raises CutimelineError naming the file and the problem. What
    it claims is held to ``budgets`` (memory: to ``max_bytes``, see
    ``budgets.max_bytes``) before it is decoded, and what it holds to
    ``invariants`` (``timeline.load`` checks the latter)."""
    path = os.fspath(path)
    budgets.max_bytes(max_bytes)  # a bad budget is refused whatever the file
    try:
        opened = input_file(path)
    except FileNotFoundError:
        raise CutimelineError(f"{path} does not exist.") from None
    except OSError as exc:
        raise CutimelineError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    with opened as fh:
        size = os.fstat(fh.fileno()).st_size
        kept = journal.is_journal(path)  # a recording's journal, left by a killed process
        if not kept and not zipfile.is_zipfile(fh):
            hint = (" It looks like a Chrome/torch.profiler trace: ctl.load "
                    "reads those.") if _looks_like_json(fh) else ""
            raise CutimelineError(f"{path} is not a cutimeline file (not a zip "
                                  f"archive, or truncated).{hint}")
        claimed: list[int] = []   # rows, once the manifest is read
        try:
            version = FORMAT_VERSION
            if kept:  # its meta checked as a file's is
                tables, strings, meta = journal.read(path, max_bytes)
                _check_head(path, {"format": FORMAT, "format_version": FORMAT_VERSION,
                                   "meta": meta})
            else:
                with zipfile.ZipFile(fh) as z:
                    names = check_names(path, z)
                    if HEAD + ".npy" in names:
                        tables, strings, meta, version = _read_npz(path, z, names, size,
                                                                   max_bytes)
                    else:
                        tables, strings, meta, version = _read_zip(path, z, names, size,
                                                                   claimed, max_bytes)
            tables = {n: tables.get(n) or Table(n) for n in SCHEMA}  # newer: empty
            if version < TABLE_ADDED["collectives"] and "collectives" in meta:
                meta = dict(meta)
                kept_in_meta = meta.pop("collectives")
                if kept_in_meta is not None:
                    tables["collectives"] = Table("collectives", from_meta(
                        kept_in_meta, tables["ops"], meta, path, version))
        except CutimelineError as exc:
            if str(exc).startswith(path):
                raise
            raise CutimelineError(f"{path} is damaged: {exc}") from None
        except MemoryError:
            rows = f"{claimed[0]:,} rows" if claimed else f"{size:,} bytes of columns"
            raise out_of_memory(path, rows) from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError,
                UnicodeDecodeError, json.JSONDecodeError, RuntimeError,
                NotImplementedError) as exc:
            # RuntimeError: a member flagged encrypted; NotImplementedError: a
            # zip feature (another method, multiple disks) zipfile lacks
            raise CutimelineError(f"{path} is damaged and cannot be read "
                                  f"({type(exc).__name__}: {_one_line(exc)}).") from None
    return tables, strings, meta


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def _read_zip(path: str, z: zipfile.ZipFile, names: set[str], size: int, claimed: list[int],
              max_bytes: int | None
              ) -> tuple[dict[str, Table], list[str], dict[str, Any], int]:
    """Format 3 on: tables, strings, meta and the format version."""
    if HEAD not in names:
        raise CutimelineError(f"{path} is a zip archive but not a "
                              f"cutimeline file (it has no meta.json).")
    if COLUMNS in names:
        meta_budget(path, z.getinfo(HEAD).file_size, z.getinfo(COLUMNS).compress_size)
    head = json_member(path, member(path, z, HEAD), HEAD)
    _check_head(path, head)
    if head["format_version"] < 3:
        raise CutimelineError(f"{path} is damaged: it claims format version "
                              f"{head['format_version']} but is laid out as version 3.")
    if COLUMNS not in names:
        raise CutimelineError(f"{path} is damaged: it lacks {COLUMNS}.")
    manifest = head.get("manifest")
    if not isinstance(manifest, dict):
        raise CutimelineError(f"{path} is damaged: its meta.json has no manifest.")
    rows = _rows(path, manifest, head["format_version"])
    claimed.append(sum(rows.values()) + manifest["strings"])
    row_budget(path, claimed[0], size)
    memory_budget(path, budgets.timeline_bytes(rows, manifest["strings"]),
                  budgets.rows_claimed(rows, manifest["strings"]), max_bytes)
    tables, strings = _decode(path, manifest, rows, member(path, z, COLUMNS))
    return tables, strings, head["meta"], head["format_version"]


def _rows(path: str, manifest: dict, version: int) -> dict[str, int]:
    """Rows per table of the file's version (later tables: made empty)."""
    rows = manifest.get("rows")
    if not isinstance(rows, dict) or not all(_count(rows.get(n)) for n in _tables(version)) \
            or not _count(manifest.get("strings")) \
            or not isinstance(manifest.get("columns"), dict):
        raise CutimelineError(f"{path} is damaged: its manifest does not give "
                              f"the rows of every table and the strings.")
    return {n: rows[n] for n in _tables(version)}


def _tables(version: int) -> list[str]:
    """The tables a file of this format version holds."""
    return [n for n in SCHEMA if TABLE_ADDED.get(n, 0) <= version]


def _count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _decode(path: str, manifest: dict, rows: dict[str, int],
            payload: bytes) -> tuple[dict[str, Table], list[str]]:
    entries: dict = manifest["columns"]
    view = memoryview(payload)

    def located(key: str) -> tuple[dict, memoryview]:
        entry = entries.get(key)
        if not isinstance(entry, dict):
            raise CutimelineError(f"{path} is damaged: it lacks column {key}.")
        at, size = entry.get("offset"), entry.get("size")
        if not _count(at) or not _count(size) or at + size > len(payload):
            raise CutimelineError(f"{path} is damaged: column {key} lies outside "
                                  f"{COLUMNS} ({at!r}+{size!r} of {len(payload)} bytes).")
        return entry, view[at:at + size]

    def unpacked(key: str, n: int, kind: str) -> np.ndarray:
        entry, data = located(key)
        try:
            return unpack(entry, data, n, kind)
        except CodecError as exc:
            raise CutimelineError(f"{path} is damaged: column {key}: {exc}.") from None

    stored: dict[tuple[str, str], np.ndarray] = {}

    def column(name: str, col: str) -> np.ndarray:
        if (name, col) not in stored:
            kind = dict(SCHEMA[name])[col].kind
            stored[name, col] = unpacked(f"{name}.{col}", rows[name], "f" if kind == "f" else "i")
        return stored[name, col]

    encodings = {}
    for name in rows:
        schema, witness = SCHEMA[name], None
        for col, dtype in schema:
            key = f"{name}.{col}"
            witness = witness or ("fill" not in located(key)[0] and col)
            if dtype.kind == "f":
                continue
            enc = located(key)[0].get("encoding")
            enc = tuple(enc) if isinstance(enc, list) else enc
            if enc not in candidates(name, col):
                raise CutimelineError(f"{path} is damaged: column {key} claims "
                                      f"the prediction {enc!r}, which this format "
                                      f"does not use for it.")
            encodings[name, col] = enc
        # a constant column has no bytes to check its rows against: a column
        # with bytes (whose size bounds the rows) is unpacked before any is made
        if rows[name] and not witness:
            raise CutimelineError(f"{path} is damaged: no column of table {name} "
                                  f"stores bytes for its {rows[name]} rows.")
        if rows[name]:
            column(name, witness)
    try:
        ints = decode(encodings, column)
    except CodecError as exc:
        raise CutimelineError(f"{path} is damaged: {exc}.") from None
    tables = {}
    for name in rows:
        cols = {col: column(name, col) if dtype.kind == "f" else ints[name][col]
                for col, dtype in SCHEMA[name]}
        tables[name] = Table(name, cols)
    if "fill" in located("strings.lengths")[0]:
        raise CutimelineError(f"{path} is damaged: its string lengths claim a "
                              f"fill, which this format does not write.")
    lengths = unpacked("strings.lengths", manifest["strings"], "i")
    entry, data = located("strings.blob")
    try:
        blob = unpack_bytes(entry, data)
    except CodecError as exc:
        raise CutimelineError(f"{path} is damaged: column strings.blob: {exc}.") from None
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return tables, _strings(path, np.frombuffer(blob, np.uint8), offsets)


# -- formats 1 and 2: an .npz archive ---------------------------------------

#: what version 2 stored as differences: from the previous row, or another column
_NPZ_ENCODING = {
    ("ops", "seq"): ("delta",), ("ops", "host_begin_ns"): ("delta",),
    ("ops", "host_end_ns"): ("minus", "host_begin_ns"),
    ("events", "op"): ("delta",), ("events", "raw_ns"): ("delta",),
    ("events", "host_record_ns"): ("delta",),
    ("gpu", "op"): ("delta",), ("gpu", "begin_event"): ("delta",),
    ("gpu", "end_event"): ("minus", "begin_event"),
    ("gpu", "launch_ns"): ("delta",), ("gpu", "begin_ns"): ("delta",),
    ("gpu", "end_ns"): ("minus", "begin_ns"),
    ("truth", "event"): ("delta",), ("truth", "host_ns"): ("delta",)}
#: columns added after version 1: (table, column) -> the version that added it
_ADDED = {("syncs", "thread"): 2}


def _read_npz(path: str, z: zipfile.ZipFile, names: set[str], size: int,
              max_bytes: int | None
              ) -> tuple[dict[str, Table], list[str], dict[str, Any], int]:
    meta_budget(path, z.getinfo(HEAD + ".npy").file_size,
                sum(i.compress_size for i in z.infolist() if i.filename != HEAD + ".npy"))
    rows, strings = _npz_claims(z, names)
    memory_budget(path, budgets.timeline_bytes(rows, strings),
                  budgets.rows_claimed(rows, strings), max_bytes)
    head = json_member(path, npy_array(path, z, HEAD + ".npy", np.dtype(np.uint8)).tobytes(),
                       HEAD)
    _check_head(path, head)
    if head["format_version"] > 2:
        raise CutimelineError(f"{path} is damaged: it claims format version "
                              f"{head['format_version']} but is laid out as "
                              f"version 1 or 2 (an npz archive).")
    tables = {}
    for name in _tables(head["format_version"]):
        schema, cols = SCHEMA[name], {}
        for col, dtype in schema:
            key = f"{name}.{col}"
            if key + ".npy" not in names and (name, col) in _ADDED and \
                    head["format_version"] < _ADDED[name, col]:
                continue  # older than the column: Table fills it NONE
            if key + ".npy" not in names:
                raise CutimelineError(f"{path} is damaged: it lacks column {key}.")
            cols[col] = npy_array(path, z, key + ".npy", dtype)
        for kind in ("delta", "minus"):  # "minus" columns decode after their base
            for col in list(cols):
                enc = _NPZ_ENCODING.get((name, col))
                if enc and enc[0] == kind and len(cols[col]):
                    cols[col] = np.cumsum(cols[col], dtype=cols[col].dtype) \
                        if kind == "delta" else cols[col] + cols[enc[1]]
        tables[name] = Table(name, cols)
    offsets = npy_array(path, z, "strings.offsets.npy", np.dtype(np.int64))
    row_budget(path, sum(map(len, tables.values())) + len(offsets), size)
    strings = _strings(path, npy_array(path, z, "strings.blob.npy", np.dtype(np.uint8)), offsets)
    return tables, strings, head["meta"], head["format_version"]


def _npz_claims(z: zipfile.ZipFile, names: set[str]) -> tuple[dict[str, int], int]:
    """The rows of each table and the strings an ``.npz`` claims, from its
    members' sizes (each column's bytes past a ``.npy`` header of at least
    64), before any is read."""
    def count(name: str, itemsize: int) -> int:
        return max(z.getinfo(name).file_size - 64, 0) // itemsize if name in names else 0
    rows = {t: max((count(f"{t}.{c}.npy", d.itemsize) for c, d in schema), default=0)
            for t, schema in SCHEMA.items()}
    return rows, count("strings.offsets.npy", 8)


def _check_head(path: str, head: object) -> None:
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise CutimelineError(f"{path} is a zip archive but not a cutimeline "
                              f"file (its meta.json names no cutimeline format).")
    version = head.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CutimelineError(f"{path} is damaged: its format version "
                              f"{version!r} is not a positive integer.")
    if version > FORMAT_VERSION:
        raise CutimelineError(
            f"{path} was written by a newer cutimeline (file format "
            f"{version}; this one reads up to {FORMAT_VERSION}): upgrade "
            f"cutimeline to read it.")
    if not isinstance(head.get("meta"), dict):
        raise CutimelineError(f"{path} is damaged: its meta is not a JSON object.")


def _strings(path: str, blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    if blob.dtype != np.uint8 or offsets.dtype != np.int64 or not len(offsets) \
            or offsets[0] != 0 or offsets[-1] != len(blob) \
            or np.any(np.diff(offsets) < 0):
        raise CutimelineError(f"{path} is damaged: its string table is "
                              f"inconsistent.")
    data = blob.tobytes()
    bounds = offsets.tolist()
    return [data[a:b].decode("utf-8", "surrogatepass")
            for a, b in zip(bounds[:-1], bounds[1:])]


def _looks_like_json(fh: Any) -> bool:
    fh.seek(0)
    head = fh.read(2)
    return head[:1] in (b"{", b"[") or head == b"\x1f\x8b"
