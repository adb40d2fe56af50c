"""The op stream: the private ``TorchDispatchMode`` and what it writes.

One ``Session`` per recording (``session.py``) holds the caches and the
per-thread ``Writer``s; each recording thread has its own ``Mode`` (the dispatch-mode
stack is thread-local) that appends one tuple per op to its thread's writer:
``(seq, host_begin_ns, host_end_ns, signature, module context, grad_fn,
flags)``. ``seq`` comes from one ``itertools.count`` shared by all threads;
no lock is taken on the hot path, only on cache misses. The signature
(op name, tensor dtypes and shapes, device) is interned through a dict keyed
by ``(id(func), dtype, shape, dtype, shape, ..., device)`` — each tensor
argument's dtype and shape in order, the op's device last — so its strings
are built only on a miss (``signatures.py``).

Per op: two clock reads, the sequence number and the row append; the
signature key — id(func), each tensor's dtype and shape read as two
attributes into one flat tuple (cheaper than one ``attrgetter`` call and a
pair tuple per tensor), the device once — its hash and a dict lookup; the
op itself runs through the ``OpOverload``'s C++ callable, one Python frame
less than a bare mode, and without keyword arguments no dict is built for
the call. An op whose schema's only tensors are one to three leading
arguments (``signatures.leading_tensors``, noted once per op under
``id(func)``: most ops of a training step, views with a list of sizes,
``addcmul_`` and ops with keywords among them) builds the key in one
expression, its other arguments unread; the rest (lists of tensors,
optional tensors, ``out=``) loop over their arguments. What each part
costs, in instructions per op: ``benchmarks/RESULTS.md`` (recording
overhead); ``selfcost.py`` measures what all this costs a recording.

The rows, kept compact: a ``list.append`` of a tuple is the cheapest
record Python has, but it holds about 190 B an op (the tuple, three new
ints: seq, host begin and end, and the list's slot). ``OpRows``, one per
session, moves them into chunks of the structured dtype ``OP_ROW``
(``OP_ROW_BYTES`` = 40 B an op: int64 seq and host times, int32
signature, context, grad_fn and flags) from a background thread that
wakes every ``PERIOD_S`` and converts each writer's rows ``SLICE`` at a
time, deleting the converted prefix from the writer's list (``del
ops[:n]``: under the GIL it cannot interleave with the owning thread's
appends, which go to the list's end). A recording thus holds 40 B an op
plus the rows not yet converted: fewer than ``SLICE`` a writer, plus
what its threads append in one period. ``OpRows`` is the lists' one
consumer: their rows are read through it (``table``, under its lock, at
stop or as the process ends; the journal's flusher reads
``Writer.chunks``, append-only, and calls ``drain`` at stop).

Its cost: nothing on the op path. The conversion (the one assembly did at
stop, ~0.2 µs a row: ``benchmarks/RESULTS.md``) runs while recording,
holding the GIL one slice at a time and letting it go (``time.sleep(0)``)
between slices: a recorded thread waits one slice at most at a time. It
is not hidden: ``OpRows.stats`` (rows, slices, ns held) goes to the
Timeline's meta as ``op_rows_converted``. The thread is started with
``_thread``, as the flusher's is: a recording with ``threads=True``
records the ``threading.Thread``s started while it runs.
"""

from __future__ import annotations

import _thread
import itertools
import sys
import threading
import time
from time import perf_counter_ns as _now
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..timeline.schema import NONE, OpFlag
from .signatures import RULE_COLL, RULE_WAIT, ragged_key

if TYPE_CHECKING:
    from .session import Session, Writer

__all__ = ["Mode", "OP_ROW", "OP_ROW_BYTES", "OpRows", "PERIOD_S", "SLICE", "as_rows",
           "skip_dynamo"]

_VIEW, _TRUNCATED = int(OpFlag.VIEW), int(OpFlag.TRUNCATED)
_Tensor = torch.Tensor
_node = torch._C._current_autograd_node
_ident = threading.get_ident
_NO_KWARGS: dict = {}  # never written: ops get their kwargs unpacked


def _first_device(args: tuple, kwargs: dict) -> Any:
    """The device of an op whose first argument is no tensor: its first
    tensor's (in a list, or a keyword argument), else a factory's
    ``device`` argument (None when it has none)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            return a.device
        if type(a) is list or type(a) is tuple:
            for b in a:
                if isinstance(b, _Tensor):
                    return b.device
    return kwargs.get("device")


def _work_device(args: tuple, kwargs: dict, cpu: Any) -> Any:
    """Where an op whose first argument is a CPU scalar tensor runs: the
    first other tensor's device that is not the CPU (``cpu`` if none)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor) and a.device.type != "cpu":
            return a.device
        if type(a) is list or type(a) is tuple:
            for b in a:
                if isinstance(b, _Tensor) and b.device.type != "cpu":
                    return b.device
    return cpu


class Mode(TorchDispatchMode):
    """Records every op its thread dispatches into the session."""

    def __init__(self, session: Session, writer: Writer):
        super().__init__()
        self.s, self.w, self.ident = session, writer, writer.ident
        self.count, self.sigs = session.count, session.sigs  # one lookup less per op
        self.lead = session.lead  # id(func) -> leading tensors, 0 for the loop
        self.max_ops, self.host_only = session.max_ops, session.device is None
        # a CPU scalar first (torch.tensor(2.) / x) runs where the others are
        self.scalar_first = getattr(session.device, "kind", None) in ("cuda", "sim")
        skip_dynamo()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # let torch.compile compile; see the module docstring

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch would wrap __torch_dispatch__ in torch._disable_dynamo, whose
        # first call imports torch._dynamo: it sets TORCHINDUCTOR_CACHE_DIR
        # and a SymPy warnings filter (and takes ~1 s) in a program that may
        # never compile. ``skip_dynamo`` wraps it once the program has loaded
        # dynamo itself, which is when torch.compile could trace into it.
        return False

    def dispatch(self, func, types, args=(), kwargs=None):
        """``__torch_dispatch__`` (``skip_dynamo`` may wrap it): one op."""
        s = self.s
        if s.off:
            return func(*args, **(kwargs or _NO_KWARGS))
        t0 = _now()
        seq = next(self.count)
        # The key: id(func) (OpOverload hashes in Python; the signature keeps
        # func alive), each tensor's dtype and shape, flat, and the device,
        # read once. An op whose schema's only tensors are one to three
        # leading ones (views, most math, Adam's in-place ops; ``lead``)
        # builds it in one expression, whatever its other arguments; any
        # other op (lists of tensors, optional ones, out=), or one passed a
        # number for a tensor (``torch.add(t, 1)``), takes the loop.
        f = id(func)
        n = self.lead.get(f)
        if n is None:
            n = s.leading(f, func)
            if n < 0:  # CompositeImplicitAutograd (under inference_mode): its parts
                return s.decompose(self, func, args, kwargs)
        try:
            a = args[0] if n and args else None
            if isinstance(a, _Tensor):
                dev = a.device
                # ndim first: torch.device.type makes a new str (~0.3 µs)
                if self.scalar_first and a.ndim == 0 and dev.type == "cpu":
                    dev = _work_device(args, kwargs or _NO_KWARGS, dev)
                if n == 1:
                    key = (f, a.dtype, a.shape, dev)
                elif n == 2:
                    b = args[1]
                    key = (f, a.dtype, a.shape, b.dtype, b.shape, dev) \
                        if isinstance(b, _Tensor) else (f, a.dtype, a.shape, dev)
                else:
                    b, c = args[1], args[2]
                    key = (f, a.dtype, a.shape, b.dtype, b.shape, c.dtype, c.shape, dev) \
                        if isinstance(b, _Tensor) and isinstance(c, _Tensor) else None
            else:
                key = None
            if key is None:  # any other arguments
                if kwargs is None:
                    kwargs = _NO_KWARGS
                a = args[0] if args else None
                if isinstance(a, _Tensor):
                    dev = a.device
                    if self.scalar_first and a.ndim == 0 and dev.type == "cpu":
                        dev = _work_device(args, kwargs, dev)
                else:
                    dev = None
                key = [f]
                for a in args:
                    if isinstance(a, _Tensor):
                        key += (a.dtype, a.shape)
                    elif type(a) is list or type(a) is tuple:
                        for b in a:
                            if isinstance(b, _Tensor):
                                key += (b.dtype, b.shape)
                if kwargs:
                    for a in kwargs.values():
                        if isinstance(a, _Tensor):
                            key += (a.dtype, a.shape)
                if dev is None:
                    dev = _first_device(args, kwargs)
                key.append(dev)
                key = tuple(key)
        except RuntimeError:  # a nested tensor has no sizes (no cost when none is)
            kwargs = kwargs or _NO_KWARGS
            a = args[0] if args else None
            dev = a.device if isinstance(a, _Tensor) else _first_device(args, kwargs)
            key = (id(func), *ragged_key(args, kwargs), dev)
        try:
            sid, flags, rule, call = self.sigs.get(key) or s.signature(
                key, func, dev, args, kwargs)
        except TypeError:  # symbolic shapes do not hash: key them by text
            key = tuple(tuple(map(str, k)) if isinstance(k, tuple) else k for k in key)
            sid, flags, rule, call = self.sigs.get(key) or s.signature(
                key, func, dev, args, kwargs)
        w = self.w
        gid = NONE
        if s.backward:  # only then can an autograd node be running
            node = _node()
            if node is not None:
                gid = s.nodes.get(type(node))
                if gid is None:
                    gid = s.node(node)
                if _ident() != self.ident:  # an autograd engine device thread
                    w = s.writer()
        if seq >= self.max_ops:
            if seq > self.max_ops:
                return func(*args, **(kwargs or _NO_KWARGS))
            s.truncate()
            flags |= _TRUNCATED
        if rule >= RULE_COLL:  # collectives, and ops measured (FLOPs, allocations)
            kwargs = kwargs or _NO_KWARGS
            if rule > RULE_WAIT:
                return s.measured(w, func, args, kwargs, seq, t0, sid, gid, flags,
                                  rule, dev, call)
            return s.collective(w, func, args, kwargs, seq, t0, sid, gid, flags, dev)
        if self.host_only or flags & (_VIEW | _TRUNCATED) or dev is None:
            pass
        elif rule:
            return s.launch_ruled(w, func, args, kwargs or _NO_KWARGS, seq, t0, sid, gid,
                                  flags, rule, dev)
        elif not (w.data and dev.type == "cpu") and s.device.owns(dev):
            return s.launch(w, func, args, kwargs or _NO_KWARGS, seq, t0, sid, gid, flags,
                            False)
        try:  # without keywords, no dict is built for the call
            out = call(*args, **kwargs) if kwargs else call(*args)
        except BaseException:
            w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
            raise
        w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
        return out

    __torch_dispatch__ = dispatch


def skip_dynamo() -> None:
    """Keep torch.compile out of the recorder's dispatch (what torch's own
    ``_disable_dynamo`` wrapper does), once the program has loaded
    ``torch._dynamo``: before that nothing can trace it, and loading it
    for the recorder would change the program (``Mode._should_skip_dynamo``).
    Called as modes are made and at each step boundary."""
    if Mode.__dict__["__torch_dispatch__"] is Mode.dispatch and "torch._dynamo" in sys.modules:
        Mode.__torch_dispatch__ = torch._disable_dynamo(Mode.dispatch, recursive=True)


# -- the rows, kept compact (see the module doc) -------------------------------------

#: one op row held while recording (the 7-tuple of ``Writer.ops``, compact)
OP_ROW = np.dtype([("seq", "<i8"), ("host_begin_ns", "<i8"), ("host_end_ns", "<i8"),
                   ("sig", "<i4"), ("ctx", "<i4"), ("grad_fn", "<i4"), ("flags", "<i4")])
OP_ROW_BYTES = OP_ROW.itemsize  # 40
PERIOD_S = 0.02  # between the converter's rounds: what its threads append in one stays
SLICE = 2048  # rows converted while holding the GIL; a chunk's rows
CLOSE_WAIT_S = 10.0  # at stop, for a slice under way


def _converted(rows: list[tuple]) -> np.ndarray:
    """``rows`` (7-tuples) as an ``OP_ROW`` chunk."""
    flat = np.fromiter(itertools.chain.from_iterable(rows), np.int64,
                       len(rows) * 7).reshape(-1, 7)
    out = np.empty(len(rows), OP_ROW)
    for i, name in enumerate(OP_ROW.names):
        out[name] = flat[:, i]
    return out


def as_rows(chunks: list[np.ndarray], rest: list[tuple] = ()) -> np.ndarray:
    """``OP_ROW`` chunks, then tuples ``rest``, as one int64 array of rows
    ``(seq, t0, t1, sig, ctx, grad_fn, flags)`` (``assembly.ops_columns``)."""
    n = sum(len(c) for c in chunks)
    out = np.empty((n + len(rest), 7), np.int64)
    if chunks:
        joined = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        for i, name in enumerate(OP_ROW.names):
            out[:n, i] = joined[name]
    if rest:
        out[n:] = np.fromiter(itertools.chain.from_iterable(rest), np.int64,
                              len(rest) * 7).reshape(-1, 7)
    return out


class OpRows:
    """A session's op rows: its writers' lists and their converted chunks
    (see the module doc). ``start`` the converter's thread when recording
    begins, ``close`` it at stop; ``table`` reads a writer's rows."""

    def __init__(self, writers: list):
        self.writers = writers  # the session's list (appended to, never replaced)
        self.lock = threading.Lock()  # one consumer at a time; readers see whole slices
        self.rows = self.slices = self.ns = 0  # converted while recording
        self._stop = threading.Event()
        self._done = threading.Event()
        self._done.set()  # no thread yet

    def start(self) -> "OpRows":
        """Convert in the background from now on; a machine that has no
        thread to give converts nothing before stop (it only holds more)."""
        self._done.clear()
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError:
            self._done.set()
        return self

    def close(self) -> None:
        """Stop the converter's thread (waiting for a slice under way). A
        second call does nothing."""
        self._stop.set()
        self._done.wait(CLOSE_WAIT_S)

    def _run(self) -> None:
        try:
            while not self._stop.wait(PERIOD_S):
                self.convert(SLICE, self._stop)
        finally:
            self._done.set()

    def convert(self, least: int = SLICE, stop: threading.Event | None = None) -> None:
        """Move each writer's rows into chunks, ``SLICE`` at a time, while
        it has ``least`` or more; give up once ``stop`` is set."""
        for w in list(self.writers):
            while len(w.ops) >= least:
                if stop is not None and stop.is_set():
                    return
                with self.lock:
                    t0 = _now()
                    part = w.ops[:SLICE]
                    if not part:
                        break
                    w.chunks.append(_converted(part))
                    del w.ops[:len(part)]  # the owning thread appends at the end
                    self.ns += _now() - t0
                    self.rows += len(part)
                    self.slices += 1
                time.sleep(0)  # a recorded thread waits one slice at most

    def drain(self) -> None:
        """Convert every row there is now (the journal's last chunk, at stop)."""
        self.convert(1)

    def table(self, w: Any) -> np.ndarray:
        """Writer ``w``'s rows so far, in the order appended, as int64
        ``(seq, t0, t1, sig, ctx, grad_fn, flags)`` rows."""
        with self.lock:
            chunks, rest = list(w.chunks), w.ops[:]
        return as_rows(chunks, rest)

    def stats(self) -> dict[str, int]:
        """What converting cost the recording: rows and slices converted
        while it ran, and the ns the converter held the GIL for them."""
        return {"rows": self.rows, "slices": self.slices, "ns": self.ns}

    def held_bytes(self) -> int:
        """Bytes the op rows hold now: each writer's list (its slots, each
        tuple and the three ints it alone holds: seq, t0, t1) and its
        chunks (arrays, headers and list). An accounting of the objects,
        for the benchmark and the tests; approximate within a few bytes
        an op (allocator rounding)."""
        n = 0
        for w in list(self.writers):
            with self.lock:
                ops, chunks = w.ops[:], list(w.chunks)
            n += sys.getsizeof(w.ops) + sys.getsizeof(w.chunks)
            n += sum(sys.getsizeof(t) + sum(map(sys.getsizeof, t[:3])) for t in ops)
            n += sum(sys.getsizeof(c) for c in chunks)  # data included (owned arrays)
        return n
