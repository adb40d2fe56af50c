"""The op stream: the private ``TorchDispatchMode`` and what it writes.

One ``Session`` per recording holds the caches and the per-thread
``Writer``s; each recording thread has its own ``Mode`` (the dispatch-mode
stack is thread-local) that appends one tuple per op to its thread's writer:
``(seq, host_begin_ns, host_end_ns, signature, module context, grad_fn,
flags)``. ``seq`` comes from one ``itertools.count`` shared by all threads;
no lock is taken on the hot path, only on cache misses. The signature
(op name, tensor dtypes and shapes, device) is interned through a dict keyed
X
strings are built only on a miss. Launching ops append ``(seq, stream, begin_event,
end_event, gpu kind)`` to ``Writer.launches`` as well; ``recorder.py`` turns
the writers and the device's ``Harvest`` into a Timeline at stop.

Per op: two clock reads, the sequence number and the row append (≈ 1.7 µs
in place on a 2-core VM), and the signature key — each tensor's (dtype,
shape) in one ``operator.attrgetter`` call, the device once, a hash and a
dict lookup (≈ 1.9 µs); the op itself runs through the ``OpOverload``'s C++
callable, one Python frame less than a bare mode (see
``benchmarks/RESULTS.md``). ``selfcost.py`` measures what all this costs.
"""

from __future__ import annotations

import itertools
import operator
import threading
import warnings
import weakref
from time import perf_counter_ns as _now
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..devices.cuda import Device
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.table import Strings

__all__ = ["Writer", "Session", "Mode"]

_VIEW, _SYNC, _LAUNCH = int(OpFlag.VIEW), int(OpFlag.SYNC), int(OpFlag.LAUNCH)
_CAPTURED, _TRUNCATED = int(OpFlag.CAPTURED), int(OpFlag.TRUNCATED)
_COLLECTIVE = int(OpFlag.COLLECTIVE)
_SYNC_SPAN, _STEP, _USER_SPAN = int(SpanKind.SYNC), int(SpanKind.STEP), int(SpanKind.USER)
_Tensor = torch.Tensor
_node = torch._C._current_autograd_node
_ident = threading.get_ident
_dtype_shape = operator.attrgetter("dtype", "shape")
_NO_KWARGS: dict = {}  # never written: ops get their kwargs unpacked

# Ops that launch no device work besides the aliasing ones (func.is_view).
_NO_WORK = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::_unsafe_view", "aten::_reshape_alias",
    "aten::lift_fresh", "aten::resize_", "aten::set_", "aten::is_pinned"})
# Host-blocking rules by op name (overload stripped).
_ALWAYS, _REPEAT, _BOOL_INDEX, _TO_COPY, _COPY = 1, 2, 3, 4, 5
_RULES = {**dict.fromkeys((
    "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
    "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount"),
    _ALWAYS), "aten::repeat_interleave": _REPEAT, "aten::index": _BOOL_INDEX,
    "aten::index_put": _BOOL_INDEX, "aten::index_put_": _BOOL_INDEX,
    "aten::_index_put_impl_": _BOOL_INDEX, "aten::_to_copy": _TO_COPY,
    "aten::copy_": _COPY}
# torch.distributed ops (dist.OPS): collectives, and the waits of functional ones
_COLL, _WAIT = 6, 7
_DIST_NAMESPACES = ("c10d", "_c10d_functional")
_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
           torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8",
           torch.complex64: "c64", torch.complex128: "c128"}


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

    def span(self, kind: int, name: int, depth: int, begin_ns: int,
             number: int = NONE) -> None:
        self.spans.append((kind, name, self.thread, depth, number, begin_ns, _now()))


class _Local(threading.local):
    """Each thread's Writer, made on its first access. threading.local keeps
    its __init__ arguments for every new thread: a weak reference, so that
    the session and its local do not keep each other alive."""

    def __init__(self, session: Any):
        self.w = session().new_writer()


class Session:
    """The state of one recording, shared by its threads' modes and hooks."""

    def __init__(self, device: Device | None, *, max_ops: int, steps: str):
        self.device, self.max_ops, self.steps = device, max_ops, steps
        self.off = False
        self.paused = False  # True while calibrate() runs: the hooks do nothing
        self.backward = 0  # backward passes running (hooks.py counts them)
        self.count = itertools.count()
        self.lock = threading.Lock()  # taken on cache misses only
        self.strings = Strings()
        self.sigs: dict[tuple, tuple] = {}  # key -> (sig, flags, rule, callable)
        self.sig_table: list[tuple[int, int, int]] = []    # (name, shapes, device)
        self.sig_args: list[tuple[int, int, int, int]] = []  # argument kinds: _arg_kinds
        self.funcs: list[Any] = []
        self.nodes: dict[type, int] = {}                     # autograd node type -> name
        self.ctxs: dict[tuple[int, int], int] = {(NONE, NONE): 0}
        self.ctx_table: list[tuple[int, int]] = [(NONE, NONE)]  # (module, depth)
        self.writers: list[Writer] = []
        self.local = _Local(weakref.ref(self))
        self.step_number, self.step_begin, self.manual = 0, _now(), False
        self.collectives = None  # dist.CollectiveLog, made at the first collective
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
            from .ranks import OPS, WAIT
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
        w.spans.append((_STEP, name, w.thread, 0, n, t0, t1))
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
            with _disable_current_modes():  # no mode of the user's sees the probe
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
            w.spans.append((_USER_SPAN, self.intern("cutimeline calibration"), w.thread,
                            len(w.users), NONE, t0, t2))
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
        b = d.begin(stream, seq)
        if b < 0:  # the device records no event now (a stream captures a graph)
            flags |= _CAPTURED
        try:
            out = func(*args, **kwargs)
        except BaseException:
            w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
            raise
        if sync and b >= 0:
            d.wait(stream)
            t1 = _now()
            name = self.sig_table[sig][0]
            d.note_sync(self.strings.values[name], stream, seq, t0, t1)
            w.spans.append((_SYNC_SPAN, name, w.thread, 0, NONE, t0, t1))
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
        ``self.collectives`` (process group, number, completion; dist.py)."""
        if self.device is not None and self.owned(w, dev) and not flags & _VIEW:
            out = self.launch(w, func, args, kwargs, seq, t0, sig, gid, flags, False)
        else:
            try:
                out = func(*args, **kwargs)
            finally:
                w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
        if self.collectives is None:
            from .ranks import CollectiveLog
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

    def truncate(self) -> None:
        self.off = True
        warnings.warn(f"cutimeline recorded max_ops={self.max_ops:,} ops and stops "
                      f"recording ops here (the program goes on); the Timeline is "
                      f"marked truncated. Pass a larger max_ops to record more.",
                      RuntimeWarning, stacklevel=3)


class _Named:
    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


def _shape(k: Any) -> str:
    """``f32[2,3]`` from a key's (dtype, shape, device) triple."""
    dtype, shape = k[0], k[1]
    return f"{_DTYPES.get(dtype, str(dtype).replace('torch.', ''))}" \
        f"[{','.join(str(d) for d in shape)}]"


def _arg_kinds(args: tuple, kwargs: dict | None) -> tuple[int, int, int, int]:
    """(tensors, floats, lists, others) among an op's arguments: the
    dispatch mode's cost per op grows with each kind at its own rate (a
    Python float is wrapped into a tensor on every call, a list is
    converted element by element; see ``selfcost.measure_overhead``)."""
    n = [0, 0, 0, 0]
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, _Tensor):
            n[0] += 1
        elif type(a) is list or type(a) is tuple:
            n[0] += sum(isinstance(b, _Tensor) for b in a)
            n[2] += 1
        elif type(a) is float or type(a) is complex:
            n[1] += 1
        else:
            n[3] += 1
    return n[0], n[1], n[2], n[3]


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


def _pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # no accelerator to pin for
        return False


class Mode(TorchDispatchMode):
    """Records every op its thread dispatches into the session."""

    def __init__(self, session: Session, writer: Writer):
        super().__init__()
        self.s, self.w, self.ident = session, writer, writer.ident
        self.count, self.sigs = session.count, session.sigs  # one lookup less per op
        self.max_ops, self.host_only = session.max_ops, session.device is None
        # a CPU scalar first (torch.tensor(2.) / x) runs where the others are
        self.scalar_first = getattr(session.device, "kind", None) == "cuda"

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # let torch.compile compile; see the module docstring

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        s = self.s
        if s.off:
            return func(*args, **kwargs)
        t0 = _now()
        seq = next(self.count)
        # id(func): OpOverload hashes in Python; the signature keeps func alive.
        # Each tensor adds (dtype, shape), one C call; the device is read once,
        # from the first tensor (the signature holds no other tensor's device).
        key = [id(func)]
        for a in args:
            if isinstance(a, _Tensor):
                key.append(_dtype_shape(a))
            elif type(a) is list or type(a) is tuple:
                for b in a:
                    if isinstance(b, _Tensor):
                        key.append(_dtype_shape(b))
        if kwargs:
            for a in kwargs.values():
                if isinstance(a, _Tensor):
                    key.append(_dtype_shape(a))
        a = args[0] if args else None
        if isinstance(a, _Tensor):
            dev = a.device
            if self.scalar_first and dev.type == "cpu" and a.ndim == 0:
                dev = _work_device(args, kwargs, dev)
        else:
            dev = _first_device(args, kwargs)
        key.append(dev)
        key = tuple(key)
        try:
            sid, flags, rule, call = self.sigs.get(key) or s.signature(
                key, func, dev, args, kwargs)
        except TypeError:  # symbolic shapes do not hash: key them by text
            key = tuple((k[0], tuple(map(str, k[1]))) if type(k) is tuple else k
                        for k in key)
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
                return func(*args, **kwargs)
            s.truncate()
            flags |= _TRUNCATED
        if rule >= _COLL:
            return s.collective(w, func, args, kwargs, seq, t0, sid, gid, flags, dev)
        if self.host_only or flags & (_VIEW | _TRUNCATED) or dev is None:
            pass
        elif rule:
            return s.launch_ruled(w, func, args, kwargs, seq, t0, sid, gid, flags,
                                  rule, dev)
        elif not (w.data and dev.type == "cpu") and s.device.owns(dev):
            return s.launch(w, func, args, kwargs, seq, t0, sid, gid, flags, False)
        try:
            out = call(*args, **kwargs)
        except BaseException:
            w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
            raise
        w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
        return out
