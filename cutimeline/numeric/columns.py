"""Column facts: what an analysis needs to know of a time column before
it reads it: its least and greatest value, whether it holds NONE, whether
it is sorted.

Several stages ask (the extent of the trace, whether launches come in
order, whether a column has unknown times); each asking read the column
again, three to five passes over it per analysis. ``column_facts``
reads a column once, in one Numba pass (a NumPy twin below ``engine``
"numba"), and the table remembers the answer (``Table.remember``), so the
next stage and the next analysis of the same Timeline get it for free.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..timeline.schema import NONE
from ..timeline.table import Table
from ..timeline.timeline import Timeline
from .engines import readonly

__all__ = ["Facts", "column_facts", "facts_of", "HOST_TIMES", "extent"]


class Facts(NamedTuple):
    """Of a non-empty column: min, max, whether a value is NONE, whether it
    is in non-decreasing order. Of an empty one: (0, 0, False, True)."""
    lo: int
    hi: int
    none: bool
    sorted: bool


@njit(cache=True)
def _facts_nb(x):
    """Blocks of 4096 read through two views indexed from 0 (``x[i - 1]``
    would need Numba's negative-index check, which keeps LLVM from
    vectorising), with no branch inside a block: min, max, NONE and order
    in the one pass."""
    n = len(x)
    lo = hi = x[0]
    none = x[0] == NONE
    bad = False
    for a in range(1, n, 4096):
        b = min(a + 4096, n)
        p, q = x[a - 1:b - 1], x[a:b]
        for i in range(len(q)):
            v = q[i]
            lo, hi = min(lo, v), max(hi, v)
            none |= v == NONE
            bad |= v < p[i]
    return lo, hi, none, not bad


def _facts_np(x) -> tuple:
    return (x.min(), x.max(), bool(np.any(x == NONE)), bool(np.all(x[1:] >= x[:-1])))


def facts_of(x, engine: str = "numba") -> Facts:
    """The ``Facts`` of an integer array (not remembered: for arrays a
    stage made). ``engine``: "numba" or "numpy" (equal results)."""
    if len(x) == 0:
        return Facts(0, 0, False, True)
    x = np.asarray(x)  # its own width: an int32 column is not copied
    lo, hi, none, ok = _facts_nb(readonly(x, x.dtype)) if engine == "numba" else _facts_np(x)
    return Facts(int(lo), int(hi), bool(none), bool(ok))


def column_facts(table: Table, col: str, engine: str = "numba") -> Facts:
    """The ``Facts`` of ``table[col]``, read once per table and column
    (either engine's answer serves both: they are equal)."""
    return table.remember(col, "facts", lambda x: facts_of(x, engine))


#: the host time columns of a Timeline (``Timeline.start_ns`` reads them,
#: and the gpu rows' when aligned)
HOST_TIMES = (("ops", "host_begin_ns"), ("ops", "host_end_ns"), ("spans", "begin_ns"),
              ("spans", "end_ns"), ("syncs", "host_begin_ns"), ("syncs", "host_end_ns"))


def extent(tl: Timeline, engine: str = "numba", ops: bool = True) -> tuple[int, int, bool]:
    """(``tl.start_ns``, ``tl.end_ns``, whether a gpu row's begin or end is
    NONE) from the columns' remembered facts: each read once per Timeline.
    ``ops=False`` leaves the ops' columns out (a replay that did not move
    them says where its ops lie itself)."""
    g = tl.gpu
    gpu = [column_facts(g, c, engine) for c in ("begin_ns", "end_ns")] if len(g) else []
    missing = any(f.none for f in gpu)
    cols = HOST_TIMES if ops else HOST_TIMES[2:]
    span = [column_facts(tl.table(t), c, engine) for t, c in cols if len(tl.table(t))]
    if tl.aligned:
        span += gpu
    if not span:
        return 0, 0, missing
    return int(min(f.lo for f in span)), int(max(f.hi for f in span)), missing
