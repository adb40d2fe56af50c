"""Timeline → a folder of Parquet files, one a table, that query engines
(DuckDB, Polars, Spark, pandas) read without cutimeline.

The folder holds ``<table>.parquet`` for each table of ``SCHEMA`` (ops,
events, gpu, syncs, spans, clocks, truth, sources, memory, flops,
collectives), each with the table's columns in order and dtype, and
``meta.json`` (the Timeline's meta, row counts and how columns are
spelled), written last: a folder with meta.json is whole.

Columns are as in the Timeline, except that those a reader could not use
without it are decoded, as ``Timeline.to_arrow`` gives them (``arrow.py``):
string ids become dictionary-encoded strings and enum codes their
lower-case names (as ``to_pandas`` gives them), and NONE becomes null in
those and in row references (``gpu.op``: the ``ops`` row, counted from 0,
as DuckDB's ``file_row_number``). Other integer columns keep NONE as -1 (a
CPU op's ``device``, a ``launch_ns`` not measured).

pyarrow is imported only when a Timeline is written: ``pip install
'cutimeline[parquet]'``.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import CutimelineError
from . import destination
from .arrow import arrow_tables, pyarrow
from .schema import SCHEMA

if TYPE_CHECKING:   # timeline.py imports this module
    from .timeline import Timeline

__all__ = ["write", "FORMAT", "VERSION"]

FORMAT = "cutimeline-parquet"
VERSION = 1
# zstd: half the size of snappy (pyarrow's default) for these columns, in
# a fifth more time (benchmarks/RESULTS.md); DuckDB, Polars, Spark and
# pandas read it.
COMPRESSION = "zstd"


def write(tl: Timeline, folder: str | os.PathLike) -> None:
    """Write ``tl`` as ``folder``/<table>.parquet and ``folder``/meta.json,
    making the folder if need be; files of an earlier write are replaced."""
    pyarrow("Timeline.to_parquet")
    import pyarrow.parquet as pq   # pyarrow is there: arrow.pyarrow said so
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise CutimelineError(f"Cannot write Parquet to {folder}: it is a file; "
                              f"give a folder (made if missing).")
    try:
        head = json.dumps(_head(tl), allow_nan=False, indent=1)
    except (TypeError, ValueError) as exc:
        raise CutimelineError(f"The Timeline's meta cannot be written as JSON "
                              f"({exc}); keep meta to str, numbers, lists and "
                              f"dicts.") from None
    os.makedirs(folder, exist_ok=True)
    meta_path = os.path.join(folder, "meta.json")
    for path in [meta_path, *(os.path.join(folder, f"{n}.parquet") for n in SCHEMA)]:
        destination.check(path)  # all before any is touched
    if os.path.exists(meta_path):   # the folder is incomplete until the end
        os.unlink(meta_path)
    for name, table in arrow_tables(tl, what="Timeline.to_parquet").items():
        with destination.replacing(os.path.join(folder, f"{name}.parquet")) as f:
            pq.write_table(table, f, compression=COMPRESSION)
    with destination.replacing(meta_path) as f:
        f.write(head.encode("utf-8"))


def _head(tl: Timeline) -> dict[str, Any]:
    return {"format": FORMAT, "format_version": VERSION,
            "written_by": f"cutimeline {__version__}",
            "tables": {name: {"file": f"{name}.parquet", "rows": len(tl.table(name))}
                       for name in SCHEMA},
            "none": "null in string, enum and row-reference columns; -1 in the others",
            "meta": tl.meta}
