"""Timeline tables as Apache Arrow tables (``Timeline.to_arrow``) and Polars
DataFrames (``Timeline.to_polars``), spelled as the Parquet files are.

Each table of ``SCHEMA`` becomes one ``pyarrow.Table`` with the table's
columns in order. String ids become dictionary-encoded strings and enum
codes their lower-case names (as ``to_pandas`` gives them); NONE becomes
null in those and in row references (``gpu.op``: the ``ops`` row, counted
from 0); other integer columns keep NONE as -1. The Parquet writer
(``parquet.py``) writes exactly these tables, so a query written against
one reads the other.

pyarrow (``pip install 'cutimeline[parquet]'``) and polars (``pip install
polars``) are imported here only, when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CutimelineError
from ..text import need_text
from .schema import ENUM_COLUMNS, NONE, REFERENCES, SCHEMA, STRING_COLUMNS

if TYPE_CHECKING:   # timeline.py imports this module
    from .timeline import Timeline

__all__ = ["pyarrow", "arrow_tables", "polars_frames"]


def pyarrow(what: str) -> Any:
    """The pyarrow module, or an error saying that ``what`` needs it."""
    try:
        import pyarrow as pa
    except ImportError:
        raise CutimelineError(f"{what} needs pyarrow: "
                              f"pip install 'cutimeline[parquet]'.") from None
    return pa


def _names(tl: Timeline, table: str | None, what: str) -> list[str]:
    if table is None:
        return list(SCHEMA)
    need_text(table, "the table's name", what)
    if table not in SCHEMA:
        raise CutimelineError(f"{what}({table!r}): there is no such table; the tables "
                              f"are {', '.join(SCHEMA)}.")
    return [table]


def arrow_tables(tl: Timeline, table: str | None = None,
                 what: str = "Timeline.to_arrow") -> dict[str, Any]:
    """``{name: pyarrow.Table}`` of every table (``table`` None) or of one."""
    pa = pyarrow(what)
    names = _names(tl, table, what)
    strings = pa.array(tl.strings, pa.string())
    return {name: pa.table({col: _column(pa, tl, name, col, strings)
                            for col, _ in SCHEMA[name]}) for name in names}


def polars_frames(tl: Timeline, table: str | None = None) -> dict[str, Any]:
    """``{name: polars.DataFrame}`` of every table or of one."""
    try:
        import polars as pl
    except ImportError:
        raise CutimelineError("Timeline.to_polars needs polars (and pyarrow): "
                              "pip install polars 'cutimeline[parquet]'.") from None
    return {name: pl.from_arrow(t) for name, t in
            arrow_tables(tl, table, "Timeline.to_polars").items()}


def _column(pa: Any, tl: Timeline, table: str, col: str, strings: Any) -> Any:
    a = tl.table(table)[col]
    if (table, col) in STRING_COLUMNS:
        return _dictionary(pa, a, strings)
    if (table, col) in ENUM_COLUMNS:
        codes = np.unique(a)
        names = {int(k): k.name.lower() for k in ENUM_COLUMNS[table, col]}
        labels = pa.array([names.get(int(c), str(int(c))) for c in codes], pa.string())
        return _dictionary(pa, np.searchsorted(codes, a), labels)
    if (table, col) in REFERENCES:
        return pa.array(a, mask=a == NONE)
    return pa.array(a)


def _dictionary(pa: Any, ids: np.ndarray, values: Any) -> Any:
    """Ids into ``values`` (NONE: null) as a dictionary array of just the
    values in use: a column refers to few of the strings, and each column
    chunk of a Parquet file stores its dictionary."""
    used = np.zeros(len(values) + 1, bool)
    used[ids + 1] = True   # slot 0: NONE
    keep = np.flatnonzero(used[1:])
    renumber = (np.cumsum(used) - 1 - used[0]).astype(np.int32)
    index = pa.array(renumber[ids + 1], mask=ids == NONE)
    return pa.DictionaryArray.from_arrays(index, values.take(pa.array(keep)))
