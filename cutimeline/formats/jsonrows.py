"""JSON text of many rows, formatted from numpy columns a chunk of rows at a
time, with no Python object per row.

A ``Rows`` is a template: a list of pieces, each a literal, an integer
column, a ns column written as exact µs, or a column of ids into a
``Fragments`` table of encoded text; any piece may be present only in the
rows of a mask. ``Rows.render(a, b)`` lays rows a..b out in a byte matrix
(one row of text per matrix row, each piece in columns as wide as its
widest value in the chunk: numbers right-aligned, fragments left-aligned)
with a mask of the bytes in use, and returns the masked bytes: the rows'
text, in order, as one uint8 array. ``Rows.ranges`` cuts the rows into
chunks whose matrix stays within a byte budget, however long a fragment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from json.encoder import encode_basestring_ascii

import numpy as np

__all__ = ["Fragments", "Rows", "escape"]

CHUNK_BYTES = 2 << 20   # matrix bytes per chunk: 2 MB timed fastest (1, 2, 4, 8 MB)
MATRIX_BYTES = 16 << 20   # a Fragments table up to this size is kept as a matrix
# The text of 0000..9999 and of .000 to .999, each as the uint32 whose
# bytes (in memory order) it is.
_QUADS = np.array([list(f"{i:04d}".encode()) for i in range(10_000)],
                  np.uint8).view(np.uint32).ravel()
_FRACS = np.array([list(f".{i:03d}".encode()) for i in range(1000)],
                  np.uint8).view(np.uint32).ravel()
# 10^1..10^18: a count of those ≤ v is v's digit count less one.
_POWERS = np.array([10**k for k in range(1, 19)], np.uint64)
_INT_WIDTH = 20   # "-" and 19 digits: any int64
_US_WIDTH = 21 + 4   # "-", 16 digits of whole µs, "." and three of ns


def escape(strings: Sequence[str]) -> list[str]:
    """Each string as a JSON string literal (quoted, escaped, ASCII: lone
    surrogates and control characters become \\u escapes)."""
    return list(map(encode_basestring_ascii, strings))


class Fragments:
    """A table of ASCII text fragments indexed by id. Id -1 reads the last
    entry, so a table whose last entry stands for "none" takes NONE ids
    as they are."""

    def __init__(self, texts: Sequence[str]):
        blob = "".join(texts).encode("ascii")
        self.lens = np.fromiter(map(len, texts), np.int64, len(texts))
        self.starts = np.cumsum(self.lens) - self.lens
        self.blob = np.frombuffer(blob, np.uint8)
        width = int(self.lens.max()) if len(texts) else 0
        self.matrix = None
        if len(texts) * width <= MATRIX_BYTES:   # a row gather per chunk
            self.matrix = np.zeros((len(texts), width), np.uint8)
            mask = np.arange(width) < self.lens[:, None]
            self.matrix[mask] = self.blob

    def __len__(self) -> int:
        return len(self.lens)


class Rows:
    """The template of ``n`` rows of text (see the module doc)."""

    def __init__(self, n: int):
        self.n = n
        self.pieces: list[tuple] = []
        self._local = threading.local()   # each thread's matrices (see _buffers)

    # -- the template ----------------------------------------------------------
    def text(self, s: str, where: np.ndarray | None = None) -> Rows:
        """A literal, in every row or in the rows of ``where``."""
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last[0] == "text" and last[2] is where:
            self.pieces[-1] = ("text", last[1] + s, where)   # one piece: fewer steps
        else:
            self.pieces.append(("text", s, where))
        return self

    def int(self, values: np.ndarray, where: np.ndarray | None = None) -> Rows:
        """Integers (any int64) in decimal."""
        self.pieces.append(("int", (_column(values, self.n), np.asarray(0, np.int64)), where))
        return self

    def us(self, ns: np.ndarray, where: np.ndarray | None = None, *,
           minus: np.ndarray | int = 0) -> Rows:
        """Integer ns less ``minus`` (a column or one int64) as exact µs:
        1234567 → "1234.567", 5000 → "5", -500 → "-0.500". The difference
        is exact for any two int64 (it may not fit one)."""
        minus = minus if np.ndim(minus) == 0 else _column(minus, self.n)
        self.pieces.append(("us", (_column(ns, self.n), np.asarray(minus, np.int64)), where))
        return self

    def pick(self, table: Fragments, ids: np.ndarray,
             where: np.ndarray | None = None) -> Rows:
        """The fragment of each row's id (-1 reads the table's last)."""
        ids = _column(ids, self.n)
        if len(ids) and (ids.min() < -1 or ids.max() >= len(table)):
            raise IndexError("a fragment id lies outside its table")   # a bug, not input
        self.pieces.append(("pick", (table, ids), where))
        return self

    # -- chunks ----------------------------------------------------------------
    def ranges(self, budget: int | None = None) -> Iterator[tuple[int, int]]:
        """Row ranges (a, b) covering all rows, in order, each of whose
        matrix holds at most ``budget`` bytes (default ``CHUNK_BYTES``) or
        is one row."""
        budget = CHUNK_BYTES if budget is None else budget
        # Blocks of rows as wide as the first rows' median are cut smaller
        # where they hold long fragments.
        step = max(1, budget // max(1, self._width(0, min(self.n, 256), np.median)))
        for a in range(0, self.n, step):
            yield from self._fit(a, min(self.n, a + step), budget)

    def _fit(self, a: int, b: int, budget: int) -> Iterator[tuple[int, int]]:
        # Halving keeps a chunk that holds one long fragment apart from
        # its neighbours, which stay in a few wide-enough chunks.
        if b - a <= 1 or (b - a) * self._width(a, b) <= budget:
            yield a, b
        else:
            mid = (a + b) // 2
            yield from self._fit(a, mid, budget)
            yield from self._fit(mid, b, budget)

    def _width(self, a: int, b: int, of: Callable = np.max) -> int:
        """An upper bound of the matrix width of rows a..b (with ``of`` a
        median: a typical width)."""
        w = 0
        for kind, data, _ in self.pieces:
            if kind == "text":
                w += len(data)
            elif kind == "int":
                w += _INT_WIDTH
            elif kind == "us":
                w += _US_WIDTH
            elif b > a:
                table, ids = data
                w += int(of(table.lens[ids[a:b]]))
        return w

    # -- text ------------------------------------------------------------------
    def render(self, a: int, b: int) -> np.ndarray:
        """The text of rows a..b, as uint8."""
        r = b - a
        numbers: dict = {}   # a column written twice is formatted once
        laid = [_lay(kind, data, where, a, b, numbers) for kind, data, where in self.pieces]
        out, used, full = self._buffers(tuple(w for _, _, w, _ in laid), r)
        c = 0
        for i, (kind, payload, w, where) in enumerate(laid):
            if w:
                block, keep = out[:r, c:c + w], used[:r, c:c + w]
                ragged = False   # whether the piece leaves bytes of its columns out
                if kind == "pick":
                    ragged = _put_fragments(block, keep, *payload)
                elif kind != "text":
                    ragged = _put_number(block, keep, payload)
                if where is not None:
                    if ragged:
                        np.logical_and(keep, where[:, None], out=keep)
                    else:
                        keep[...] = where[:, None]
                    ragged = True
                if ragged:
                    full[i] = False
                elif not full[i]:
                    used[:, c:c + w] = True
                    full[i] = True
            c += w
        return out[:r][used[:r]]

    def _buffers(self, widths: tuple[int, ...], r: int) -> tuple[np.ndarray, np.ndarray, list]:
        """The matrix and mask for ``r`` rows laid out in ``widths``, the
        literals in place, and whether each piece's mask is all set.
        Kept from chunk to chunk in each thread (chunks mostly share a
        layout): filling the literals and masks anew would cost about as
        much as the rest, and fresh pages are slow too."""
        cache = self._local.__dict__.setdefault("cache", {})
        hit = cache.get(widths)
        if hit is None or len(hit[0]) < r:
            out = np.empty((r, sum(widths)), np.uint8)
            used = np.ones((r, sum(widths)), bool)
            c = 0
            for (kind, data, _), w in zip(self.pieces, widths):
                if kind == "text":
                    out[:, c:c + w] = np.frombuffer(data.encode("ascii"), np.uint8)
                c += w
            if len(cache) >= 2:   # a new layout: memory stays two of them
                cache.clear()
            hit = cache[widths] = (out, used, [True] * len(widths))
        return hit


def _column(values: np.ndarray, n: int) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (n,):
        raise ValueError(f"a column of {values.shape} for {n} rows")   # a bug, not input
    return values


def _lay(kind: str, data: object, where: np.ndarray | None, a: int, b: int,
         numbers: dict) -> tuple:
    """(kind, what to write, width, mask or None) of a piece in rows a..b;
    ``numbers``: the chunk's numbers so far, by column."""
    if where is not None:
        where = where[a:b]
        if where.all():
            where = None
    if kind == "text":
        return kind, None, len(data), where
    if kind == "pick":
        table, ids = data
        ids = ids[a:b]
        lens = table.lens[ids]
        return kind, (table, ids, lens), int(lens.max()), where
    v, minus = data
    key = (kind, id(v), minus.item() if minus.ndim == 0 else id(minus))
    parts = numbers.get(key)
    if parts is None:
        parts = numbers[key] = _Number(v[a:b], minus if minus.ndim == 0 else minus[a:b],
                                       kind == "us")
    return kind, parts, parts.width, where


class _Number:
    """``v - minus`` (exact), or that many ns as µs: sign, magnitude
    (whole µs), ns left over, digit counts (None: all ``ndig``) and the
    widths of the text."""

    __slots__ = ("neg", "mag", "rem", "digits", "ndig", "whole", "frac", "width", "text")

    def __init__(self, v: np.ndarray, minus: np.ndarray, us: bool):
        v = v.astype(np.int64, copy=False)
        if minus.ndim == 0 and minus == 0:
            self.neg = v < 0
            mag = np.abs(v) if self.neg.any() else v
        else:
            minus = minus.astype(np.int64, copy=False)
            self.neg = v < minus
            # Modulo 2^64 the difference is exact: |v - minus| < 2^64.
            mag = v.view(np.uint64) - minus.view(np.uint64)
            if self.neg.any():
                mag = np.where(self.neg, np.uint64(0) - mag, mag)
        mag = mag.view(np.uint64)   # |least int64| is 2^63
        self.rem = None
        if us:
            whole = mag // np.uint64(1000)
            self.rem, mag = mag - whole * np.uint64(1000), whole
        self.mag = mag
        lo, hi = len(str(int(mag.min()))), len(str(int(mag.max())))
        self.digits = None
        self.ndig = self.whole = hi
        if lo != hi or self.neg.any():
            self.digits = np.searchsorted(_POWERS, mag, side="right") + 1
            self.whole = int((self.digits + self.neg).max())
        self.frac = 4 if us and self.rem.any() else 0   # ".ddd" where a value has ns
        self.width = self.whole + self.frac
        self.text = None   # the digits, once written

    def digits_text(self) -> np.ndarray:
        """The last ``ndig`` digits of each magnitude, as (rows, ndig) uint8."""
        if self.text is None:
            # Four digits a step, right to left, as whole words of a scratch
            # array (a gather of uint32 is several times faster than of pairs).
            words = -(-self.ndig // 4)
            scratch = np.empty((len(self.mag), words), np.uint32)
            x = self.mag
            for j in range(words - 1, -1, -1):
                q = x // np.uint64(10_000)
                scratch[:, j] = _QUADS[x - q * np.uint64(10_000)]
                x = q
            self.text = scratch.view(np.uint8)[:, 4 * words - self.ndig:]
        return self.text


def _put_number(block: np.ndarray, keep: np.ndarray, n: _Number) -> bool:
    """Digits right-aligned in ``block``, the sign before them and ".ddd"
    after them where a µs value has ns; whether some rows leave bytes out
    (then ``keep`` marks the text)."""
    whole = n.whole
    block[:, whole - n.ndig:whole] = n.digits_text()
    ragged = False
    if n.digits is not None:
        start = whole - n.digits - n.neg
        rows = np.flatnonzero(n.neg)
        block[rows, start[rows]] = ord("-")
        if start.max() > 0:
            np.greater_equal(np.arange(whole), start[:, None], out=keep[:, :whole])
            ragged = True
    if n.frac:
        block[:, whole:] = _FRACS[n.rem].view(np.uint8).reshape(-1, 4)
        if not n.rem.all():
            keep[:, whole:] = (n.rem != 0)[:, None]
            if not ragged:
                keep[:, :whole] = True
            ragged = True
        elif ragged:
            keep[:, whole:] = True
    return ragged


def _put_fragments(block: np.ndarray, keep: np.ndarray, table: Fragments,
                   ids: np.ndarray, lens: np.ndarray) -> bool:
    """Each row's fragment left-aligned in ``block``; whether some are
    shorter than the block (then ``keep`` marks the text)."""
    w = block.shape[1]
    m = table.matrix
    if m is not None:
        # A row gather of just the columns in use (take copies a strided
        # matrix first: worth it only for a table no longer than the chunk).
        if w == m.shape[1] or len(m) <= len(ids):
            block[...] = np.take(m[:, :w], ids, axis=0)
        else:
            block[...] = m[ids, :w]
    else:
        # A large table: gather just the bytes in use, fragment by fragment.
        total = int(lens.sum())
        ends = np.cumsum(lens)
        within = np.arange(total) - np.repeat(ends - lens, lens)
        src = np.repeat(table.starts[ids], lens) + within
        block[np.repeat(np.arange(len(ids)), lens), within] = table.blob[src]
    if lens.min() == w:
        return False
    np.less(np.arange(w), lens[:, None], out=keep)
    return True
