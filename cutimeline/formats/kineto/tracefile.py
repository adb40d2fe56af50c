"""Chrome-trace files: reading them (gzip or plain, checked), exact µs → ns,
and the complete events of one category as columns.

Chrome-trace JSON (the format of torch.profiler, Perfetto and
chrome://tracing) gives times as µs numbers. ``to_ns`` turns them into
integer ns exactly, where a plain ``round(ts * 1000)`` can be 1 ns off and
HTA's ``int(ts)`` drops the sub-µs part altogether.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import zlib
from collections import Counter
from typing import Any

import numpy as np

from ...errors import CutimelineError
from ...timeline import budgets
from ...timeline.budgets import (PEAK_PER_TEXT_BYTE, input_file, memory_budget, out_of_memory,
                                 text_budget)

__all__ = ["read_trace", "bucket_events", "to_ns", "columns", "take", "concat", "usable_id",
           "floats"]


def read_trace(path: str, progress=None, notes: list[str] | None = None,
               max_bytes: int | None = None) -> dict[str, Any]:
    """The JSON object of a Chrome trace file (gzip or plain), checked to
    hold a ``traceEvents`` list; a bare event list is accepted too.
    ``progress(stage, fraction)``, if given, hears how far reading got;
    ``notes``, if given, what was mended (bytes that are no UTF-8). Text
    whose parsing would take more than ``max_bytes`` (``budgets.max_bytes``)
    is refused before it is parsed, or inflated further."""
    name = os.path.basename(path)
    report = progress or (lambda stage, fraction: None)
    most_text = budgets.max_bytes(max_bytes) // PEAK_PER_TEXT_BYTE
    try:
        with input_file(path) as fh:
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
    packed = None
    if data[:2] == b"\x1f\x8b":
        packed, data = len(data), _gunzip(data, name, most_text + 1)
    if len(data) > most_text:  # refused before json.loads makes ~5× the text of it
        memory_budget(path, len(data) * PEAK_PER_TEXT_BYTE,
                      f"{len(data):,} bytes of JSON text" if packed is None else
                      f"more than {most_text:,} bytes of JSON text (gzipped in {packed:,})",
                      max_bytes)
    report("parsing", 0.15)
    try:
        try:
            doc = json.loads(data)
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" or data.lstrip()[:1] not in (b"{", b"["):
                raise
            # Kineto copies kernel and op names byte for byte, so a name
            # may hold bytes that are no UTF-8 (HTA met such traces): each
            # is read as U+FFFD rather than the whole trace refused.
            text = data.decode("utf-8", "replace")
            mended = text.count("\ufffd") - data.count("\ufffd".encode())
            doc = json.loads(text)
            if notes is not None:
                notes.append(f"{name} holds {mended} bytes that are no UTF-8 (in names, "
                             f"most likely); each is read as U+FFFD.")
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":   # text after a whole value is no truncation
            _truncated(data, exc.pos, name)
        raise CutimelineError(f"{name} is not valid JSON ({exc.msg} at line "
                              f"{exc.lineno}, column {exc.colno}); is it a complete "
                              f"torch.profiler trace?") from None
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":   # cut inside a UTF-8 character
            _truncated(data[:exc.start], exc.start, name)
        raise CutimelineError(f"{name} is neither JSON text nor gzip ({exc.reason}); "
                              f"give a torch.profiler .json or .json.gz trace.") from None
    except RecursionError:
        raise CutimelineError(f"{name} nests JSON lists or objects about "
                              f"{sys.getrecursionlimit()} levels deep or more; a "
                              f"torch.profiler trace nests a few, so the file is "
                              f"damaged or not a trace.") from None
    except ValueError as exc:   # e.g. an integer of more than 4300 digits
        raise CutimelineError(f"{name} holds JSON Python cannot read ({exc}); "
                              f"the file is damaged or not a trace.") from None
    except MemoryError:
        raise out_of_memory(name, f"{len(data):,} bytes of JSON") from None
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


def _gunzip(data: bytes, name: str, stop: int) -> bytearray:
    """The text of gzip ``data`` (every member, as gzip does), inflated as a
    stream a few MB at a time up to ``budgets.text_budget`` bytes: a file
    that would inflate past it is refused as the stream passes the budget
    (its trailer's size cannot be trusted: a truncated file has none).
    Past ``stop`` bytes (more than the memory budget lets be parsed) it
    stops inflating and returns what it has, for the caller to refuse."""
    most = text_budget(len(data))
    out = bytearray()
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            piece = d.decompress(rest, min(most - len(out) + 1, stop - len(out), _STEP))
            while True:
                out += piece
                if len(out) > most:
                    _too_big(name, most, len(data))
                if len(out) >= stop:
                    return out
                if d.eof or not d.unconsumed_tail:
                    break
                piece = d.decompress(d.unconsumed_tail,
                                     min(most - len(out) + 1, stop - len(out), _STEP))
            if not d.eof:
                raise EOFError("the compressed stream ends early")
            rest = d.unused_data.lstrip(b"\x00")  # members follow; gzip pads with zeros
    except (EOFError, zlib.error) as exc:
        raise CutimelineError(f"{name} is a damaged or truncated gzip file "
                              f"({exc}); copy or record the trace again.") from None
    except MemoryError:
        raise out_of_memory(name, f"{len(out):,}+ bytes of JSON inflated so far from "
                            f"{len(data):,} gzipped") from None
    return out


_STEP = 1 << 22   # bytes inflated per call


def _too_big(name: str, most: int, packed: int) -> None:
    raise CutimelineError(
        f"{name} inflates past {most:,} bytes from {packed:,} gzipped bytes (a "
        f"torch.profiler trace compresses some 10-30×, never "
        f"{budgets.TEXT_PER_GZIP_BYTE}×): the file is damaged or crafted.")


def _truncated(data: bytes | str, pos: int, name: str) -> None:
    """Raise the error of a file that ends mid-JSON: Kineto writes a trace
    as it goes, so a profiler stopped by a crash or a copy cut short leaves
    one that stops inside ``traceEvents``. It is one when JSON begins and
    either the parser ran out of text (``pos``: where it stopped) or the
    text does not end as a whole trace does, with '}'."""
    text = (data if isinstance(data, str) else data.decode("utf-8", "replace")).rstrip()
    if not text.strip():
        raise CutimelineError(f"{name} is empty; the profiler wrote no trace into it "
                              f"(record it again and let the profiler exit).")
    if text.lstrip()[0] in "{[" and (pos >= len(text) or text[-1] not in "}]"):
        raise CutimelineError(
            f"{name} is truncated: its JSON stops mid-event after {len(data)} bytes "
            f"(a trace ends with '}}'); the profiler did not finish writing it or the "
            f"copy was cut short. Record or copy it again.")


def bucket_events(events: list, categories: tuple[str, ...],
                  aliases: dict[str, str] | None = None,
                  instants: tuple[str, ...] = ()) -> tuple[dict, dict, dict, Counter]:
    """One pass over the events: complete events of the given categories
    (an alias's events go to the category it names) and instant events of
    the given names (each name a bucket of its own), ac2g flow starts
    (id → event), thread names ((pid, tid) → name), and counts of what is
    not read, by category or phase."""
    cats: dict[str, list] = {c: [] for c in (*categories, *instants)}
    lookup = {**{old: cats[new] for old, new in (aliases or {}).items()},
              **{c: cats[c] for c in categories}}
    flows: dict[Any, dict] = {}
    names: dict[tuple, str] = {}
    skipped: Counter = Counter()
    for e in events:
        if type(e) is not dict:
            skipped["not an object"] += 1
            continue
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            try:
                bucket = lookup.get(cat)
            except TypeError:   # a list or object: no category
                bucket = None
            if bucket is not None:
                bucket.append(e)
            else:
                skipped[_label(cat)] += 1
        elif ph == "s":
            if e.get("cat") == "ac2g" and type(e.get("id")) in (int, str):
                flows[e["id"]] = e
        elif ph == "M":
            if e.get("name") == "thread_name":
                args = e.get("args")
                label = args.get("name") if type(args) is dict else None
                if type(label) is str and usable_id(e.get("pid")) and \
                        usable_id(e.get("tid")):
                    names[e.get("pid"), e.get("tid")] = label
        elif ph == "i" or ph == "I":
            name = e.get("name")
            if instants and type(name) is str and name in instants:
                cats[name].append(e)
        elif ph not in ("f", "C"):
            skipped[f"ph {_label(ph)}"] += 1
    return cats, flows, names, skipped


def _label(v: Any) -> str:
    """A category or phase as a short text (lists and objects by type)."""
    text = v if type(v) is str else type(v).__name__ if type(v) in (list, dict) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


_ID_TYPES = (int, str, type(None))


def usable_id(v: Any) -> bool:
    """Whether ``v`` can be a pid or tid: an int in int64 range, a str, None."""
    return type(v) in _ID_TYPES and (type(v) is not int or -2**63 <= v < 2**63)


def _bad_ids(values: list) -> np.ndarray | None:
    """Mask of the values that are no usable pid or tid; None if all are.
    (The few distinct values are checked: a float or bool equal to an id
    in use reads as that id.)"""
    try:
        if all(map(usable_id, set(values))):
            return None
    except TypeError:   # unhashable: a list or an object
        pass
    return np.array([not usable_id(v) for v in values], bool)


def to_ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (float64) → integer ns, rounded to the nearest ns.

    The whole µs and the fraction are converted apart: exact for any
    decimal with up to 3 fractional digits below 2^43 µs (~100 days)."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def floats(values: list) -> np.ndarray:
    """The values as float64, NaN where one is no number."""
    try:
        out = np.array(values, np.float64)
        if out.shape == (len(values),):
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    # Slow path: some value is no number (a list of equal-length lists
    # would have made a 2-D array above).
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)
        except (TypeError, ValueError, OverflowError):
            pass
    return out


_FIELDS = operator.itemgetter("name", "ts", "dur", "pid", "tid", "args")


def columns(cat: str, events: list, shift: int, warnings: list[str],
            limit_ns: int = 2**62) -> dict:
    """Name, cat, args, pid, tid and exact ns begin/end (numpy) of the
    complete events of one category; ``shift`` ns is added to times.
    Events without a numeric ts, with times beyond ±``limit_ns`` (shift
    included) or with a pid or tid that is neither an int nor a string are
    left out, with a line in ``warnings``."""
    try:
        rows = list(map(_FIELDS, events))   # fast path: Kineto writes them all
    except KeyError:
        rows = [(e.get("name", ""), e.get("ts"), e.get("dur", 0), e.get("pid"),
                 e.get("tid"), e.get("args")) for e in events]
    name, ts, dur, pid, tid, args = (list(c) for c in zip(*rows)) if rows else \
        ([] for _ in range(6))
    if not all(type(n) is str for n in name):
        name = [n if type(n) is str else "" if type(n) in (list, dict) else str(n or "")
                for n in name]
    if not all(type(a) is dict for a in args):
        args = [a if type(a) is dict else {} for a in args]
    ts, dur = floats(ts), floats(dur)
    ok = np.ones(len(ts), bool)
    for what, values in (("ts", ts), ("dur", dur)):
        finite = np.isfinite(values)
        if not finite.all():
            warnings.append(f"{int((~finite).sum())} {cat} events have no numeric "
                            f"'{what}' (NaN and Infinity are none); they are left out.")
            ok &= finite
    if (dur[ok] < 0).any():
        warnings.append(f"{int((dur[ok] < 0).sum())} {cat} events have a negative "
                        f"duration; they are read as zero-length.")
    ts, dur = np.where(ok, ts, 0), np.where(ok, np.maximum(dur, 0), 0)
    # In float: ts, dur, begin and end must lie within ±limit_ns, so that
    # neither the conversion nor the sums leave int64.
    far = ok & ~((np.abs(ts) < limit_ns / 1000) & (dur < limit_ns / 1000)
                 & (np.abs(ts * 1000 + shift) < limit_ns)
                 & (np.abs((ts + dur) * 1000 + shift) < limit_ns))
    if far.any():
        warnings.append(f"{int(far.sum())} {cat} events have a ts or dur beyond "
                        f"±{limit_ns / 1e9 / 86400 / 365.25:.0f} years; they are left out.")
        ok &= ~far
        ts, dur = np.where(ok, ts, 0), np.where(ok, dur, 0)
    for what, values in (("pid", pid), ("tid", tid)):
        bad = _bad_ids(values)
        if bad is not None:
            warnings.append(f"{int(bad.sum())} {cat} events have a '{what}' that is "
                            f"neither a 64-bit integer nor a string; they are left out.")
            ok &= ~bad
    begin = to_ns(ts) + shift
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
