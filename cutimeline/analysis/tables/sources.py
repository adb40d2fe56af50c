"""Where in the user's code the syncs, the DataLoader waits and a verdict's
leading op came from: the ``sources`` table grouped by source line.

The recorder writes one ``sources`` row per op (or host span) with a known
user location: the first stack frame outside torch and cutimeline. A sync
reaches its line through the op that blocked (``syncs.op``), or, with no
op behind it (``torch.cuda.synchronize``), through the SYNC span the
recorder wrote with its times; a DataLoader wait through its DATA span.
Lines are grouped by (file, line); a group's function and code are those
of its first row (one line holds one statement). Syncs and waits whose
op or span has no source row count in the totals but in no line, so a
quote says how many of the total it covers. In text a line reads
"train.py:57 `acc = (pred == y).float()…`": the file's last path
component, the line, and its code (or "in main" when the code is unknown). A Timeline without ``sources`` rows gets no quotes:
the report's text and tables stay as they were.
"""

from __future__ import annotations

import os
import weakref

import numpy as np

from ...timeline.schema import NONE, SpanKind
from ...timeline.timeline import Timeline

__all__ = ["SOURCE_DTYPE", "source_rows", "line_table", "wait_lines", "op_line",
           "quote", "counted"]

#: ``Report.table("sources")``: one row per (kind, file, line); kind "sync"
#: (a host sync, wait_ns the time the host was blocked) or "data" (a
#: DataLoader fetch, wait_ns its span's length)
SOURCE_DTYPE = [("kind", object), ("count", np.int64), ("wait_ns", np.int64),
                ("file", object), ("line", np.int64), ("function", object),
                ("code", object)]

_CODE_CHARS = 60  # a quoted line's code beyond this is cut with "…"
# source_rows per Timeline (immutable, so the answer stays right): a report
# asks once per verdict range, and with record(stack=True) every op has a row
_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def source_rows(tl: Timeline, table: str) -> np.ndarray:
    """Per row of ``table`` ("ops" or "spans"): its row in ``sources``,
    NONE where it has none (read-only; made once per Timeline)."""
    mine = _ROWS.setdefault(tl, {})
    if table not in mine:
        mine[table] = _source_rows(tl, table)
        mine[table].flags.writeable = False
    return mine[table]


def _source_rows(tl: Timeline, table: str) -> np.ndarray:
    src = tl.sources
    col = np.asarray(src.op if table == "ops" else src.span, np.int64)
    out = np.full(len(tl.table(table)), NONE, np.int64)
    has = np.flatnonzero(col != NONE)
    out[col[has]] = has
    return out


def line_table(tl: Timeline, rows: np.ndarray, weights: np.ndarray,
               kind: str) -> np.ndarray:
    """``rows`` (sources rows, NONE: unknown) grouped by (file, line):
    count and summed ``weights`` (ns) per line, most counted first (ties:
    most weight, then first seen). Unknown rows are left out."""
    rows = np.asarray(rows, np.int64)
    weights = np.asarray(weights, np.int64)
    known = rows != NONE
    rows, weights = rows[known], weights[known]
    out = np.zeros(0, SOURCE_DTYPE)
    if len(rows) == 0:
        return out
    src = tl.sources
    f = np.asarray(src.file, np.int64)[rows]
    ln = np.asarray(src.line, np.int64)[rows]
    key = (f << 32) | (ln & 0xFFFFFFFF)
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    count = np.bincount(inv, minlength=len(uniq))
    wait = np.bincount(inv, weights=weights, minlength=len(uniq))
    order = np.lexsort((first, -wait, -count))
    lead = rows[first[order]]
    out = np.zeros(len(uniq), SOURCE_DTYPE)
    out["kind"] = kind
    out["count"], out["wait_ns"] = count[order], wait[order].round()
    out["file"] = tl.decode(src.file[lead])
    out["line"] = src.line[lead]
    out["function"] = tl.decode(src.function[lead])
    out["code"] = tl.decode(src.code[lead])
    return out


def _inside(t: np.ndarray, h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
    """Whether each time in ``t`` lies in one of the windows [h0, h1)
    (disjoint, as steps' host windows are)."""
    order = np.argsort(h0, kind="stable")
    h0, h1 = h0[order], h1[order]
    i = np.searchsorted(h0, t, side="right") - 1
    return (i >= 0) & (t < h1[np.maximum(i, 0)])


def wait_lines(tl: Timeline, h0, h1) -> dict:
    """The syncs and DataLoader fetches that begin in the host windows
    [h0, h1) (one window or one per step) by source line: ``{"sync": line
    table, "syncs": how many in all, "data": line table, "fetches": how
    many in all}`` (``line_table``; wait_ns: time blocked, fetch time)."""
    h0 = np.atleast_1d(np.asarray(h0, np.int64))
    h1 = np.atleast_1d(np.asarray(h1, np.int64))
    y, s = tl.syncs, tl.spans
    sel = np.flatnonzero(_inside(np.asarray(y.host_begin_ns, np.int64), h0, h1))
    op = np.asarray(y.op, np.int64)[sel]
    by_op = source_rows(tl, "ops")
    rows = np.where(op != NONE, by_op[np.maximum(op, 0)], NONE)
    bare = np.flatnonzero(op == NONE)
    if len(bare):  # no op: the SYNC span with the sync's times, if any
        rows[bare] = _sync_spans(tl, np.asarray(y.host_begin_ns, np.int64)[sel[bare]],
                                 np.asarray(y.host_end_ns, np.int64)[sel[bare]],
                                 np.asarray(y.thread)[sel[bare]])
    sync = line_table(tl, rows, (y.host_end_ns - y.host_begin_ns)[sel], "sync")
    data = np.flatnonzero((s.kind == SpanKind.DATA) &
                          _inside(np.asarray(s.begin_ns, np.int64), h0, h1))
    fetch = line_table(tl, source_rows(tl, "spans")[data],
                       (s.end_ns - s.begin_ns)[data], "data")
    return {"sync": sync, "syncs": int(len(sel)), "data": fetch,
            "fetches": int(len(data))}


def _sync_spans(tl: Timeline, b: np.ndarray, e: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """The sources row of the SYNC span of ``thread`` around each sync
    [b, e] (NONE where none is): the latest to begin at or before b, if it
    ends at or after e. CUDA's wrapped syncs share their span's times; a
    SimGPU's sync is timed inside the call its span times."""
    s = tl.spans
    out = np.full(len(b), NONE, np.int64)
    by_span = source_rows(tl, "spans")
    sync = np.asarray(s.kind) == SpanKind.SYNC
    for t in np.unique(thread):
        mine = np.flatnonzero(sync & (np.asarray(s.thread) == t))
        if not len(mine):
            continue
        mine = mine[np.argsort(np.asarray(s.begin_ns)[mine], kind="stable")]
        sb = np.asarray(s.begin_ns, np.int64)[mine]
        want = np.flatnonzero(thread == t)
        i = np.searchsorted(sb, b[want], side="right") - 1
        j = mine[np.maximum(i, 0)]
        hit = (i >= 0) & (np.asarray(s.end_ns, np.int64)[j] >= e[want])
        out[want[hit]] = by_span[j[hit]]
    return out


def op_line(tl: Timeline, ops: np.ndarray, weights: np.ndarray,
            name: int) -> dict | None:
    """Where the op named ``name`` (a string id) among the op rows ``ops``
    was called most (by summed ``weights``: GPU or host time): ``{"name",
    "count" (its calls at that line), "calls" (its calls in all), "file",
    "line", "function", "code"}``; None when none of them has a source."""
    if name == NONE:
        return None
    ops = np.asarray(ops, np.int64)
    mine = np.asarray(tl.ops["name"], np.int64)[ops] == name
    rows = source_rows(tl, "ops")[ops[mine]]
    t = line_table(tl, rows, np.asarray(weights)[mine], "op")
    if len(t) == 0:
        return None
    best = t[np.lexsort((-t["count"], -t["wait_ns"]))[0]]
    return {"name": tl.string(int(name)), "count": int(best["count"]),
            "calls": int(mine.sum()), "file": str(best["file"]),
            "line": int(best["line"]), "function": str(best["function"]),
            "code": str(best["code"])}


def quote(row) -> str:
    """A source line in text: "train.py:57 `acc = y.mean().item()`" (see
    the module doc); ``row``: a line table row or an ``op_line`` dict."""
    where = f"{os.path.basename(str(row['file'])) or '?'}:{int(row['line'])}"
    code = str(row["code"])
    if not code:
        fn = str(row["function"])
        return f"{where} in {fn}" if fn else where
    if len(code) > _CODE_CHARS:
        code = code[:_CODE_CHARS - 1] + "…"
    return f"{where} `{code}`"


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def counted(lines: np.ndarray, total: int, noun: str, steps: int = 1) -> str:
    """The top line of a line table with its count, per step when the text
    covers several steps: "12 syncs per step, 11 at train.py:57 `…`", or
    "11 of 12 syncs at train.py:57 `…`"; "" without a line."""
    if len(lines) == 0 or total <= 0:
        return ""
    top = lines[0]
    if steps > 1:
        n = _num(total / steps)
        return (f"{n} {_plural(noun, n)} per step, "
                f"{_num(int(top['count']) / steps)} at {quote(top)}")
    return f"{int(top['count'])} of {total} {_plural(noun, str(total))} at {quote(top)}"


def _plural(noun: str, n: str) -> str:
    """``noun`` (a plural: syncs, fetches, calls) for the count ``n``."""
    return noun if n != "1" else noun[:-2] if noun.endswith("ches") else noun[:-1]
