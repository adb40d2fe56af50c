"""The Timeline: the tables of one recording, its string table and meta.

Every stage after recording is a function of a Timeline. A Timeline is
immutable: its columns are read-only numpy arrays, and stages that add
information (alignment, slicing) return a new Timeline that shares the
untouched columns. The tables and their columns are fixed by
``schema.SCHEMA``; the file format is ``fileformat``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import CutimelineError
from ..text import need_int, need_path, need_text, what
from . import arrow, invariants, parquet
from .ctlfile import fileformat
from .schema import ENUM_COLUMNS, NONE, REFERENCES, SCHEMA, STRING_COLUMNS, SpanKind
from .table import Strings, Table
from .windows import parse_window

__all__ = ["Timeline", "load", "as_timeline"]


class Timeline:
    """One recording: the tables of ``SCHEMA``, a string table and meta."""

    #: Its picture in a notebook (PNG bytes, or None for the text repr),
    #: set from above: the store draws nothing. ``cutimeline.rendering``
    #: sets ``notebook.timeline_png`` when it loads; ``import cutimeline``
    #: a stand-in that loads rendering on the first picture asked for.
    notebook_png: ClassVar[Callable[[Timeline], bytes | None] | None] = None

    def __init__(self, tables: Mapping[str, Table | Mapping[str, Any]] | None = None,
                 strings: Iterable[str] | Strings = (), meta: Mapping[str, Any] | None = None):
        if tables is not None and not isinstance(tables, Mapping):
            raise CutimelineError(f"Timeline wants tables as a dict of table name → Table "
                                  f"or columns; got {what(tables)}.")
        if meta is not None and not isinstance(meta, Mapping):
            raise CutimelineError(f"Timeline wants meta as a dict; got {what(meta)}.")
        if isinstance(strings, (str, bytes)) or not isinstance(strings, (Iterable, Strings)):
            raise CutimelineError(f"Timeline wants strings as a list of str; got "
                                  f"{what(strings)}.")
        tables = dict(tables or {})
        unknown = set(tables) - set(SCHEMA)
        if unknown:
            raise CutimelineError(f"There is no table {sorted(unknown)[0]!r}; "
                                  f"the tables are {', '.join(SCHEMA)}.")
        self._tables = {}
        for name in SCHEMA:
            t = tables.get(name)
            self._tables[name] = t if isinstance(t, Table) else Table(name, t)
        values = strings.values if isinstance(strings, Strings) else strings
        self.strings: tuple[str, ...] = tuple(values)
        if not all(type(v) is str for v in self.strings):
            bad = next(v for v in self.strings if type(v) is not str)
            raise CutimelineError(f"Timeline wants strings as a list of str; one is "
                                  f"{what(bad)}.")
        self.meta: dict[str, Any] = dict(meta or {})
        self._check()

    # -- access ------------------------------------------------------------
    ops = property(lambda self: self._tables["ops"])
    events = property(lambda self: self._tables["events"])
    gpu = property(lambda self: self._tables["gpu"])
    syncs = property(lambda self: self._tables["syncs"])
    spans = property(lambda self: self._tables["spans"])
    clocks = property(lambda self: self._tables["clocks"])
    truth = property(lambda self: self._tables["truth"])
    sources = property(lambda self: self._tables["sources"])
    memory = property(lambda self: self._tables["memory"])
    flops = property(lambda self: self._tables["flops"])
    collectives = property(lambda self: self._tables["collectives"])

    def table(self, name: str) -> Table:
        need_text(name, "the table's name", "Timeline.table")
        if name not in self._tables:
            raise CutimelineError(f"There is no table {name!r}; the tables "
                                  f"are {', '.join(SCHEMA)}.")
        return self._tables[name]

    def string(self, i: int) -> str:
        """The string with id ``i`` ("" for NONE)."""
        i = need_int(i, "a string id", "Timeline.string", lo=NONE)
        if i >= len(self.strings):
            raise CutimelineError(f"The Timeline has {len(self.strings)} strings; there "
                                  f"is no string {i}.")
        return "" if i == NONE else self.strings[i]

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """String ids → an object array of str ("" for NONE)."""
        lut = np.array(list(self.strings) + [""], dtype=object)
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu" or (ids.size and (ids.min() < NONE
                                                         or ids.max() >= len(self.strings))):
            raise CutimelineError(f"Timeline.decode wants string ids (integers from -1 to "
                                  f"{len(self.strings) - 1}); got {what(ids)} of "
                                  f"{ids.dtype}" + (f" from {ids.min()} to {ids.max()}"
                                                    if ids.dtype.kind in "iu" else "") + ".")
        return lut[np.where(ids == NONE, len(self.strings), ids)]

    def string_id(self, s: str) -> int:
        """The id of ``s``, or NONE if the Timeline has no such string."""
        try:
            return self.strings.index(s)
        except ValueError:
            return NONE

    def replace(self, *, meta: Mapping[str, Any] | None = None, **tables: Any) -> Timeline:
        """A new Timeline with some tables (and optionally meta) replaced."""
        merged = {**self._tables, **tables}
        return Timeline(merged, self.strings, self.meta if meta is None else meta)

    @property
    def start_ns(self) -> int:
        """Earliest host-clock time in the Timeline (0 if empty)."""
        lo = [a.min() for a in self._times() if len(a)]
        return int(min(lo)) if lo else 0

    @property
    def end_ns(self) -> int:
        hi = [a.max() for a in self._times() if len(a)]
        return int(max(hi)) if hi else 0

    def _times(self) -> list[np.ndarray]:
        o, g, s, y = self.ops, self.gpu, self.spans, self.syncs
        times = [o.host_begin_ns, o.host_end_ns, s.begin_ns, s.end_ns,
                 y.host_begin_ns, y.host_end_ns]
        if self.aligned:
            times += [g.begin_ns, g.end_ns]
        return times

    @property
    def aligned(self) -> bool:
        """True when gpu.begin_ns/end_ns hold host-clock times."""
        return bool(self.meta.get("aligned", len(self.gpu) == 0))

    @property
    def truncated(self) -> bool:
        return bool(self.meta.get("truncated", False))

    # -- steps and windows ---------------------------------------------------
    def step_numbers(self) -> np.ndarray:
        """Step numbers in time order."""
        s = self.spans
        step = s.kind == SpanKind.STEP
        order = np.argsort(s.begin_ns[step], kind="stable")
        return s.number[step][order]

    def step_bounds(self, first: int, last: int | None = None) -> tuple[int, int]:
        """Host-clock (begin_ns, end_ns) of steps first..last (inclusive)."""
        first = need_int(first, "first (a step number)", "step_bounds")
        last = first if last is None else need_int(last, "last (a step number)",
                                                   "step_bounds")
        s = self.spans
        step = (s.kind == SpanKind.STEP) & (s.number >= first) & (s.number <= last)
        if not step.any():
            have = self.step_numbers()
            have_s = (f"steps {have.min()}–{have.max()}" if len(have)
                      else "no steps")
            raise CutimelineError(
                f"The Timeline has no step {first}" +
                (f"–{last}" if last != first else "") + f"; it has {have_s}.")
        return int(s.begin_ns[step].min()), int(s.end_ns[step].max())

    def window_bounds(self, window: Any) -> tuple[int, int]:
        """Host-clock (begin_ns, end_ns) of a window in any spelling of
        ``windows.parse_window``: a step, a step range, or seconds from the
        start (``3``, ``"3-5"``, ``(3, 5)``, ``(0.5, 0.75)``, ``"0.5s-0.75s"``)."""
        w = parse_window(window)
        if isinstance(w, int):
            return self.step_bounds(w)
        a, b = w
        if isinstance(a, int):
            return self.step_bounds(a, b)
        t0, t1 = self.start_ns, self.end_ns
        w0, w1 = t0 + int(round(min(a, 1e9) * 1e9)), t0 + int(round(min(b, 1e9) * 1e9))
        if not self._active(w0, w1):
            span = f"{(t1 - t0) / 1e9:.6g} s"
            where = "past its end" if w0 >= t1 else "where it holds no ops, gpu rows, " \
                "syncs or spans"
            raise CutimelineError(
                f"Window {a:g}–{b:g} s lies outside the Timeline's work and selects "
                f"nothing: the Timeline spans 0–{span} from its start, and the window "
                f"lies {where}; choose seconds within 0–{span}, or steps.")
        return w0, w1

    def _active(self, w0: int, w1: int) -> bool:
        """Whether some row of ops, gpu (aligned), syncs or spans overlaps [w0, w1)."""
        o, y, s = self.ops, self.syncs, self.spans
        pairs = [(o.host_begin_ns, o.host_end_ns), (y.host_begin_ns, y.host_end_ns),
                 (s.begin_ns, s.end_ns)]
        if self.aligned:
            pairs.append((self.gpu.begin_ns, self.gpu.end_ns))
        return any(bool(((b < w1) & (e >= w0)).any()) for b, e in pairs if len(b))

    def slice_time(self, begin_ns: int, end_ns: int) -> Timeline:
        """The rows that overlap [begin_ns, end_ns) on the host clock;
        references between tables are renumbered; clocks are kept."""
        begin_ns = need_int(begin_ns, "begin_ns (host-clock ns)", "slice_time")
        end_ns = need_int(end_ns, "end_ns (host-clock ns)", "slice_time")
        if end_ns <= begin_ns:
            raise CutimelineError(f"The window's end ({end_ns} ns) must lie "
                                  f"after its begin ({begin_ns} ns).")
        o, g, y, s = self.ops, self.gpu, self.syncs, self.spans

        def overlaps(b: np.ndarray, e: np.ndarray) -> np.ndarray:
            return (b < end_ns) & (e >= begin_ns)

        keep_ops = overlaps(o.host_begin_ns, o.host_end_ns)
        if self.aligned:
            keep_gpu = overlaps(g.begin_ns, g.end_ns)
        else:
            keep_gpu = (g.op >= 0) & keep_ops[np.maximum(g.op, 0)]
        keep_syncs = overlaps(y.host_begin_ns, y.host_end_ns)
        ev = self.events
        keep_ev = np.zeros(len(ev), bool)
        ref = ev.op >= 0
        keep_ev[ref] = keep_ops[ev.op[ref]]
        keep_ev[~ref] = overlaps(ev.host_record_ns[~ref], ev.host_record_ns[~ref])
        for col in ("begin_event", "end_event"):
            r = g[col][keep_gpu]
            keep_ev[r[r >= 0]] = True
        r = y.last_event[keep_syncs]
        keep_ev[r[r >= 0]] = True
        keep_truth = keep_ev[self.truth.event] if len(self.truth) else \
            np.zeros(0, bool)
        m = self.memory
        keep = {"ops": keep_ops, "gpu": keep_gpu, "syncs": keep_syncs,
                "spans": overlaps(s.begin_ns, s.end_ns), "events": keep_ev,
                "truth": keep_truth,
                # memory read without an op: by its time
                "memory": np.where(m.op >= 0, keep_ops[np.maximum(m.op, 0)],
                                   overlaps(m.host_ns, m.host_ns)) if len(m)
                else np.zeros(0, bool)}
        meta = dict(self.meta, window=[int(begin_ns), int(end_ns)])
        return self._take(keep, meta)

    def slice_steps(self, first: int, last: int | None = None) -> Timeline:
        return self.slice_time(*self.step_bounds(first, last))

    def keep_rows(self, **keep: np.ndarray) -> Timeline:
        """The rows each bool mask selects (``spans=mask``: one per row of
        that table), references between tables renumbered: a row of another
        table that refers to a dropped row goes too (a span's source, a
        sync's op), one that refers to none (NONE) stays."""
        for name, mask in keep.items():
            if name not in self._tables:
                raise CutimelineError(f"keep_rows({name}=...): no table {name!r}; the "
                                      f"tables are {', '.join(self._tables)}.")
            mask = keep[name] = np.asarray(mask)
            if mask.dtype != bool or mask.shape != (len(self._tables[name]),):
                raise CutimelineError(
                    f"keep_rows({name}=...) takes one bool per row of {name!r} "
                    f"({len(self._tables[name])}), not an array of {mask.dtype} "
                    f"{mask.shape}.")
        return self._take(keep, self.meta)

    def _take(self, keep: Mapping[str, np.ndarray], meta: dict) -> Timeline:
        """The rows ``keep`` selects, references renumbered. A table ``keep``
        does not name keeps the rows whose references all survive (NONE
        stays NONE) when it refers to a table ``keep`` names, else all."""
        keep = dict(keep)
        for name, table in self._tables.items():
            refs = [(col, keep[target]) for (tn, col), target in REFERENCES.items()
                    if tn == name and target in keep]
            if name in keep or not refs:
                continue
            mask = np.ones(len(table), bool)
            for col, target in refs:
                r = table[col]
                mask &= (r < 0) | np.append(target, False)[np.where(r >= 0, r, -1)]
            keep[name] = mask
        remap = {}
        for name, mask in keep.items():
            m = np.full(len(mask) + 1, NONE, np.int64)  # slot -1 maps NONE
            m[:-1][mask] = np.arange(int(mask.sum()))
            remap[name] = m
        tables = {}
        for name, table in self._tables.items():
            t = table.take(keep[name]) if name in keep else table
            fixed = {}
            for (tn, col), target in REFERENCES.items():
                if tn == name and target in remap:
                    fixed[col] = remap[target][t[col]]
            tables[name] = t.replace(**fixed) if fixed else t
        return Timeline(tables, self.strings, meta)

    # -- export ----------------------------------------------------------------
    def to_pandas(self, table: str):
        """One table as a pandas DataFrame, string ids and kinds decoded."""
        try:
            import pandas as pd
        except ImportError:
            raise CutimelineError("Timeline.to_pandas needs pandas: "
                                  "pip install pandas.") from None
        t = self.table(table)
        data = {}
        for col, arr in t.columns.items():
            if (table, col) in STRING_COLUMNS:
                data[col] = self.decode(arr)
            elif (table, col) in ENUM_COLUMNS:
                names = {int(k): k.name.lower() for k in ENUM_COLUMNS[table, col]}
                data[col] = np.array([names.get(int(v), str(v)) for v in arr],
                                     dtype=object)
            else:
                data[col] = arr
        return pd.DataFrame(data)

    def to_arrow(self, table: str | None = None):
        """The tables as ``pyarrow.Table``: a dict {name: table} of every
        table of ``SCHEMA``, or the one named ``table``. Strings and enum
        codes decoded, NONE as null where it means "none" (``arrow.py``:
        the columns the Parquet files hold); needs pyarrow."""
        tables = arrow.arrow_tables(self, table)
        return tables if table is None else tables[table]

    def to_polars(self, table: str | None = None):
        """The tables as ``polars.DataFrame``, spelled as ``to_arrow``'s: a
        dict {name: frame} of every table, or the one named ``table``;
        needs polars and pyarrow."""
        frames = arrow.polars_frames(self, table)
        return frames if table is None else frames[table]

    def save(self, path: str | os.PathLike) -> None:
        """Write the Timeline to a ``.ctl`` file (``fileformat``; no pickle)."""
        fileformat.save(self, need_path(path, "path", "Timeline.save"))

    def to_parquet(self, folder: str | os.PathLike) -> None:
        """Write each table as ``folder``/<table>.parquet, strings decoded,
        with meta.json (``parquet``; needs pyarrow)."""
        parquet.write(self, need_path(folder, "folder", "Timeline.to_parquet"))

    def __repr__(self) -> str:
        o, g = self.ops, self.gpu
        streams = len(set(zip(g.device.tolist(), g.stream.tolist())))
        steps = int((self.spans.kind == SpanKind.STEP).sum())
        dur = (self.end_ns - self.start_ns) / 1e9
        parts = [f"source={self.meta.get('source', '?')}",
                 f"{len(o):,} ops", f"{len(g):,} gpu rows on {streams} "
                 f"stream{'s' * (streams != 1)}", f"{steps} steps",
                 f"{dur:.3f} s"]
        if len(self.clocks):
            parts.append(f"aligned ±{self.clocks.bound_max_ns.max() / 1e3:.2g} µs")
        elif len(g) and not self.aligned:
            parts.append("not aligned")
        if self.truncated:
            parts.append("TRUNCATED")
        if self.meta.get("simulated"):
            parts.append("SIMULATED")
        return f"Timeline({', '.join(parts)})"

    # -- integrity -------------------------------------------------------------
    def _check(self) -> None:
        """References in range and no retired meta key: what every Timeline
        made here must hold (a Timeline read from outside is checked for
        all of ``invariants``)."""
        invariants.check_references(self._tables, len(self.strings))
        invariants.check_retired(self.meta)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Sentences on how the Timeline was read or made that a reader of
        its results should know (an import's "30 of 40 kernel events have
        no numeric 'ts'; they are left out."): kept in its meta
        (``meta["import_warnings"]``, ``meta["warnings"]``), saved and
        loaded with it; empty when there is nothing to say."""
        return invariants.warnings_of(self.meta)

    def _repr_png_(self) -> bytes | None:
        """Jupyter: ``Timeline.notebook_png(self)``, the figure as PNG; None
        (the notebook shows the text repr) while nothing has set it."""
        draw = Timeline.notebook_png
        return None if draw is None else draw(self)


def as_timeline(value: Any, who: str) -> Timeline:
    """``value`` when it is a Timeline; for what is often passed instead,
    an error that says what to pass ("export_chrome needs a Timeline (...);
    got a Report: pass report.source")."""
    if isinstance(value, Timeline):
        return value
    name = type(value).__name__
    hint = {"Report": "pass report.source (the Timeline it analysed)",
            "Recorder": "pass rec.timeline, after the with-block",
            "ScheduledRecorder": "pass rec.timeline or one of rec.timelines_ready",
            "Comparison": "pass comparison.ours or comparison.theirs"}.get(name)
    if isinstance(value, (str, os.PathLike)):
        hint = "load it first with ctl.load(path)"
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Timeline)
                                                             for v in value):
        hint = "give one, or merge ranks first with ctl.merge(timelines)"
    raise CutimelineError(f"{who} needs a Timeline (from ctl.record or ctl.load); got "
                          f"{what(value)}" + (f": {hint}." if hint else "."))


def load(path: str | os.PathLike, *, max_bytes: int | None = None) -> Timeline:
    """Read a Timeline written by ``Timeline.save``, checked against
    ``invariants`` (a damaged file raises CutimelineError naming the file,
    table, column and row). A file that claims more rows than would fit
    in ``max_bytes`` of memory is refused before it is decoded
    (``budgets.max_bytes``: by default ``$CUTIMELINE_MAX_BYTES``, else 4 GiB
    or half this machine's memory)."""
    path = os.fspath(path)
    tables, strings, meta = fileformat.read(path, max_bytes)
    invariants.check(tables, strings, meta, f"{path} is damaged")
    return Timeline(tables, strings, meta)
