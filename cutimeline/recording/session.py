"""The session: the state of one recording, shared by its threads' modes and hooks.

One ``Session`` per recording holds the caches (op signatures, module
contexts, autograd node names, the strings) and the per-thread ``Writer``s,
each made on its thread's first access; only cache misses take its lock. It
keeps the cap: ops and spans each count against ``max_ops``, and the first
past it cuts the whole recording (``truncate``). It ends steps, prices the
recorder again between them (``calibrate``), and dispatches the ops that
launch device work between two events (``launch``), those that may block
the host (``launch_ruled``), collectives (``collective``) and CUDA graph
replays (``launch_graph``). Launching ops append ``(seq, stream,
begin_event, end_event, gpu kind)`` to ``Writer.launches``; ``recorder.py``
turns the writers and the device's ``Harvest`` into a Timeline at stop.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from time import perf_counter_ns as _now
from typing import Any, Callable

import torch

from ..devices.device import Device
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.table import Strings
from .opstream import Mode
from .signatures import (_ALWAYS, _COLL, _COPY, _DIST_NAMESPACES, _NO_WORK, _REPEAT, _RULES,
                         _TO_COPY, _WAIT, _arg_kinds, _Named, _shape)

__all__ = ["Writer", "Session"]

_VIEW, _SYNC, _LAUNCH = int(OpFlag.VIEW), int(OpFlag.SYNC), int(OpFlag.LAUNCH)
_CAPTURED, _COLLECTIVE = int(OpFlag.CAPTURED), int(OpFlag.COLLECTIVE)
_SYNC_SPAN, _STEP, _USER_SPAN = int(SpanKind.SYNC), int(SpanKind.STEP), int(SpanKind.USER)
_Tensor = torch.Tensor


class Writer:
    """What one thread appends while recording. Only its own thread writes
    here, except the autograd engine's device threads, which reach their
    caller's mode; every record is one atomic ``list.append``."""

    __slots__ = ("thread", "ident", "name", "ops", "launches", "spans", "ctx",
                 "stack", "data", "users", "optimizers")

    def __init__(self, thread: int):
        self.thread, self.ident = thread, threading.get_ident()
        self.name = threading.current_thread().name
        self.ops: list[tuple] = []       # (seq, t0, t1, sig, ctx, grad_fn, flags)
        self.launches: list[tuple] = []  # (seq, stream, begin_event, end_event, gpu kind)
        self.spans: list[tuple] = []     # (kind, name, thread, depth, number, begin, end)
        self.ctx = 0                     # context id of the innermost module
        self.stack: list[tuple] = []     # open modules: (module, path id, begin_ns, ctx before)
        self.data = 0                    # > 0 inside a DataLoader fetch
        self.users: list[tuple] = []     # open user spans: (session, name id, begin_ns)
        self.optimizers: list[int] = []  # begin_ns of open optimizer steps


class _Local(threading.local):
    """Each thread's Writer, made on its first access. threading.local keeps
    its __init__ arguments for every new thread: a weak reference, so that
    the session and its local do not keep each other alive."""

    def __init__(self, session: Any):
        self.w = session().new_writer()


class Session:
    """The state of one recording, shared by its threads' modes and hooks."""

    def __init__(self, device: Device | None, *, max_ops: int, steps: str,
                 stack: bool = False, memory: bool = False):
        self.device, self.max_ops, self.steps = device, max_ops, steps
        self.stack, self.memory = stack, memory  # record(stack=, memory=)
        # a simulator's run() answers for tensors that have no values (simhost.py)
        self.run: Callable | None = getattr(device, "run", None)
        # and charges a launch's dispatch from the recorder's first look at it
        self.mark: Callable | None = getattr(device, "mark_dispatch", None)
        self.off = False  # stopped, or cut at max_ops: the modes pass ops through
        self.cut_ns, self.cut_by = None, ""  # when max_ops cut the recording, by what
        self.span_count = itertools.count()  # spans count against max_ops too
        self.paused = False  # True while calibrate() runs: the hooks do nothing
        self.backward = 0  # backward passes running (hooks.py counts them)
        self.count = itertools.count()
        self.lock = threading.Lock()  # taken on cache misses only
        self.strings = Strings()
        self.sigs: dict[tuple, tuple] = {}  # key -> (sig, flags, rule, callable)
        self.sig_table: list[tuple[int, int, int]] = []    # (name, shapes, device)
        self.sig_args: list[tuple[int, int, int, int]] = []  # argument kinds: _arg_kinds
        self.funcs: list[Any] = []; self.nodes: dict[type, int] = {}  # autograd node type -> name
        self.ctxs: dict[tuple[int, int], int] = {(NONE, NONE): 0}
        self.ctx_table: list[tuple[int, int]] = [(NONE, NONE)]  # (module, depth)
        self.writers: list[Writer] = []
        self.local = _Local(weakref.ref(self))
        self.step_number, self.step_begin, self.manual = 0, _now(), False
        self.collectives = None  # collectives.CollectiveLog, made at the first collective
        self.graphs = 0  # Inductor graphs seen (their ops are named by this order)
        # called at every step boundary until each returns True (hooks.py:
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
        return Mode(self, w)

    def intern(self, s: str) -> int:
        i = self.strings.ids.get(s)
        if i is None:
            with self.lock:
                i = self.strings.intern(s)
        return i

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

    def signature(self, key: tuple, func: Any, dev: Any, args: tuple = (),
                  kwargs: dict | None = None, shapes: str | None = None,
                  ) -> tuple[int, int, int, Any]:
        """Intern the signature of an op: its name, tensor shapes (from the
        key unless given), device; and the kinds of its arguments, which its
        recording cost depends on."""
        name = func.name() if hasattr(func, "name") else str(func)
        base = name.split(".")[0]
        flags = _VIEW if (getattr(func, "is_view", False) or base in _NO_WORK
                          or getattr(func, "namespace", "") == "profiler") else 0
        if shapes is None:
            shapes = ", ".join(_shape(k) for k in key[1:-1])  # the last is the device
        col = dev.index if dev is not None and dev.type == "cuda" and \
            dev.index is not None else NONE
        rule = _RULES.get(base, 0)
        kinds = _arg_kinds(args, kwargs)
        if getattr(func, "namespace", "") in _DIST_NAMESPACES:
            from .collectives import OPS, WAIT
            if base in OPS:
                rule = _WAIT if OPS[base][0] == WAIT else _COLL
                flags |= _COLLECTIVE if rule == _COLL else 0
        with self.lock:
            sig = self.sigs.get(key)
            if sig is None:
                self.sig_table.append((self.strings.intern(name),
                                       self.strings.intern(shapes), col))
                self.funcs.append(func)  # keeps id(func) in the key unique
                self.sig_args.append(kinds)
                # func._op: the OpOverload's C++ callable, one Python frame less
                sig = self.sigs[key] = (len(self.sig_table) - 1, flags, rule,
                                        getattr(func, "_op", func))
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
        if self.at_boundary:
            self.at_boundary = [f for f in self.at_boundary if not f()]
        if self.calibrate_every_ns and t1 >= self._next_calibration:
            self.calibrate(t1)

    def calibrate(self, t1: int | None = None) -> None:
        """Price a real mix of ops against the start-up model again
        (``calibrator``; a few ms), between two steps at most every
        ``calibrate_every_ns``, or now (``t1`` None, at stop): what
        recording costs depends on the ops between the recorder's code and
        on the machine's load, which change over a run. The next step
        begins after it; its time is in ``calibrations``, which
        compensation removes, with the ratio it measured, and a USER span
        "cutimeline calibration" shows where it ran (not the one at stop,
        after the recording's end)."""
        from torch.utils._python_dispatch import _disable_current_modes
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
        stream = d.current_stream()
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
            self.span(w, _SYNC_SPAN, name, 0, t0, NONE, t1)
            flags |= _SYNC
        else:
            t1 = _now()
        if b >= 0:
            e = d.end(stream, seq, func, args, kwargs, out)
            w.launches.append((seq, stream, b, e, int(GpuKind.OP)))
            flags |= _LAUNCH
        w.ops.append((seq, t0, t1, sig, w.ctx, gid, flags))
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
            from .collectives import CollectiveLog
            with self.lock:
                if self.collectives is None:
                    self.collectives = CollectiveLog()
        self.collectives.note(func, args, kwargs, out, seq, dev)
        return out

    def launch_ruled(self, w: Writer, func: Any, args: tuple, kwargs: dict,
                     seq: int, t0: int, sig: int, gid: int, flags: int, rule: int,
                     dev: Any) -> Any:
        """An op that may block the host: find which side is the device."""
        sync = False
        if rule == _TO_COPY or rule == _COPY:
            if rule == _TO_COPY:
                src, dst = args[0].device, kwargs.get("device") or args[0].device
                nb = kwargs.get("non_blocking", False)
                pinned = nb  # _to_copy pins a non-blocking device→host output
            else:
                dst, src = args[0].device, args[1].device
                nb = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
                pinned = nb and dst.type == "cpu" and _pinned(args[0])
            if self.owned(w, src):
                dev = src
                sync = dst.type == "cpu" and not self.owned(w, dst) and not pinned
            elif self.owned(w, dst):
                dev = dst
                sync = src.type == "cpu" and not nb
            else:
                dev = None
        elif self.owned(w, dev):
            if rule == _ALWAYS:
                sync = True
            elif rule == _REPEAT:
                sync = kwargs.get("output_size") is None
            else:  # boolean masks make indexing call nonzero
                sync = any(isinstance(i, _Tensor) and i.dtype in (torch.bool, torch.uint8)
                           for i in (args[1] if len(args) > 1 else ()) or ())
        else:
            dev = None
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
        sig = self.signature(("cudagraph::replay",), _Named("cudagraph::replay"), None)[0]
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
             number: int = NONE, end_ns: int | None = None) -> None:
        """Append a span of ``w``'s thread ending now (or at ``end_ns``).
        Spans count against ``max_ops`` as ops do: the one past it cuts
        the recording (``truncate``) and is not kept. A span that began
        before the cut is kept when it ends (only those open at the cut:
        bounded by nesting), none that begins after it."""
        if end_ns is None:
            end_ns = _now()
        cut = self.cut_ns
        if cut is not None and begin_ns >= cut:
            return
        if next(self.span_count) >= self.max_ops and cut is None:
            self.truncate("spans")
            return  # the span past the cap is not kept: at most max_ops before the cut
        w.spans.append((kind, name, w.thread, depth, number, begin_ns, end_ns))

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
        warnings.warn(f"cutimeline recorded max_ops={self.max_ops:,} {what} and stops "
                      f"recording here (the program goes on); the Timeline is "
                      f"marked truncated. Pass a larger max_ops to record more.",
                      RuntimeWarning, stacklevel=3)


def _pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # no accelerator to pin for
        return False
