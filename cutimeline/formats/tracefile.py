"""Chrome-trace files: reading them (gzip or plain, checked), exact µs → ns,
and the complete events of one category as columns.

Chrome-trace JSON (the format of torch.profiler, Perfetto and
chrome://tracing) gives times as µs numbers. ``to_ns`` turns them into
integer ns exactly, where a plain ``round(ts * 1000)`` can be 1 ns off and
HTA's ``int(ts)`` drops the sub-µs part altogether.
"""

from __future__ import annotations

import gzip
import json
import operator
import os
import zlib
from collections import Counter
from typing import Any

import numpy as np

from ..errors import CutimelineError

__all__ = ["read_trace", "bucket_events", "to_ns", "columns", "take", "concat"]


def read_trace(path: str, progress=None) -> dict[str, Any]:
    """The JSON object of a Chrome trace file (gzip or plain), checked to
    hold a ``traceEvents`` list; a bare event list is accepted too.
    ``progress(stage, fraction)``, if given, hears how far reading got."""
    name = os.path.basename(path)
    report = progress or (lambda stage, fraction: None)
    try:
        with open(path, "rb") as fh:
            size = max(os.fstat(fh.fileno()).st_size, 1)
            chunks = []
            while chunk := fh.read(1 << 22):
                chunks.append(chunk)
                report("reading", 0.1 * fh.tell() / size)
            data = b"".join(chunks)
    except OSError as exc:
        raise CutimelineError(f"Cannot read trace {path!r}: {exc.strerror or exc}; "
                              f"check the path.") from None
    if data[:2] == b"PK":
        raise CutimelineError(f"{name} is a zip archive (a cutimeline .ctl file?), "
                              f"not a Chrome trace; open .ctl files with ctl.load.")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise CutimelineError(f"{name} is a damaged or truncated gzip file "
                                  f"({exc}); copy or record the trace again.") from None
    report("parsing", 0.15)
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise CutimelineError(f"{name} is not valid JSON ({exc.msg} at line "
                              f"{exc.lineno}, column {exc.colno}); is it a complete "
                              f"torch.profiler trace?") from None
    except UnicodeDecodeError as exc:
        raise CutimelineError(f"{name} is neither JSON text nor gzip ({exc.reason}); "
                              f"give a torch.profiler .json or .json.gz trace.") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise CutimelineError(f"{name} is JSON but not a Chrome trace: it has no "
                              f"'traceEvents' list; give a torch.profiler trace.")
    if not isinstance(doc["traceEvents"], list):
        raise CutimelineError(f"{name}: 'traceEvents' is a "
                              f"{type(doc['traceEvents']).__name__}, not a list of "
                              f"events; the file is not a Chrome trace.")
    return doc


def bucket_events(events: list, categories: tuple[str, ...],
                  aliases: dict[str, str] | None = None) -> tuple[dict, dict, dict, Counter]:
    """One pass over the events: complete events of the given categories
    (an alias's events go to the category it names), ac2g flow starts
    (id → event), thread names ((pid, tid) → name), and counts of what is
    not read, by category or phase."""
    cats: dict[str, list] = {c: [] for c in categories}
    lookup = {**{old: cats[new] for old, new in (aliases or {}).items()}, **cats}
    flows: dict[Any, dict] = {}
    names: dict[tuple, str] = {}
    skipped: Counter = Counter()
    for e in events:
        if type(e) is not dict:
            skipped["not an object"] += 1
            continue
        ph = e.get("ph")
        if ph == "X":
            bucket = lookup.get(e.get("cat"))
            if bucket is not None:
                bucket.append(e)
            else:
                skipped[str(e.get("cat"))] += 1
        elif ph == "s":
            if e.get("cat") == "ac2g":
                flows[e.get("id")] = e
        elif ph == "M":
            if e.get("name") == "thread_name":
                names[e.get("pid"), e.get("tid")] = (e.get("args") or {}).get("name", "")
        elif ph not in ("f", "i", "I", "C"):
            skipped[f"ph {ph}"] += 1
    return cats, flows, names, skipped


def to_ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (float64) → integer ns, rounded to the nearest ns.

    The whole µs and the fraction are converted apart: exact for any
    decimal with up to 3 fractional digits below 2^43 µs (~100 days)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _floats(values: list, what: str, cat: str, warnings: list[str]) -> np.ndarray:
    try:
        return np.array(values, np.float64)
    except (TypeError, ValueError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            try:
                out[i] = float(v)
            except (TypeError, ValueError):
                pass
        warnings.append(f"{int(np.isnan(out).sum())} {cat} events have no numeric "
                        f"'{what}'; they are left out.")
        return out


_FIELDS = operator.itemgetter("name", "ts", "dur", "pid", "tid", "args")


def columns(cat: str, events: list, shift: int, warnings: list[str]) -> dict:
    """Name, cat, args, pid, tid and exact ns begin/end (numpy) of the
    complete events of one category; events without a numeric ts are left
    out, with a line in ``warnings``; ``shift`` ns is added to times."""
    try:
        rows = list(map(_FIELDS, events))   # fast path: Kineto writes them all
    except KeyError:
        rows = [(e.get("name", ""), e.get("ts"), e.get("dur", 0), e.get("pid"),
                 e.get("tid"), e.get("args")) for e in events]
    name, ts, dur, pid, tid, args = (list(c) for c in zip(*rows)) if rows else \
        ([] for _ in range(6))
    if not all(type(n) is str for n in name):
        name = [n if type(n) is str else str(n or "") for n in name]
    if not all(type(a) is dict for a in args):
        args = [a if type(a) is dict else {} for a in args]
    ts = _floats(ts, "ts", cat, warnings)
    dur = _floats(dur, "dur", cat, warnings)
    ok = np.isfinite(ts) & np.isfinite(dur)
    if (dur[ok] < 0).any():
        warnings.append(f"{int((dur[ok] < 0).sum())} {cat} events have a negative "
                        f"duration; they are read as zero-length.")
    dur = np.where(ok, np.maximum(dur, 0), 0)
    begin = to_ns(np.where(ok, ts, 0)) + shift
    cols = {"name": name, "cat": [cat] * len(name), "args": args, "pid": pid,
            "tid": tid, "begin": begin, "end": begin + to_ns(dur)}
    return take(cols, ok) if not ok.all() else cols


def take(cols: dict, mask: np.ndarray) -> dict:
    idx = np.flatnonzero(mask).tolist()
    return {k: (v[mask] if isinstance(v, np.ndarray) else [v[i] for i in idx])
            for k, v in cols.items()}


def concat(*parts: dict) -> dict:
    return {k: (np.concatenate([p[k] for p in parts]) if k in ("begin", "end")
                else [x for p in parts for x in p[k]]) for k in parts[0]}
