"""What every stage after loading may assume of a Timeline, checked once at the door.

A Timeline from outside the process (a ``.ctl`` file, a torch.profiler
trace, the ranks handed to ``merge``) is checked here before any stage
sees it; alignment, analysis, plotting and export then trust it and
check nothing of their own. What holds:

* **references**: a column naming a row of another table
  (``schema.REFERENCES``) holds one of its rows or NONE; a string column
  (``schema.STRING_COLUMNS``) an id of the string table or NONE; enum
  columns (``schema.ENUM_COLUMNS``) codes of their enum, ``ops.flags``
  only ``OpFlag`` bits.
* **threads and devices**: thread ids index per-thread arrays (lanes,
  rank lookups), so they lie in ``[0, threads)``, a file having at most
  as many threads as it names (``meta["threads"]``) or has host rows;
  ``syncs.thread`` may be NONE. Devices are 0 or more where work runs
  (gpu, events, clocks), NONE or more where the CPU is allowed (ops,
  syncs, memory); streams NONE or more. A merged Timeline's
  ``meta["thread_rank"]``/``meta["device_rank"]`` name the rank of every
  thread and device id its tables use.
* **times**: every time column within ±``TIME_LIMIT_NS`` (a sum or
  difference of two stays inside int64), every interval ending at or
  after its begin, and all host-clock times within ``MAX_SPAN_NS`` of
  each other (pixel columns, bins and step windows are int64 offsets from
  the first time: times over centuries are damage, not a recording).
* **numbers**: counts and sizes not negative; floats finite.
* **collectives**: each row an op's (``op`` ≥ 0), its ``group`` one of
  ``meta["groups"]`` or NONE, its ``peer`` a rank below ``MAX_RANKS`` or
  NONE.
* **meta**: every key ``metakeys.KEYS`` declares holds what it declares
  (``META``); a rank lies below the world size. Undeclared keys are kept
  unchecked (a newer cutimeline's, or the user's), but ``metakeys.RETIRED``
  ones are refused (every Timeline made is held to that,
  ``check_retired``).

A violation raises ``CutimelineError`` naming the source (a file, or
"Timeline 2" of a list), the table, column and row, the value, and what
it should be.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import CutimelineError
from .metakeys import KEYS, RETIRED
from .schema import (ENUM_COLUMNS, MAX_RANKS, NONE, REFERENCES, SCHEMA, STRING_COLUMNS,
                     TIME_LIMIT_NS, OpFlag)

__all__ = ["TIME_LIMIT_NS", "MAX_SPAN_NS", "MAX_RANKS", "TIME_COLUMNS", "INTERVALS",
           "META", "check", "check_references", "check_meta", "check_retired",
           "warnings_of"]

#: all host-clock times of one Timeline lie within 2^50 ns (13 days) of
#: each other: the plot's pixel columns are (t − t0)·width in int64, exact
#: for 2^50 ns at any width below 8192 columns; no recording or profiler
#: trace runs that long (a step loop recorded for days is many files)
MAX_SPAN_NS = 2 ** 50

#: (table, column) → whether NONE (-1) is allowed there, for every time column
TIME_COLUMNS = {
    ("ops", "host_begin_ns"): False, ("ops", "host_end_ns"): False,
    ("events", "raw_ns"): False, ("events", "host_record_ns"): False,
    ("gpu", "launch_ns"): True, ("gpu", "begin_ns"): True, ("gpu", "end_ns"): True,
    ("syncs", "host_begin_ns"): False, ("syncs", "host_end_ns"): False,
    ("spans", "begin_ns"): False, ("spans", "end_ns"): False,
    ("clocks", "ref_raw_ns"): False, ("clocks", "offset_ns"): False,
    ("clocks", "ping_offset_ns"): True,
    ("truth", "host_ns"): False, ("memory", "host_ns"): False,
    ("collectives", "done_ns"): True}
#: (table, begin, end): intervals that must not end before they begin
INTERVALS = (("ops", "host_begin_ns", "host_end_ns"), ("gpu", "begin_ns", "end_ns"),
             ("syncs", "host_begin_ns", "host_end_ns"), ("spans", "begin_ns", "end_ns"))
#: host-clock times (gpu rows' only once aligned), which span MAX_SPAN_NS at most
_HOST_TIMES = (("ops", "host_begin_ns"), ("ops", "host_end_ns"), ("syncs", "host_begin_ns"),
               ("syncs", "host_end_ns"), ("spans", "begin_ns"), ("spans", "end_ns"),
               ("memory", "host_ns"), ("collectives", "done_ns"))
_GPU_TIMES = (("gpu", "launch_ns"), ("gpu", "begin_ns"), ("gpu", "end_ns"))
#: (table, column) → (lowest allowed value, what it is) for ids and counts
_LOWEST = {
    ("ops", "device"): (NONE, "a device index or -1 (the CPU)"),
    ("ops", "stream"): (NONE, "a stream id or -1"),
    ("ops", "depth"): (NONE, "a nesting depth or -1"),
    ("events", "device"): (0, "a device index"),
    ("events", "stream"): (NONE, "a stream id or -1"),
    ("gpu", "device"): (0, "a device index"),
    ("gpu", "stream"): (NONE, "a stream id or -1"),
    ("syncs", "device"): (NONE, "a device index or -1"),
    ("syncs", "stream"): (NONE, "a stream id or -1 (device-wide)"),
    ("spans", "depth"): (NONE, "a nesting depth or -1"),
    ("spans", "number"): (NONE, "a step number, a fetch's wait in ns, or -1"),
    ("clocks", "device"): (0, "a device index"),
    ("clocks", "n_lower"): (0, "a count"), ("clocks", "n_upper"): (0, "a count"),
    ("sources", "line"): (NONE, "a line number or -1"),
    ("memory", "device"): (NONE, "a device index or -1"),
    ("memory", "allocated"): (0, "a number of bytes"),
    ("memory", "freed"): (0, "a number of bytes"),
    ("memory", "in_use"): (0, "a number of bytes"),
    ("collectives", "op"): (0, "the row of its op in table 'ops' (a collective is an op)"),
    ("collectives", "number"): (NONE, "a count of its group's collectives or -1 (unknown)"),
    ("collectives", "peer"): (NONE, "a global rank or -1 (none or unknown)"),
}
#: (table, column) of threads: whether NONE is allowed
_THREADS = {("ops", "thread"): False, ("spans", "thread"): False, ("syncs", "thread"): True}


def check(tables: Mapping[str, Any], strings: Sequence[str], meta: Mapping[str, Any],
          source: str) -> None:
    """Every invariant of the module doc, for the tables (name → ``Table``),
    strings and meta of one Timeline from ``source`` (a file or a label,
    the start of each message)."""
    check_meta(meta, source)
    check_references(tables, len(strings), source)
    for (name, col), codes in [*ENUM_COLUMNS.items(), (("ops", "flags"), OpFlag)]:
        a = tables[name][col]
        known = [int(c) for c in codes]
        if codes is OpFlag:  # bits: any of them
            mask = int(np.bitwise_or.reduce(known))
            bad = np.flatnonzero((a | mask) != mask)
        else:
            bad = np.flatnonzero(~np.isin(a, known))
        if len(bad):
            i = int(bad[0])
            raise CutimelineError(
                f"{source}: column {name}.{col} holds codes it does not know (such as "
                f"{int(a[i])}) from row {i} on; it knows {_known(codes)}. If a newer "
                f"cutimeline wrote the file, upgrade cutimeline.")
    for (name, col), (lowest, what) in _LOWEST.items():
        _at_least(tables, name, col, lowest, what, source)
    _threads(tables, meta, source)
    _collectives(tables, meta, source)
    _times(tables, bool(meta.get("aligned", len(tables["gpu"]) == 0)), source)
    for name, cols in SCHEMA.items():
        for col, dtype in cols:
            a = tables[name][col]
            if dtype.kind == "f" and len(a) and not np.isfinite(a).all():
                i = int(np.flatnonzero(~np.isfinite(a))[0])
                raise CutimelineError(f"{source}: {name}.{col} of row {i} is {a[i]}, not a "
                                      f"finite number.")
    flops = tables["flops"]["flops"]
    if len(flops) and flops.min() < 0:
        _refuse(source, "flops", "flops", flops, flops < 0, "a number of operations ≥ 0")


def check_references(tables: Mapping[str, Any], n_strings: int, source: str | None = None
                     ) -> None:
    """String ids and row references in range (``Timeline()`` checks this
    much of every Timeline it makes; ``check`` all of the module doc)."""
    for (name, col), target in [*REFERENCES.items(),
                                *((key, "strings") for key in STRING_COLUMNS)]:
        a = tables[name][col]
        n = n_strings if target == "strings" else len(tables[target])
        if len(a) and (a.min() < NONE or a.max() >= n):
            i = int(np.flatnonzero((a < NONE) | (a >= n))[0])
            if target == "strings":
                what = (f"strings by ids the string table lacks (string ids outside "
                        f"0..{n - 1})")
            else:
                what = f"rows outside table {target!r} (0..{n - 1})"
            raise CutimelineError(
                f"{source or 'The Timeline'}: column {name}.{col} refers to {what}: row "
                f"{i} holds {int(a[i])}, where each must be one of them or -1.")


def check_meta(meta: Mapping[str, Any], source: str) -> None:
    """Every declared key of ``meta`` (``metakeys.KEYS``) holds what it
    declares; keys it does not declare are kept unchecked (a newer
    cutimeline's, or the user's), but retired ones are refused."""
    check_retired(meta, source)
    for key, value in meta.items():
        k = KEYS.get(key)
        if k is not None and value is not None and not k.fits(value):
            text = json.dumps(value, default=lambda v: type(v).__name__)
            if len(text) > 60:
                text = text[:57] + "..."
            raise CutimelineError(f"{source}: its meta[{key!r}] is {text}, not {k.what} "
                                  f"({k.meaning}; written by {k.writer}).")
    rank, world = meta.get("rank"), meta.get("world_size")
    if isinstance(rank, int) and isinstance(world, int) and rank >= world:
        raise CutimelineError(f"{source}: its meta names rank {rank} of a world of "
                              f"{world}; a rank lies below the world size.")


def check_retired(meta: Mapping[str, Any], source: str | None = None) -> None:
    """No key of ``metakeys.RETIRED`` (None is as absent): its data lives
    elsewhere now, and nothing would read it."""
    for key, where in RETIRED.items():
        if meta.get(key) is not None:
            raise CutimelineError(f"{source or 'The Timeline'}: its meta[{key!r}] is "
                                  f"where {where}.")


def warnings_of(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The sentences a Timeline carries about how it was read or made
    (``meta["import_warnings"]``, then ``meta["warnings"]``), see
    ``Timeline.warnings``."""
    out: list[str] = []
    for key in ("import_warnings", "warnings"):
        v = meta.get(key)
        if isinstance(v, list):
            out += [w for w in v if isinstance(w, str)]
    return tuple(out)


# -- the parts ---------------------------------------------------------------------

def _refuse(source: str | None, name: str, col: str, a: np.ndarray, bad: np.ndarray,
            what: str) -> None:
    i = int(np.flatnonzero(bad)[0])
    n = int(np.count_nonzero(bad))
    more = f" (and {n - 1:,} more row{'s' * (n > 2)})" if n > 1 else ""
    raise CutimelineError(f"{source or 'The Timeline'}: {name}.{col} of row {i} is "
                          f"{a[i]}{more}, where it must be {what}.")


def _at_least(tables: Mapping[str, Any], name: str, col: str, lowest: int, what: str,
              source: str) -> None:
    a = tables[name][col]
    if len(a) and a.min() < lowest:
        _refuse(source, name, col, a, a < lowest, what)


def _known(codes: Any) -> str:
    return ", ".join(f"{int(c)} {c.name.lower()}" for c in codes)


def _threads(tables: Mapping[str, Any], meta: Mapping[str, Any], source: str) -> None:
    """Thread ids in [0, threads): as many as the file names, or has host rows."""
    named = meta.get("threads")
    rows = sum(len(tables[name]) for name, _ in _THREADS)
    n = max(len(named) if isinstance(named, list) else 0, rows)
    lut = meta.get("thread_rank")
    if isinstance(lut, list):
        n = min(n, len(lut))
    for (name, col), none_ok in _THREADS.items():
        a = tables[name][col]
        lowest = NONE if none_ok else 0
        if len(a) and (a.min() < lowest or a.max() >= n):
            why = (f"a thread id from 0 to {n - 1}" + (" or -1" if none_ok else "") +
                   (" (meta['thread_rank'] names that many threads)"
                    if isinstance(lut, list) else " (ids count the host threads from 0, "
                    "and the file names or has rows for no more)"))
            _refuse(source, name, col, a, (a < lowest) | (a >= n), why)
    lut = meta.get("device_rank")
    if isinstance(lut, list):
        for name in ("ops", "gpu", "events", "syncs", "clocks", "memory"):
            a = tables[name]["device"]
            if len(a) and a.max() >= len(lut):
                _refuse(source, name, "device", a, a >= len(lut),
                        f"a device index below {len(lut)} (meta['device_rank'] names "
                        f"that many devices)")


def _collectives(tables: Mapping[str, Any], meta: Mapping[str, Any], source: str) -> None:
    """Groups of ``meta["groups"]``, peers below ``MAX_RANKS``."""
    c = tables["collectives"]
    if not len(c):
        return
    groups = meta.get("groups")
    n = len(groups) if isinstance(groups, list) else 0
    if c.group.min() < NONE or c.group.max() >= n:
        _refuse(source, "collectives", "group", c.group, (c.group < NONE) | (c.group >= n),
                f"an index into meta['groups'] (which names {n} process group"
                f"{'s' * (n != 1)}) or -1 (unknown)")
    if c.peer.max() >= MAX_RANKS:
        _refuse(source, "collectives", "peer", c.peer, c.peer >= MAX_RANKS,
                f"a global rank below {MAX_RANKS:,} or -1")


def _times(tables: Mapping[str, Any], aligned: bool, source: str) -> None:
    for (name, col), none_ok in TIME_COLUMNS.items():
        a = tables[name][col]
        if not len(a):
            continue
        far = (a < -TIME_LIMIT_NS) | (a > TIME_LIMIT_NS)
        if far.any():
            _refuse(source, name, col, a, far, "a time within ±2^62 ns (±146 years)")
    for name, b, e in INTERVALS:
        t = tables[name]
        if not len(t):
            continue
        begin, end = t[b], t[e]
        back = end < begin
        if name == "gpu":  # rows not yet aligned may lack a time (NONE)
            back &= (begin != NONE) & (end != NONE)
        if back.any():
            i = int(np.flatnonzero(back)[0])
            n = int(np.count_nonzero(back))
            raise CutimelineError(
                f"{source}: {name} row {i} ends before it begins ({e} {end[i]} < {b} "
                f"{begin[i]}" + (f"; {n - 1:,} more row{'s do' * (n > 2) or ' does'} too"
                                  if n > 1 else "") + ").")
    lo = hi = None
    where: list[tuple[int, str, int]] = []
    for name, col in _HOST_TIMES + (_GPU_TIMES if aligned else ()):
        a = tables[name][col]
        if TIME_COLUMNS[name, col]:  # NONE: no time
            a = a[a != NONE]
        if not len(a):
            continue
        i, j = int(np.argmin(a)), int(np.argmax(a))
        where += [(int(a[i]), f"{name}.{col}", i), (int(a[j]), f"{name}.{col}", j)]
    if where:
        (lo, at_lo, i), (hi, at_hi, j) = min(where), max(where)
        if hi - lo > MAX_SPAN_NS:
            raise CutimelineError(
                f"{source}: its times run over {(hi - lo) / 86400e9:,.0f} days, from "
                f"{at_lo} (row {i}, {lo} ns) to {at_hi} (row {j}, {hi} ns); a recording "
                f"spans at most {MAX_SPAN_NS / 86400e9:.0f} days (times in mixed units or "
                f"clocks?).")


# -- meta ----------------------------------------------------------------------------

#: every declared meta key (``metakeys.KEYS``): the checker of its value
#: when present (None is as absent) and what it must be
META: dict[str, tuple[Callable[[Any], bool], str]] = {
    k.name: (k.fits, k.what) for k in KEYS.values()}
