"""Which value of a column a ``.ctl`` file stores (format version 3 on): its
residual after a prediction from values the reader decodes first.

``schema.ENCODING`` lists each column's candidate predictions; the writer
takes, per file and column, the one whose residuals store smallest on a
sample of rows (a recording's launch times are best predicted by their ops'
ends, the synthetic benchmark's by their begins; a gpu row's name by its
op's, unless the two are unrelated).
All arithmetic is int64 and wraps, so every prediction round-trips exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from .columncodec import CodecError, pack
from ..schema import ENCODING, SCHEMA

__all__ = ["RAW", "candidates", "choose", "residual", "decode"]

RAW = ("raw",)
SAMPLE_CHUNK = 4096  # rows per sampled run; 4 runs spread over the table
Columns = Mapping[str, Mapping[str, np.ndarray]]


def candidates(table: str, col: str) -> tuple[tuple[str, ...], ...]:
    """The predictions a file may store ``table.col`` under."""
    return ENCODING.get((table, col), (RAW,))


def choose(table: str, col: str, tables: Columns) -> tuple[tuple[str, ...], np.ndarray | None]:
    """The cheapest candidate for ``table.col`` and, when it was computed for
    every row on the way (a small table), its residuals."""
    options = candidates(table, col)
    n = len(tables[table][col])
    if len(options) == 1:
        return options[0], None
    idx = None if n <= 4 * SAMPLE_CHUNK else _sample(n)
    best, best_cost, best_res = options[0], -1, None
    for enc in options:
        res = residual(enc, table, col, tables, idx)
        cost = len(pack(res)[1])
        if best_cost < 0 or cost < best_cost:
            best, best_cost, best_res = enc, cost, res
    return best, best_res if idx is None else None


def residual(enc: tuple[str, ...], table: str, col: str, tables: Columns,
             idx: np.ndarray | None = None) -> np.ndarray:
    """``table.col`` minus its prediction ``enc`` (int64), at rows ``idx`` or all."""
    cols = tables[table]
    x = _at(cols[col], idx)
    kind = enc[0]
    if kind == "raw":
        return x
    if kind == "delta":
        return x - _prev(cols[col], idx)
    if kind == "minus":
        return x - _at(cols[enc[1]], idx)
    if kind == "after":
        return x - _prev(cols[enc[1]], idx)
    return x - _referenced(_at(cols[enc[1]], idx), tables[enc[2]][enc[3]])


def decode(encodings: Mapping[tuple[str, str], tuple[str, ...]],
           stored: Callable[[str, str], np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Every integer column of ``SCHEMA`` (int64) from ``stored(table, col)``,
    its residuals under ``encodings``; CodecError when a reference points
    outside its table or the encodings go round in a circle."""
    done: dict[tuple[str, str], np.ndarray] = {}
    busy: set[tuple[str, str]] = set()

    def value(table: str, col: str) -> np.ndarray:
        key = (table, col)
        if key in done:
            return done[key]
        if key in busy:
            raise CodecError(f"column {table}.{col}'s prediction depends on itself")
        busy.add(key)
        enc = encodings[key]
        r = stored(table, col)
        kind = enc[0]
        if kind == "raw":
            x = r
        elif kind == "delta":
            x = np.cumsum(r, dtype=np.int64)
        elif kind == "minus":
            x = r + value(table, enc[1])
        elif kind == "after" and encodings[table, enc[1]] == ("minus", col):
            # x[i] = r[i] + c[i-1] and c = x + m: x = cumsum(r + m[i-1])
            x = np.cumsum(r + _prev(stored(table, enc[1])), dtype=np.int64)
        elif kind == "after":
            x = r + _prev(value(table, enc[1]))
        else:
            ref = value(table, enc[1])
            target = value(enc[2], enc[3])
            if len(ref) and (ref.min() < -1 or ref.max() >= len(target)):
                raise CodecError(f"column {table}.{enc[1]} refers to rows outside "
                                 f"table {enc[2]!r} (0..{len(target) - 1})")
            x = r + _referenced(ref, target)
        busy.discard(key)
        done[key] = x
        return x

    out: dict[str, dict[str, np.ndarray]] = {}
    for table, schema in SCHEMA.items():
        out[table] = {col: value(table, col) for col, dtype in schema
                      if (table, col) in encodings}
    return out


def _sample(n: int) -> np.ndarray:
    starts = np.linspace(0, n - SAMPLE_CHUNK, 4).astype(np.int64)
    return (starts[:, None] + np.arange(SAMPLE_CHUNK)).reshape(-1)


def _at(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    return (a if idx is None else a[idx]).astype(np.int64, copy=False)


def _prev(a: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
    """The previous row's value (0 before the first row), int64."""
    if idx is None:
        p = np.empty(len(a), np.int64)
        if len(a):
            p[0] = 0
            p[1:] = a[:-1]
        return p
    p = a[np.maximum(idx - 1, 0)].astype(np.int64)
    p[idx == 0] = 0
    return p


def _referenced(ref: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``target[ref]`` as int64, 0 where ``ref`` is NONE (-1)."""
    if not len(ref) or ref.min() >= 0:
        return target[ref].astype(np.int64, copy=False)
    out = np.zeros(len(ref), np.int64)
    named = ref >= 0
    out[named] = target[ref[named]]
    return out
