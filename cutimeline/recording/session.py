"""The session: the state of one recording, shared by its threads' modes and hooks.

One ``Session`` per recording holds the caches (op signatures, module
contexts, autograd node names, the strings) and the per-thread ``Writer``s,
each made on its thread's first access, whose lists hold plain tuples (ops,
launches, spans) appended without a lock; only cache misses take the
session's lock; ``rows`` (``opstream.py``) moves the ops rows into compact
chunks while it records. It keeps the cap: ops and spans each count
against ``max_ops`` (``record``'s ``max_bytes`` // 40 B an op row), and the
first past it cuts the whole recording (``truncate``).
It ends steps, prices the recorder again between them (``calibrate``), and
dispatches the ops that launch device work between two events (``launch``),
those that may block the host (``launch_ruled``), collectives
(``collective``) and CUDA graph replays (``launch_graph``), and those it
measures (``measured``: FLOPs, ``measures/flops.py``; allocations,
``measures/memory.py``). Launching ops append ``(seq, stream, begin_event,
end_event, gpu kind)`` to ``Writer.launches``; with ``memory=True`` the
device's memory is read after each (``memlog``); the sources of
host-blocking ops, collectives and DATA and SYNC spans (every op's with
``stack=True``) go to ``sourced`` (``measures/sources.py``).
``assembly.py`` turns all of it and the device's ``Harvest`` into a
Timeline at stop.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from time import perf_counter_ns as _now
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes, _pop_mode, _push_mode

from ..devices.device import Device
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.table import Strings
from .measures.collectives import OPS, WAIT, CollectiveLog
from .measures.flops import FlopCounter
from .measures.memory import MemoryLog
from .measures.sources import SourceFinder, StackCount
from .opstream import OP_ROW_BYTES, ExactMode, Mode, OpRows
from .hooks.ranges import range_call
from .signatures import (ALLOCS, DIST_NAMESPACES, NO_WORK, RULE_ALLOC, RULE_COLL, RULE_FLOPS,
                         RULE_WAIT, RULES, Named, arg_kinds, blocking, composite,
                         leading_tensors, shapes_text)

__all__ = ["Writer", "Session"]

_VIEW, _SYNC, _LAUNCH = int(OpFlag.VIEW), int(OpFlag.SYNC), int(OpFlag.LAUNCH)
_OP_ROW, _COLL_ROW = int(GpuKind.OP), int(GpuKind.COLLECTIVE)
_CAPTURED, _COLLECTIVE = int(OpFlag.CAPTURED), int(OpFlag.COLLECTIVE)
_TRUNCATED = int(OpFlag.TRUNCATED)
_SYNC_SPAN, _STEP, _USER_SPAN = int(SpanKind.SYNC), int(SpanKind.STEP), int(SpanKind.USER)
_DATA = int(SpanKind.DATA)
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


class Session:
    """The state of one recording, shared by its threads' modes and hooks."""

    def __init__(self, device: Device | None, *, max_ops: int, steps: str,
                 stack: bool = False, memory: bool = False):
        self.device, self.max_ops, self.steps = device, max_ops, steps
        self.stack, self.memory = stack, memory  # record(stack=, memory=)
        # a simulator's run() answers for tensors that have no values (devices/sim/ops.py)
        self.run: Callable | None = getattr(device, "run", None)
        # and charges a launch's dispatch from the recorder's first look at it
        self.mark: Callable | None = getattr(device, "mark_dispatch", None)
        self.comm: Callable | None = getattr(device, "collective_stream", None)
        # and counts reads between steps (devices/sim/values.py)
        self.on_step: Callable | None = getattr(device, "on_step", None)
        # a device with a host clock of its own: the recorder's time leaves
        # it as it is spent (opstream.ExactMode), torch's calls into the
        # mode and the module hooks at the prices selfcost.measure_entry sets
        self.exact = device is not None and device.keeps_host_clock()
        self.lost: Callable | None = device.recorder_work if self.exact else None
        self.entry_ns = self.module_entry_ns = 0
        self.off = False  # stopped, or cut at max_ops: the modes pass ops through
        self.cut_ns, self.cut_by = None, ""  # when max_ops cut the recording, by what
        self.span_count = itertools.count()  # spans count against max_ops too
        self.paused = False  # True while calibrate() runs: the hooks do nothing
        self.backward = 0  # backward passes running (hooks/installer.py counts them)
        self.lock = threading.Lock()  # taken on cache misses only
        self.strings = Strings()
        self.where = SourceFinder(self.strings, self.lock)
        # (seq, thread, span index, file, line, function, code): sources.py
        self.sourced: list[tuple] = []
        # stack=True: each sequence number drawn notes its op's source
        self.count: Any = StackCount(itertools.count(), self.where, self.sourced) \
            if stack else itertools.count()
        self.flopper = FlopCounter()  # rows (seq, FLOPs) of ops with a formula
        # memory=True: the device's memory read after each op that may change it
        self.memlog = MemoryLog(device) if memory else None
        self.sigs: dict[tuple, tuple] = {}  # key -> (sig, flags, rule, callable)
        self.sig_table: list[tuple[int, int, int]] = []    # (name, shapes, device)
        self.sig_args: list[tuple[int, int, int, int]] = []  # argument kinds: arg_kinds
        self.funcs: list[Any] = []
        # id(func) -> its leading tensor arguments for the op stream's key
        # (signatures._leading); lead_funcs keeps those ids unique
        self.lead: dict[int, int] = {}
        self.lead_funcs: list[Any] = []
        self.nodes: dict[type, int] = {}  # autograd node type -> name
        self.ctxs: dict[tuple[int, int], int] = {(NONE, NONE): 0}
        self.ctx_table: list[tuple[int, int]] = [(NONE, NONE)]  # (module, depth)
        self.writers: list[Writer] = []
        self.rows = OpRows(self.writers)  # ops rows moved into compact chunks (opstream.py)
        self.local = _Local(weakref.ref(self))
        self.step_number, self.step_begin, self.manual = 0, _now(), False
        self.collectives = None  # collectives.CollectiveLog, made at the first collective
        # sentences on what this recording could not show, for meta["warnings"]
        self.warnings: list[str] = []
        self.graphs = 0  # Inductor graphs seen (their ops are named by this order)
        # called at every step boundary until each returns True (hooks/installer.py:
        # patches that wait for a module torch imports on first use)
        self.at_boundary: list[Callable[[], bool]] = []
        # (begin_ns, end_ns, ratio in 1/1000) of each calibration between
        # steps: what a real mix of ops cost over the start-up model's price
        self.calibrations: list[tuple[int, int, int]] = []
        self.calibrator: Callable[[int], float] | None = None  # selfcost.Program
        self.calibrate_every(0)

    def calibrate_every(self, ns: int) -> None:
        """Calibrate between steps at most every ``ns`` (0: never), the
        first time ``ns`` after now."""
        self.calibrate_every_ns, self._next_calibration = ns, _now() + ns

    # -- per-thread state and interning (misses take the lock) -----------------
    def new_writer(self) -> Writer:
        with self.lock:
            w = Writer(len(self.writers))
            self.writers.append(w)
        return w

    def writer(self) -> Writer:
        return self.local.w

    def mode_for(self, w: Writer) -> "Mode":
        return ExactMode(self, w) if self.exact else Mode(self, w)

    def intern(self, s: str) -> int:
        return self.strings.intern_under(self.lock, s)

    def context(self, module: int, depth: int) -> int:
        c = self.ctxs.get((module, depth))
        if c is None:
            with self.lock:
                c = self.ctxs.setdefault((module, depth), len(self.ctx_table))
                if c == len(self.ctx_table):
                    self.ctx_table.append((module, depth))
        return c

    def node(self, node: Any) -> int:
        g = self.nodes[type(node)] = self.intern(node.name())
        return g

    def leading(self, f: int, func: Any) -> int:
        """Note how many leading tensors key ``func`` (id ``f``): 1-3, 0 for
        all; -1, not noted, for an op the mode decomposes (``decompose``)."""
        if composite(func):
            return -1
        n = leading_tensors(func)
        with self.lock:
            self.lead_funcs.append(func)
            self.lead[f] = n
        return n

    def decompose(self, mode: Mode, func: Any, args: tuple, kwargs: dict | None) -> Any:
        """Run a ``CompositeImplicitAutograd`` op by its decomposition, the
        ops of which ``mode`` records. Autograd decomposes these ops above
        the mode; under ``torch.inference_mode()`` (no autograd keys) they
        reach it whole (``aten::linear``, ``aten::item``,
        ``aten::to.dtype_layout``), and their parts are what the device runs
        and what the op stream shows in every other mode. Torch's own C++
        kernel, as CUDA runs it, not a Python decomposition."""
        _push_mode(mode)
        try:
            return func._op_dk(_CIA, *args, **(kwargs or {}))
        finally:
            _pop_mode()

    def signature(self, key: tuple, func: Any, dev: Any, args: tuple = (),
                  kwargs: dict | None = None, shapes: str | None = None,
                  ) -> tuple[int, int, int, Any]:
        """Intern the signature of an op: its name, tensor shapes (from the
        key unless given), device; and the kinds of its arguments, which its
        recording cost depends on. Its rule: whether it may block the host,
        is a collective, has FLOPs or (memory=True) allocates (signatures.py)."""
        name = func.name() if hasattr(func, "name") else str(func)
        base = name.split(".")[0]
        flags = _VIEW if (getattr(func, "is_view", False) or base in NO_WORK
                          or getattr(func, "namespace", "") == "profiler") else 0
        if shapes is None:
            shapes = shapes_text(key)
        col = dev.index if dev is not None and dev.type == "cuda" and \
            dev.index is not None else NONE
        rule = RULES.get(base, 0)
        kinds = arg_kinds(args, kwargs)
        if getattr(func, "namespace", "") in DIST_NAMESPACES:
            if base in OPS:
                rule = RULE_WAIT if OPS[base][0] == WAIT else RULE_COLL
                flags |= _COLLECTIVE if rule == RULE_COLL else 0
        if not rule and not flags & _VIEW and self.flopper.formula(func) is not None:
            rule = RULE_FLOPS
        elif not rule and self.memlog is not None and base in ALLOCS:
            rule = RULE_ALLOC
        with self.lock:
            sig = self.sigs.get(key)
            if sig is None:
                self.sig_table.append((self.strings.intern(name),
                                       self.strings.intern(shapes), col))
                self.funcs.append(func)  # keeps id(func) in the key unique
                self.sig_args.append(kinds)
                # func._op: the OpOverload's C++ callable, one Python frame less;
                # record_function's ops open and close a USER span (ranges.py)
                sig = self.sigs[key] = (len(self.sig_table) - 1, flags, rule,
                                        range_call(self, base, getattr(func, "_op", func)))
        return sig

    # -- steps ------------------------------------------------------------------
    def boundary(self, w: Writer, *, manual: bool) -> None:
        """End the current step (from the previous boundary or the start)."""
        if self.steps == "manual" and not manual or self.steps == "optimizer" and manual:
            return
        if manual:
            self.manual = True
        elif self.manual:  # steps="auto": rec.step() was called, it rules
            return
        name = self.intern("step")
        with self.lock:
            n, t0, t1 = self.step_number, self.step_begin, _now()
            self.step_number, self.step_begin = n + 1, t1
        self.span(w, _STEP, name, 0, t0, n, t1)
        if self.on_step is not None:
            self.on_step(t1)
        if self.at_boundary:
            self.at_boundary = [f for f in self.at_boundary if not f()]
        if self.calibrate_every_ns and t1 >= self._next_calibration:
            self.calibrate(t1)
        if self.lost is not None:  # a simulated host: this was the recorder's time
            self.lost(_now() - t1)

    def calibrate(self, t1: int | None = None) -> None:
        """Price a real mix of ops against the start-up model again
        (``calibrator``, a ``selfcost.Program``; a few ms), between two steps
        at most every ``calibrate_every_ns``, or now (``t1`` None, at stop): what
        recording costs depends on the ops between the recorder's code and
        on the machine's load, which change over a run. The next step
        begins after it; its time is in ``calibrations``, which
        compensation removes, with the ratio it measured, and a USER span
        "cutimeline calibration" shows where it ran (not the one at stop,
        after the recording's end)."""
        with self.lock:
            if self.calibrator is None or t1 is not None and (
                    t1 < self._next_calibration or self.off):
                return
            self._next_calibration = 2 ** 62  # one thread at a time
        t0 = _now()
        self.paused = True  # nor do this recording's hooks
        try:
            # no mode of the user's (dispatch or __torch_function__) sees the probe
            with _disable_current_modes(), torch._C.DisableTorchFunction():
                ratio = self.calibrator(2 if t1 is not None else 4)
        except Exception as exc:  # the user's program goes on, uncalibrated
            self.calibrator = None
            warnings.warn(f"cutimeline could not measure its own cost on a training "
                          f"step ({type(exc).__name__}: {exc}); overhead compensation "
                          f"uses the start-up figures only.", RuntimeWarning, stacklevel=3)
            return
        finally:
            self.paused = False
        t2 = _now()
        if t1 is not None:  # at stop it is past the recording's end
            w = self.writer()
            self.span(w, _USER_SPAN, self.intern("cutimeline calibration"),
                      len(w.users), t0, NONE, t2)
        with self.lock:
            self.calibrations.append((t0, t2, max(0, round(1000 * ratio))))
            self._next_calibration = t2 + self.calibrate_every_ns
            if t1 is not None and self.step_begin == t1:
                self.step_begin = t2

    # -- device work --------------------------------------------------------------
    def owned(self, w: Writer, dev: Any) -> bool:
        return dev is not None and not (w.data and dev.type == "cpu") and \
            self.device.owns(dev)

    def launch(self, w: Writer, func: Any, args: tuple, kwargs: dict, seq: int,
               t0: int, sig: int, gid: int, flags: int, sync: bool) -> Any:
        """Dispatch an op that launches device work, between two events."""
        d = self.device
        stream, kind = d.current_stream(), _OP_ROW
        if flags & _COLLECTIVE and self.comm is not None:
            # a device that runs collectives on a stream of their own (NCCL's;
            # SimGPU: devices/sim/comm.py): the row is the collective kernel
            stream, kind = self.comm(stream), _COLL_ROW
        if self.mark is not None:
            self.mark(t0)
        b = d.begin(stream, seq)
        if b < 0:  # the device records no event now (a stream captures a graph)
            flags |= _CAPTURED
        try:  # a simulator may answer for tensors without values (its run)
            out = func(*args, **kwargs) if self.run is None else self.run(func, args, kwargs)
        except BaseException:
            w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
            raise
        if sync and b >= 0:
            d.wait(stream)
            t1 = _now()
            name = self.sig_table[sig][0]
            d.note_sync(self.strings.values[name], stream, seq, t0, t1)
            self.span(w, _SYNC_SPAN, name, 0, t0, NONE, t1, source=False)
            flags |= _SYNC
            if not self.stack:  # stack=True noted it already
                self.note_source(seq)
        else:
            t1 = _now()
        if b >= 0:
            e = d.end(stream, seq, func, args, kwargs, out)
            w.launches.append((seq, stream, b, e, kind))
            flags |= _LAUNCH
        w.ops.append((seq, t0, t1, sig, w.ctx, gid, flags))
        if self.memlog is not None:
            self.memlog.read(seq, t1, func, args, kwargs, out)
        return out

    def measured(self, w: Writer, func: Any, args: tuple, kwargs: dict, seq: int,
                 t0: int, sig: int, gid: int, flags: int, rule: int, dev: Any,
                 call: Any = None) -> Any:
        """An op dispatched as the op stream would, and measured: its FLOPs
        (rule RULE_FLOPS, ``flops.py``), or the memory an allocation without a
        kernel took on the device (RULE_ALLOC, ``memory.py``). ``call``: what
        runs it on the host (the signature's C++ callable; ``func`` if None)."""
        if rule == RULE_FLOPS and self.device is not None and dev is not None and \
                not flags & (_VIEW | _TRUNCATED) and self.owned(w, dev):
            out = self.launch(w, func, args, kwargs, seq, t0, sig, gid, flags, False)
        else:
            try:
                out = (call or func)(*args, **kwargs)
            except BaseException:
                w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
                raise
            t1 = _now()
            w.ops.append((seq, t0, t1, sig, w.ctx, gid, flags))
            if rule == RULE_ALLOC and not flags & _TRUNCATED and self.owned(w, dev):
                self.memlog.read(seq, t1, func, args, kwargs, out)
        if rule == RULE_FLOPS:
            self.flopper.note(seq, sig, func, args, kwargs, out)
        return out

    def collective(self, w: Writer, func: Any, args: tuple, kwargs: dict, seq: int,
                   t0: int, sig: int, gid: int, flags: int, dev: Any) -> Any:
        """A torch.distributed op: dispatched like any other, then noted in
        ``self.collectives`` (process group, number, completion; collectives.py)."""
        if self.device is not None and self.owned(w, dev) and not flags & _VIEW:
            out = self.launch(w, func, args, kwargs, seq, t0, sig, gid, flags, False)
        else:
            try:
                out = func(*args, **kwargs)
            finally:
                w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
        if self.collectives is None:
            with self.lock:
                if self.collectives is None:
                    self.collectives = CollectiveLog()
        self.collectives.note(func, args, kwargs, out, seq, dev)
        if not self.stack:
            self.note_source(seq)
        return out

    def launch_ruled(self, w: Writer, func: Any, args: tuple, kwargs: dict,
                     seq: int, t0: int, sig: int, gid: int, flags: int, rule: int,
                     dev: Any) -> Any:
        """An op that may block the host: find which side is the device
        (``signatures.blocking``)."""
        dev, sync = blocking(self, w, rule, args, kwargs, dev)
        if dev is None:
            try:
                out = func(*args, **kwargs)
            finally:
                w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
            return out
        return self.launch(w, func, args, kwargs, seq, t0, sig, gid, flags, sync)

    def launch_graph(self, replay: Callable, graph: Any, args: tuple, kwargs: dict) -> Any:
        """A CUDA graph replay: one gpu row of kind GRAPH between events."""
        w, d = self.writer(), self.device
        seq, t0 = next(self.count), _now()
        sig = self.signature(("cudagraph::replay",), Named("cudagraph::replay"), None)[0]
        stream = d.current_stream()
        b = d.begin(stream, seq)
        try:
            out = replay(graph, *args, **kwargs)
        except BaseException:
            w.ops.append((seq, t0, _now(), sig, w.ctx, NONE, 0))
            raise
        t1 = _now()
        flags = _CAPTURED  # replayed inside another capture: no events
        if b >= 0:
            e = d.end(stream, seq, None, (), {}, None)
            w.launches.append((seq, stream, b, e, int(GpuKind.GRAPH)))
            flags = _LAUNCH
        w.ops.append((seq, t0, t1, sig, w.ctx, NONE, flags))
        return out

    # -- spans and the cap ----------------------------------------------------------
    def span(self, w: Writer, kind: int, name: int, depth: int, begin_ns: int,
             number: int = NONE, end_ns: int | None = None, source: bool = True) -> None:
        """Append a span of ``w``'s thread ending now (or at ``end_ns``).
        Spans count against ``max_ops`` as ops do: the one past it cuts
        the recording (``truncate``) and is not kept. A span that began
        before the cut is kept when it ends (only those open at the cut:
        bounded by nesting), none that begins after it. A DATA or SYNC
        span notes its source unless ``source`` is False (its op's has)."""
        if end_ns is None:
            end_ns = _now()
        cut = self.cut_ns
        if cut is not None and begin_ns >= cut:
            return
        if next(self.span_count) >= self.max_ops and cut is None:
            self.truncate("spans")
            return  # the span past the cap is not kept: at most max_ops before the cut
        w.spans.append((kind, name, w.thread, depth, number, begin_ns, end_ns))
        if source and (kind == _DATA or kind == _SYNC_SPAN):
            self.note_source(NONE, w.thread, len(w.spans) - 1)

    def note_source(self, seq: int, thread: int = NONE, span: int = NONE) -> None:
        """Note where the user's code is now (``sources.py``), for op
        ``seq`` or the ``span``-th span of writer ``thread``."""
        src = self.where.find()
        if src is not None:
            self.sourced.append((seq, thread, span, *src))

    def cut_meta(self) -> dict[str, Any]:
        """Meta on the cut: which reached max_ops first ("ops" or "spans")."""
        return {} if self.cut_ns is None else {"truncated_by": self.cut_by,
                                               "max_ops": self.max_ops}

    def truncate(self, what: str = "ops") -> None:
        """Cut the recording now: ``max_ops`` ``what`` (ops or spans) are
        recorded. Ops pass through unrecorded from here on and no span
        that begins later is kept (``span``), so the Timeline ends at one
        instant for everything; it is marked truncated. One warning."""
        with self.lock:
            if self.cut_ns is not None:
                return
            self.cut_ns, self.off, self.cut_by = _now(), True, what
        warnings.warn(f"cutimeline recorded max_ops={self.max_ops:,} {what} (max_bytes="
                      f"{self.max_ops * OP_ROW_BYTES:,}, {OP_ROW_BYTES} B an op) and stops "
                      f"recording here (the program goes on); the Timeline is "
                      f"marked truncated. Pass a larger max_bytes to record more.",
                      RuntimeWarning, stacklevel=3)


class Writer:
    """What one thread appends while recording. Only its own thread writes
    here, except the autograd engine's device threads, which reach their
    caller's mode; every record is one atomic ``list.append``. ``ops``
    rows move into ``chunks`` from the front (``opstream.OpRows``, the one
    consumer that deletes from it)."""

    __slots__ = ("thread", "ident", "name", "ops", "chunks", "launches", "spans", "ctx",
                 "stack", "data", "waited", "users", "optimizers")

    def __init__(self, thread: int):
        self.thread, self.ident = thread, threading.get_ident()
        self.name = threading.current_thread().name
        self.ops: list[tuple] = []       # (seq, t0, t1, sig, ctx, grad_fn, flags)
        self.chunks: list = []           # ops converted from the front (opstream.OP_ROW)
        self.launches: list[tuple] = []  # (seq, stream, begin_event, end_event, gpu kind)
        self.spans: list[tuple] = []     # (kind, name, thread, depth, number, begin, end)
        self.ctx = 0                     # context id of the innermost module
        self.stack: list[tuple] = []     # open modules: (module, path id, begin_ns, ctx before)
        self.data = 0                    # > 0 inside a DataLoader fetch
        self.waited = NONE               # ns the fetch ending waited for its batch
        self.users: list[tuple] = []     # open user ranges: (session, name id, begin_ns, key)
        self.optimizers: list[int] = []  # begin_ns of open optimizer steps


class _Local(threading.local):
    """Each thread's Writer, made on its first access. threading.local keeps
    its __init__ arguments for every new thread: a weak reference, so that
    the session and its local do not keep each other alive."""

    def __init__(self, session: Any):
        self.w = session().new_writer()
