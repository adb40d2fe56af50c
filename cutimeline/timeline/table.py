"""Columnar tables: ``Table`` (equal-length read-only numpy columns of one
table of ``SCHEMA``) and ``Strings`` (the string table being built while
recording)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import CutimelineError
from .schema import DEFAULTS, NONE, SCHEMA

__all__ = ["Table", "Strings"]


class Table:
    """Equal-length, read-only numpy columns; ``t["col"]`` or ``t.col``.

    ``table_name`` is the table's name in ``SCHEMA``; every other attribute
    that is not a method is a column (``tl.ops.name`` is the name column),
    so no attribute of a Table shares a column's name."""

    __slots__ = ("table_name", "_cols", "_len", "_memo")

    def __init__(self, name: str, columns: Mapping[str, Any] | None = None):
        if name not in SCHEMA:
            raise CutimelineError(f"There is no table {name!r}; the tables "
                                  f"are {', '.join(SCHEMA)}.")
        columns = dict(columns or {})
        unknown = set(columns) - {c for c, _ in SCHEMA[name]}
        if unknown:
            raise CutimelineError(
                f"Table {name!r} has no column {sorted(unknown)[0]!r}; its "
                f"columns are {', '.join(c for c, _ in SCHEMA[name])}.")
        lengths = {len(np.asarray(v).reshape(-1)) for v in columns.values()}
        if len(lengths) > 1:
            raise CutimelineError(f"The columns of table {name!r} differ in "
                                  f"length ({sorted(lengths)}).")
        n = lengths.pop() if lengths else 0
        cols = {}
        for col, dtype in SCHEMA[name]:
            if col in columns:
                arr = np.ascontiguousarray(columns[col]).reshape(-1)
                if arr.dtype != dtype:
                    arr = _cast(name, col, arr, dtype)
            else:
                arr = np.full(n, DEFAULTS.get((name, col), NONE), dtype) if dtype.kind == "i" \
                    else np.zeros(n, dtype)
            if arr.flags.writeable:
                arr = arr.view()
                arr.flags.writeable = False
            cols[col] = arr
        self.table_name, self._cols, self._len = name, cols, n
        self._memo: dict = {}

    def remember(self, col: str, what: str, compute: Callable[[np.ndarray], Any]) -> Any:
        """``compute(column)``, computed once per column and ``what``: the
        columns are read-only, so what is known of one (its extent, whether
        it is sorted) holds as long as the table; a later stage asks again
        for free (``numeric/columns.py``: the analysis read each time column
        three to five times only to learn that). The table that ``take`` or
        ``replace`` returns starts with nothing remembered."""
        key = (col, what)
        try:
            return self._memo[key]
        except KeyError:
            pass
        out = self._memo[key] = compute(self[col])
        return out

    def __getitem__(self, col: str) -> np.ndarray:
        try:
            return self._cols[col]
        except KeyError:
            raise CutimelineError(
                f"Table {self.table_name!r} has no column {col!r}; its columns "
                f"are {', '.join(self._cols)}.") from None

    def __getattr__(self, col: str) -> np.ndarray:
        if col.startswith("_"):
            raise AttributeError(col)
        return self[col]

    def __len__(self) -> int:
        return self._len

    @property
    def columns(self) -> dict[str, np.ndarray]:
        return dict(self._cols)

    def take(self, index: np.ndarray) -> Table:
        """The rows at ``index`` (integer indices or a boolean mask)."""
        return Table(self.table_name, {c: a[index] for c, a in self._cols.items()})

    def replace(self, **columns: Any) -> Table:
        """A copy with some columns replaced (same length required)."""
        return Table(self.table_name, {**self._cols, **columns})

    def __repr__(self) -> str:
        return f"<Table {self.table_name}: {self._len:,} rows × {len(self._cols)} columns>"


def _cast(table: str, col: str, arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if arr.size and dtype.kind in "iu" and arr.dtype.kind in "iub":
        info = np.iinfo(dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise CutimelineError(
                f"Column {table}.{col} holds values outside {dtype} "
                f"({arr.min()}..{arr.max()}), where each must lie within "
                f"{info.min}..{info.max} (its dtype in schema.SCHEMA).")
    elif arr.size and dtype.kind in "iu" and arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            unit = " (nanoseconds)" if col.endswith("_ns") else ""
            raise CutimelineError(f"Column {table}.{col} must hold integers{unit}, "
                                  f"not fractions or NaN.")
    elif arr.dtype.kind not in "iubf":
        raise CutimelineError(f"Column {table}.{col} must be numeric, "
                              f"not {arr.dtype}.")
    return arr.astype(dtype)


class Strings:
    """Interns strings to int32 ids while a Timeline is built."""

    __slots__ = ("ids", "values")

    def __init__(self, values: Iterable[str] = ()):
        self.values: list[str] = []
        self.ids: dict[str, int] = {}
        for v in values:
            self.intern(v)

    def intern(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.values)
            self.values.append(s)
        return i

    def intern_under(self, lock: Any, s: str) -> int:
        """``intern`` by several threads: a string seen before is read
        without ``lock``; a new one is added under it."""
        i = self.ids.get(s)
        if i is None:
            with lock:
                i = self.intern(s)
        return i

    def __len__(self) -> int:
        return len(self.values)
