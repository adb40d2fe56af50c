"""The ``.ctl`` file: one compressed ``.npz`` archive, no pickle.

Members: ``<table>.<column>`` arrays (sorted int64 columns stored as
differences, see ``schema.ENCODING``), ``strings.blob`` (UTF-8 bytes of all
strings) with ``strings.offsets`` (int64, one more than strings), and
``meta.json`` (UTF-8 JSON with ``format``, ``format_version`` and the
Timeline's meta). ``save`` writes a Timeline; ``read`` returns its parts,
which ``timeline.load`` makes into one.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CutimelineError
from .schema import ENCODING, FORMAT, FORMAT_VERSION, SCHEMA
from .table import Table

if TYPE_CHECKING:
    from .timeline import Timeline

__all__ = ["save", "read"]


def _encode(table: str, col: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    a = cols[col]
    enc = ENCODING.get((table, col))
    if enc is None or not len(a):
        return a
    if enc[0] == "delta":
        out = np.empty_like(a)
        out[0] = a[0]
        np.subtract(a[1:], a[:-1], out=out[1:])  # wraps exactly on overflow
        return out
    return a - cols[enc[1]]


def _decode(table: str, col: str, raw: np.ndarray, cols: dict[str, np.ndarray]) -> np.ndarray:
    enc = ENCODING.get((table, col))
    if enc is None or not len(raw):
        return raw
    if enc[0] == "delta":
        return np.cumsum(raw, dtype=raw.dtype)
    return raw + cols[enc[1]]


def save(tl: Timeline, path: str | os.PathLike) -> None:
    """Write ``tl`` to ``path`` atomically (a temporary file renamed)."""
    path = os.fspath(path)
    try:
        meta_json = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION,
                                "meta": tl.meta}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CutimelineError(f"The Timeline's meta cannot be saved as JSON "
                              f"({exc}); keep meta to str, numbers, lists and "
                              f"dicts.") from None
    members: dict[str, np.ndarray] = {}
    for name in SCHEMA:
        cols = tl.table(name).columns
        for col in cols:
            members[f"{name}.{col}"] = _encode(name, col, cols)
    encoded = [s.encode("utf-8", "surrogatepass") for s in tl.strings]
    members["strings.blob"] = np.frombuffer(b"".join(encoded), np.uint8)
    members["strings.offsets"] = np.concatenate(
        [[0], np.cumsum([len(b) for b in encoded], dtype=np.int64)]).astype(np.int64)
    members["meta.json"] = np.frombuffer(meta_json.encode(), np.uint8)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CutimelineError(f"Cannot save to {path}: the folder {folder} "
                              f"does not exist.")
    fd, tmp = tempfile.mkstemp(prefix=".ctl-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **members)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


#: columns added after version 1: (table, column) -> the version that added it
_ADDED = {("syncs", "thread"): 2}


def read(path: str | os.PathLike) -> tuple[dict[str, Table], list[str], dict[str, Any]]:
    """The tables, strings and meta of a ``.ctl`` file; a damaged, foreign or
    newer file raises CutimelineError naming the file and the problem."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CutimelineError(f"{path} does not exist.")
    if not zipfile.is_zipfile(path):
        hint = (" It looks like a Chrome/torch.profiler trace: ctl.load and "
                "ctl.import_chrome read those.") if _looks_like_json(path) else ""
        raise CutimelineError(f"{path} is not a cutimeline file (not an npz "
                              f"archive, or truncated).{hint}")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
            if "meta.json" not in names:
                raise CutimelineError(f"{path} is an npz archive but not a "
                                      f"cutimeline file (it has no meta.json).")
            head = json.loads(bytes(z["meta.json"]).decode())
            _check_head(path, head)
            tables = {}
            for name, schema in SCHEMA.items():
                cols: dict[str, np.ndarray] = {}
                for col, dtype in schema:
                    key = f"{name}.{col}"
                    if key not in names and (name, col) in _ADDED and \
                            head["format_version"] < _ADDED[name, col]:
                        continue  # older than the column: Table fills it NONE
                    if key not in names:
                        raise CutimelineError(f"{path} is damaged: it lacks "
                                              f"column {key}.")
                    raw = z[key]
                    if raw.dtype != dtype or raw.ndim != 1:
                        raise CutimelineError(
                            f"{path} is damaged: column {key} is "
                            f"{raw.dtype}{list(raw.shape)}, not 1-d {dtype}.")
                    cols[col] = raw
                for col, _ in schema:  # "minus" columns decode after their base
                    if ENCODING.get((name, col), ("",))[0] == "delta":
                        cols[col] = _decode(name, col, cols[col], cols)
                for col, _ in schema:
                    if ENCODING.get((name, col), ("",))[0] == "minus":
                        cols[col] = _decode(name, col, cols[col], cols)
                tables[name] = Table(name, cols)
            strings = _strings(path, z["strings.blob"], z["strings.offsets"])
    except CutimelineError as exc:
        if str(exc).startswith(path):
            raise
        raise CutimelineError(f"{path} is damaged: {exc}") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError,
            UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CutimelineError(f"{path} is damaged and cannot be read "
                              f"({type(exc).__name__}: {exc}).") from None
    return tables, strings, head["meta"]


def _check_head(path: str, head: object) -> None:
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise CutimelineError(f"{path} is an npz archive but not a cutimeline "
                              f"file (its meta.json names no cutimeline format).")
    version = head.get("format_version")
    if not isinstance(version, int) or version < 1:
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


def _looks_like_json(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(2)
    return head[:1] in (b"{", b"[") or head == b"\x1f\x8b"
