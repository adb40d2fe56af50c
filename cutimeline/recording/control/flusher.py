"""A rank's journal, kept while it records: what a SIGKILL cannot take.

With ``record(out_dir=...)`` the rank's file ``rank-<r>.ctl`` exists from
``start()`` on, as a journal (``timeline/ctlfile/journal.py``): a
background thread wakes every ``PERIOD_S`` and appends, as one chunk,
the host rows, strings and threads new since. ``stop()`` appends the
last rows and an "end" chunk, then writes the finished Timeline over the
journal (``lifecycle.py``). A process that dies without a word leaves
the journal, which ``ctl.load`` reads up to its last whole chunk, marked
partial. What a kill can take: the rows of the last ``PERIOD_S`` plus
one flush (measured figures: ``benchmarks/RESULTS.md``). It survives the
death of the process, not of the machine (no fsync).

Cost to the recorded program: nothing on the op path (the writers' lists
are read, never locked or copied). The thread holds the GIL while it
turns Python tuples (spans, launches, signatures, and ops the recorded
threads have not converted yet: ``opstream.OpRows``) into columns, so
it converts at most ``SLICE`` rows
at a time and then lets the GIL go (``time.sleep(0)``): a recorded
thread waits for one slice at most. Compression and writing let the GIL
go by themselves.

The thread is started with ``_thread`` rather than ``threading``: a
recording with ``threads=True`` records every ``threading.Thread``
started while it runs, and this one is the recorder's own.
"""

from __future__ import annotations

import _thread
import itertools
import threading
import time
import warnings
from time import perf_counter_ns as _now
from typing import Any

import numpy as np

from ...timeline.ctlfile.journal import Journal
from ...timeline.schema import NONE, OpFlag
from ..assembly import ops_columns
from ..opstream import as_rows

__all__ = ["Flusher", "PERIOD_S", "SLICE", "CHUNK_ROWS"]

PERIOD_S = 0.25  # between flushes: the most a kill takes, plus one flush
SLICE = 2048  # rows converted while holding the GIL
CHUNK_ROWS = 1 << 17  # rows of one table in one chunk at most
CLOSE_WAIT_S = 10.0  # at stop, for a flush under way (a stalled disk: give up on it)
_ON_DEVICE = int(OpFlag.LAUNCH | OpFlag.CAPTURED)


class Flusher:
    """Appends a session's new rows to its journal every ``PERIOD_S``
    (``start``); ``close`` at stop, ``abandon`` when the process is ending."""

    def __init__(self, session: Any, index: int, journal: Journal):
        self.s, self.index, self.journal = session, index, journal
        # per writer (by thread index): op chunks (opstream.OpRows), spans, launches written
        self.taken: dict[int, list[int]] = {}
        self.sig = np.zeros((0, 3), np.int64)  # the session's sig_table, converted so far
        self.ctx = np.zeros((0, 2), np.int64)  # and its ctx_table
        self.launch_seq = np.zeros(0, np.int64)  # launches whose op is not yet written
        self.launch_stream = np.zeros(0, np.int64)
        self.threads = 0  # thread names written
        self.error: BaseException | None = None
        self.written = 0  # bytes
        self._stop = threading.Event()
        self._done = threading.Event()

    def start(self) -> "Flusher":
        _thread.start_new_thread(self._run, ())
        return self

    def _run(self) -> None:
        try:
            while not self._stop.wait(PERIOD_S):
                # the rows the recorded threads have not converted yet
                # (they do every opstream.CHUNK ops), in GIL-sized pieces
                self.s.rows.convert(1, SLICE, self._stop)
                while self._chunk(self._stop):
                    pass
        except BaseException as exc:  # a full disk, say: the recording goes on
            self.error = exc
            warnings.warn(f"cutimeline stopped writing {self.journal.path} while "
                          f"recording ({type(exc).__name__}: {exc}); the file is written "
                          f"at stop as usual, but a kill before that leaves only what "
                          f"was written so far.", RuntimeWarning, 2)
        finally:
            self._done.set()

    def abandon(self) -> None:
        """The process ends next (SIGTERM, exit): stop without waiting; a
        flush under way gives up at its next slice."""
        self._stop.set()

    def close(self, stopped: bool) -> None:
        """Stop the thread (waiting for it); when the recording ``stopped``
        normally, append its last rows and the end chunk. Never raises;
        a second call does nothing."""
        self._stop.set()
        if not self._done.wait(CLOSE_WAIT_S):  # still writing: leave it the file
            self.error = self.error or TimeoutError("a flush did not end")
            return
        if self.journal.closed:
            return
        try:
            if stopped and self.error is None:
                self.s.rows.drain()  # the rows not yet converted
                while self._chunk(None):
                    pass
                self.journal.end({"step": self.s.step_number, "host_ns": _now()})
        except Exception as exc:
            self.error = exc
        finally:
            self.journal.close()

    # -- one chunk -----------------------------------------------------------------
    def _chunk(self, stop: threading.Event | None) -> bool:
        """Append the rows recorded since the last chunk, at most
        ``CHUNK_ROWS`` a table and writer; True when rows are left for
        another. ``stop``: give up (nothing written) once it is set."""
        s = self.s
        writers = list(s.writers)
        new = []  # (writer, its op chunks, spans since the last chunk)
        more = False  # rows left for another chunk
        for w in writers:  # each list's items are appended whole and read whole
            c, p, _ = self.taken.setdefault(w.thread, [0, 0, 0])
            # ops: the chunks OpRows converted (it alone reads Writer.ops)
            chunks, rows = [], 0
            for x in w.chunks[c:]:
                if chunks and rows + len(x) > CHUNK_ROWS:
                    more = True
                    break
                chunks.append(x)
                rows += len(x)
            spans = w.spans[p:p + CHUNK_ROWS]
            more = more or len(spans) == CHUNK_ROWS
            new.append((w, chunks, spans))
        # after the rows: every launch, signature, context and string they
        # name was made before them
        launches = [w.launches[self.taken[w.thread][2]:] for w in writers]
        sig_rows, ctx_rows = s.sig_table[len(self.sig):], s.ctx_table[len(self.ctx):]
        strings = s.strings.values[self.journal.strings:]
        names = [w.name for w in writers[self.threads:]]
        if not any(o or p for _, o, p in new) and not strings and not names:
            return False
        convert = _Converter(stop)  # nothing is kept until all is converted
        sig = np.concatenate([self.sig, convert(sig_rows, 3)])
        ctx = np.concatenate([self.ctx, convert(ctx_rows, 2)])
        launched = [convert(x, 5) for x in launches if x]
        with_ops = [(w, as_rows(o)) for w, o, _ in new if o]
        spans = [convert(p, 7) for _, _, p in new if p]
        if convert.stopped:
            return False
        self.sig, self.ctx = sig, ctx
        if launched:  # they wait for their ops, which may come in a later chunk
            a = np.concatenate(launched)
            self.launch_seq = np.concatenate([self.launch_seq, a[:, 0]])
            self.launch_stream = np.concatenate([self.launch_stream, a[:, 1]])
        tables: dict[str, Any] = {}
        if with_ops:
            o = np.concatenate([o for _, o in with_ops])
            thread = np.repeat(np.array([w.thread for w, _ in with_ops], np.int32),
                               [len(o) for _, o in with_ops])
            tables["ops"] = ops_columns(o, thread, sig, ctx, self.index, self._streams(o))
        if spans:
            tables["spans"] = dict(zip(("kind", "name", "thread", "depth", "number",
                                        "begin_ns", "end_ns"), np.concatenate(spans).T))
        self.written += self.journal.append(tables, strings, {
            "step": s.step_number, "host_ns": _now(), "truncated": s.cut_ns is not None,
            "threads_from": self.threads, "threads": names})
        self.threads += len(names)
        for (w, o, p), x in zip(new, launches):
            taken = self.taken[w.thread]
            taken[0] += len(o)
            taken[1] += len(p)
            taken[2] += len(x)
        return more

    def _streams(self, o: np.ndarray) -> np.ndarray:
        """The stream of each op's launch (NONE: it launched nothing), from
        the launches not yet matched to an op; those matched are dropped."""
        stream = np.full(len(o), NONE, np.int64)
        if not len(self.launch_seq):
            return stream
        order = np.argsort(self.launch_seq, kind="stable")
        seq, st = self.launch_seq[order], self.launch_stream[order]
        at = np.minimum(np.searchsorted(seq, o[:, 0]), len(seq) - 1)
        hit = (seq[at] == o[:, 0]) & ((o[:, 6] & _ON_DEVICE) != 0)
        stream[hit] = st[at[hit]]
        keep = np.ones(len(seq), bool)
        keep[at[hit]] = False
        self.launch_seq, self.launch_stream = seq[keep], st[keep]
        return stream


class _Converter:
    """Rows of tuples into int64 arrays, ``SLICE`` rows at a time, letting
    the GIL go between slices (see the module doc); once ``stop`` is set
    it converts nothing more (``stopped``)."""

    def __init__(self, stop: threading.Event | None):
        self.stop, self.stopped = stop, False

    def __call__(self, rows: list[tuple], width: int) -> np.ndarray:
        out = np.zeros((len(rows), width), np.int64)
        for a in range(0, len(rows), SLICE):
            if self.stop is not None and self.stop.is_set():
                self.stopped = True
                return out
            part = rows[a:a + SLICE]
            out[a:a + len(part)] = np.fromiter(itertools.chain.from_iterable(part), np.int64,
                                               len(part) * width).reshape(-1, width)
            time.sleep(0)  # the recorded thread waits one slice at most
        return out
