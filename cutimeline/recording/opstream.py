"""The op stream: the private ``TorchDispatchMode`` and what it writes.

One ``Session`` per recording (``session.py``) holds the caches and the
per-thread ``Writer``s; each recording thread has its own ``Mode`` (the
dispatch-mode stack is thread-local) that appends one tuple per op:
``(seq, host_begin_ns, host_end_ns, signature, module context, grad_fn,
flags)``. ``seq`` comes from one ``itertools.count`` shared by all
threads; no lock is taken on the hot path, only on cache misses. The
signature (op name, tensor dtypes and shapes, device) is interned under a
flat key, so its strings are built only on a miss (``signatures.py``).
Per op: two clock reads, the count, the key's hash and lookup, the
append; the op runs through the ``OpOverload``'s C++ callable, one Python
frame less than a bare mode. What each part costs, in instructions per
op: ``benchmarks/RESULTS.md`` (recording overhead); what it costs a
recording: ``selfcost.py``.

Rows are kept compact: a tuple in a list is the cheapest record Python
has but holds about 190 B an op; ``OpRows`` moves them into 40-byte
``OP_ROW`` chunks every ``CHUNK`` ops of a thread, on that thread. A
recording thus holds 40 B an op plus fewer than ``CHUNK`` tuples a
thread. Why not a converter thread: it would take the GIL from the
recorded one at moments nobody chooses, stalls that read as the
program's host time.
"""

from __future__ import annotations

import itertools
import statistics
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

__all__ = ["Mode", "ExactMode", "OP_ROW", "OP_ROW_BYTES", "OpRows", "CHUNK", "as_rows",
           "skip_dynamo"]

_VIEW, _TRUNCATED = int(OpFlag.VIEW), int(OpFlag.TRUNCATED)
_Tensor = torch.Tensor
_node = torch._C._current_autograd_node
_ident = threading.get_ident
_NO_KWARGS: dict = {}  # never written: ops get their kwargs unpacked
_WRAPPERS = ("torch._dynamo", "torch._compile")  # the frames of skip_dynamo's wrapper


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
        # the next op count at which this thread converts its rows (OpRows), or the cap
        self.limit = min(self.max_ops, CHUNK)
        # a CPU scalar first (torch.tensor(2.) / x) runs where the others are
        self.scalar_first = getattr(session.device, "kind", None) in ("cuda", "sim")
        skip_dynamo()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # let torch.compile compile; see recorder.py's module docstring

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
        if seq >= self.limit:
            if seq < self.max_ops:  # this thread's rows into a chunk, between two ops
                t0 = self.compact(w, seq)
            elif seq > self.max_ops:
                return func(*args, **(kwargs or _NO_KWARGS))
            else:
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
        if self.exact:  # the recorder's time in this dispatch leaves the device's host
            return self.host_op(w, func, call, args, kwargs, seq, t0, sid, gid, flags, dev)
        try:  # without keywords, no dict is built for the call
            out = call(*args, **kwargs) if kwargs else call(*args)
        except BaseException:
            w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
            raise
        w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
        return out

    exact = False  # ExactMode: a device with a host clock of its own

    def compact(self, w: Writer, seq: int) -> int:
        """Move writer ``w``'s rows into a chunk (``OpRows``) before op
        ``seq``; the time it took is the recorder's (``recorder_work``).
        Returns the op's new begin: after it."""
        t = _now()
        self.s.rows.convert_writer(w)
        self.limit = min(self.max_ops, seq + CHUNK)
        now = _now()
        lost = getattr(self.s.device, "recorder_work", None)
        if lost is not None:
            lost(now - t)
        return now

    __torch_dispatch__ = dispatch


class ExactMode(Mode):
    """The mode of a recording on a device that keeps a host clock of its
    own (SimGPU's virtual host, ``Device.keeps_host_clock``): the
    recorder's time leaves that clock as it is spent, not by a price
    removed afterwards. What runs in ``dispatch`` around an op that does
    not launch is measured around the op's own call (its row begins
    there); a launch is charged by the device from the recorder's first
    look at it until its end (``SimGPU.end``), and what follows until the
    dispatch returns is measured (``Device.recorder_left``). Torch's call
    into the mode and back, which no clock inside it sees, leaves at the
    price ``selfcost.measure_entry`` measured (``Session.entry_ns``), until
    the program itself shows it: two ops in a row dispatched by torch's
    C++ within one Python call (``F.linear``'s ``t`` and ``addmm``, the
    same calling frame at the same instruction, outside backward) have
    only that call and torch's glue between them, in the program's own
    cache state, which a probe's tight loop does not reproduce (there it
    costs about half). The median of the last ``ENTRY_SAMPLES`` such gaps
    is the price from then on. So the verdict's host times hold the
    program's own work however loaded the machine is, and no ratio
    calibrated at start or stop scales them."""

    exact = True

    def __init__(self, session: Session, writer: Writer):
        super().__init__(session, writer)
        d = session.device
        self.lost, self.left, self.metadata, self.entry_ns = \
            d.recorder_work, d.recorder_left, d.metadata_ns, session.entry_ns
        self.since: int | None = None  # when this thread's last host op's call returned
        # the last op's calling frame and instruction: the frame held (until
        # this thread's next op) so that no other takes its address
        self.frame: Any = None
        self.lasti = -1
        self.out = 0   # when the last op's dispatch returned
        self.gaps: list[int] = []  # the last ENTRY_SAMPLES gaps between ops one call made

    def dispatch_exact(self, func, types, args=(), kwargs=None):
        """``__torch_dispatch__``: ``Mode.dispatch``, then what the
        recorder did after the op's own work leaves the device's host."""
        t = _now()
        try:
            return Mode.dispatch(self, func, types, args, kwargs)
        finally:
            f = sys._getframe(1)
            while f is not None and f.f_globals.get("__name__", "").startswith(_WRAPPERS):
                f = f.f_back  # torch.compile's wrapper of this method (skip_dynamo)
            if f is not None and f is self.frame and f.f_lasti == self.lasti and not self.s.backward:
                self.sample(t - self.out)
            self.frame, self.lasti = (f, f.f_lasti) if f is not None and not self.s.off \
                else (None, -1)
            since, self.since = self.since, None
            self.out = now = _now()
            self.left(now, since, self.entry_ns)

    def sample(self, gap: int) -> None:
        """One gap between two ops of one Python call; every 16th, the
        price becomes the median of the last ``ENTRY_SAMPLES``."""
        g = self.gaps
        g.append(gap)
        if len(g) > ENTRY_SAMPLES:
            del g[0]
        if len(g) >= 16 and len(g) % 16 == 0 or len(g) == ENTRY_SAMPLES:
            self.entry_ns = self.s.entry_ns = int(statistics.median(g))

    def host_op(self, w: Writer, func: Any, call: Any, args: tuple, kwargs: dict | None,
                seq: int, t0: int, sid: int, gid: int, flags: int, dev: Any) -> Any:
        """An op that launches nothing, its row from its own call: the
        recorder's time before that leaves the device's host. A view or
        ``empty`` of the device's own tensors lasts the device's price of
        it (``Device.metadata_ns``) when it has one."""
        t = _now()
        self.lost(t - t0)
        try:
            out = call(*args, **kwargs) if kwargs else call(*args)
        except BaseException:
            w.ops.append((seq, t, _now(), sid, w.ctx, gid, flags))
            raise
        self.since = t1 = _now()
        w.ops.append((seq, t, t1, sid, w.ctx, gid, flags))
        if flags & _VIEW and dev is not None:
            ns = self.metadata(dev, func, args, kwargs or _NO_KWARGS)
            if ns is not None and t1 - t > ns:
                self.lost(t1 - t - ns)
        return out

    __torch_dispatch__ = dispatch_exact


def skip_dynamo() -> None:
    """Keep torch.compile out of the recorder's dispatch (what torch's own
    ``_disable_dynamo`` wrapper does), once the program has loaded
    ``torch._dynamo``: before that nothing can trace it, and loading it
    for the recorder would change the program (``Mode._should_skip_dynamo``).
    Called as modes are made and at each step boundary."""
    if Mode.__dict__["__torch_dispatch__"] is Mode.dispatch and "torch._dynamo" in sys.modules:
        Mode.__torch_dispatch__ = torch._disable_dynamo(Mode.dispatch, recursive=True)
        ExactMode.__torch_dispatch__ = torch._disable_dynamo(ExactMode.dispatch_exact,
                                                             recursive=True)


# -- the rows, kept compact (see the module doc) -------------------------------------

#: one op row held while recording (the 7-tuple of ``Writer.ops``, compact)
OP_ROW = np.dtype([("seq", "<i8"), ("host_begin_ns", "<i8"), ("host_end_ns", "<i8"),
                   ("sig", "<i4"), ("ctx", "<i4"), ("grad_fn", "<i4"), ("flags", "<i4")])
OP_ROW_BYTES = OP_ROW.itemsize  # 40
CHUNK = 4096  # a thread's rows converted at once (below 64 B an op from ~30k ops)
ENTRY_SAMPLES = 63  # gaps between ops of one Python call ExactMode's price is the median of


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
    of ``OP_ROW`` (int64 seq and host times, int32 signature, context,
    grad_fn and flags: ``OP_ROW_BYTES``, 40 B an op).

    The recording thread converts its own rows every ``CHUNK`` of its
    ops (``Mode.compact``): the op-count check the cap needs anyway
    (``seq >= limit``, the nearer of the cap and the next conversion)
    costs the op path nothing more, and the conversion (~0.2 µs a row,
    the work assembly did at stop) runs between two ops, where the
    recorder's clock does not see it; a device that keeps a host clock
    of its own is told the time was the recorder's
    (``Device.recorder_work``). This is the lists' one consumer: rows are
    read through ``table`` (under its lock, at stop or as the process
    ends); the journal's flusher reads ``Writer.chunks``, append-only,
    and calls ``drain`` at stop. ``stats`` (rows, chunks, ns) goes to the
    Timeline's meta as ``op_rows_converted``."""

    def __init__(self, writers: list):
        self.writers = writers  # the session's list (appended to, never replaced)
        self.lock = threading.Lock()  # one consumer at a time; readers see whole chunks
        self.rows = self.chunks = self.ns = 0  # converted while recording

    def convert_writer(self, w: Any, most: int | None = None) -> None:
        """Move the rows writer ``w`` holds now (the first ``most``) into
        one chunk. Safe from any thread: its owner appends at the list's
        end, this deletes the prefix it read."""
        with self.lock:
            t0 = _now()
            part = w.ops[:most]
            if not part:
                return
            w.chunks.append(_converted(part))
            del w.ops[:len(part)]
            self.ns += _now() - t0
            self.rows += len(part)
            self.chunks += 1

    def convert(self, least: int = 1, most: int | None = None,
                stop: threading.Event | None = None) -> None:
        """Convert each writer's rows while it holds ``least`` or more, in
        chunks of ``most`` (all at once when None), letting the GIL go
        between them; give up once ``stop`` is set (the journal's flusher,
        from its thread)."""
        for w in list(self.writers):
            while len(w.ops) >= least:
                if stop is not None and stop.is_set():
                    return
                self.convert_writer(w, most)
                if most is None:
                    break
                time.sleep(0)  # a recorded thread waits one chunk at most

    def drain(self) -> None:
        """Convert every row there is now (the journal's last chunk, at stop)."""
        self.convert()

    def table(self, w: Any) -> np.ndarray:
        """Writer ``w``'s rows so far, in the order appended, as int64
        ``(seq, t0, t1, sig, ctx, grad_fn, flags)`` rows."""
        with self.lock:
            chunks, rest = list(w.chunks), w.ops[:]
        return as_rows(chunks, rest)

    def stats(self) -> dict[str, int]:
        """What converting cost the recording: rows and chunks converted
        while it ran, and the ns it took."""
        return {"rows": self.rows, "chunks": self.chunks, "ns": self.ns}

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
