"""The recorder: every aten op the CPU dispatches, and the device work it
launches, collected into a ``Timeline``.

    with ctl.record(device="auto") as rec:
        train()
    tl = rec.timeline                # aligned at stop when it has device events

A private ``TorchDispatchMode`` (``opstream.py``) sees each op below
autograd and below the ``CompositeImplicitAutograd`` decompositions
(``aten::linear`` arrives as ``aten::t`` and ``aten::addmm``), not the ops
kernels call inside: torch.profiler's aten events that do not decompose
there and have none such above them, plus ``profiler::_record_function_*``
ops (also USER spans, ``hooks/ranges.py``). An active mode makes autograd
save outputs as ``aten::detach`` aliases and composite code pick
out-of-place variants (``aten::add`` for ``add_``);
``tests/recording/test_recorder.py`` checks this on three models.

An op on a device the recorder's ``Device`` owns (one per recording;
ops on other GPUs get host rows), not metadata-only (flag VIEW) and not a
CPU op in a DataLoader fetch, is bracketed by BEGIN/END events on its
stream (flag LAUNCH) and gets one gpu row. Also seen:

* backward ops with their autograd node in ``grad_fn`` (on CUDA, on the
  engine's device threads); forward ops with their innermost module path
  and depth;
* threads started while recording; not those running before start, nor
  forked processes such as DataLoader workers (``forks.py``: a fetch is
  one DATA span in the parent);
* ``torch.compile``: compiled code stays compiled; each Inductor graph
  call is an op ``inductor::graph_<n>`` with COMPILED gpu rows
  (``hooks/compiled.py``); no host spans inside;
* CUDA graphs: nothing while capturing (flag CAPTURED), each replay one
  GRAPH gpu row and an ops row ``cudagraph::replay``;
* host-blocking ops (flag SYNC, a syncs row, a SYNC span), on the owned
  device only: ``signatures.RULES`` (``.item()``, ``nonzero``,
  boolean-mask indexing, ...), copies between host and device that block,
  and CUDA's ``synchronize`` of the device, a Stream or an Event;
* steps: a STEP span runs from the previous boundary (or the start) to
  the next; ops after the last belong to no step.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from time import perf_counter_ns as _now
from typing import Any, Callable

import torch

from ..devices.device import Device
from ..errors import CutimelineError
from ..timeline.timeline import Timeline
from .assembly import aligned, assemble, meta_at_stop
from .control.forks import step_aside
from .control.lifecycle import RankGuard
from .control.schedule import ScheduledRecorder
from .devicespec import recording_device
from .hooks.installer import Hooks, is_compiling
from .options import MAX_BYTES, checked, checked_schedule
from .hooks.ranges import close_range, open_range
from .ranks import rank_meta
from .selfcost import calibrator, measure, measure_entry, refine
from .session import Session

__all__ = ["record", "Recorder", "span"]

# -- the public surface ------------------------------------------------------------

_ACTIVE: Session | None = None  # the recording in progress, for span()
_RECORDER: Recorder | None = None  # its Recorder, for _forked
_ACTIVE_LOCK = threading.Lock()
# how often (at most) a real mix of ops is priced again between steps
# (Session.calibrate; 0: only at stop). Off by default: each run is a few ms of
# the recorder's host work in the user's loop, GPU idle time analyze would read
# as dispatch (it flipped the demo's verdicts); the one at stop touches nothing.
CALIBRATE_EVERY_NS = 0


def record(*, device: str | Device = "auto", max_bytes: int = MAX_BYTES,
           max_ops: int | None = None, modules: bool = True, threads: bool = True,
           steps: str = "auto",
           measure: bool = True, timing: str = "events",
           out_dir: str | os.PathLike | None = None, stack: bool = False,
           memory: bool = False, schedule: Any = None,
           on_trace_ready: Callable[[Timeline], Any] | None = None) -> "Recorder":
    """A recorder of the aten op stream and the device work it launches.

    ``device``: "auto" (CUDA when available, else "cpu"), "cuda", "cuda:N",
    "cpu" (host rows only) or a ``Device`` such as ``ctl.SimGPU(...)``.
    ``max_bytes``: the op rows the recording may hold, 40 B an op
    (``opstream.OpRows``; 400 MB, 10 M ops, by default): past ``max_bytes // 40``
    ops, or as many spans (steps and ``ctl.span`` included), one warning is
    given and the recording is cut there (``Timeline.truncated``): no op
    after it is recorded, nor any span that begins after it; the program
    goes on. ``max_ops``: the same cap in ops (``max_bytes = 40 * max_ops``),
    the older spelling; give one of the two. Spans and device launches are
    held besides, about 200 B each. ``modules``:
    module paths and MODULE/FORWARD spans (global module hooks). ``threads``:
    record threads started while recording. ``steps``: what ends a STEP span
    — "optimizer" (every ``optimizer.step()``), "manual" (``rec.step()``
    only) or "auto" (optimizer steps until ``rec.step()`` is first called,
    then only ``rec.step()``). ``measure``: measure the recorder's own cost
    per op at start (a few ms; ``selfcost.py``) into meta:
    ``overhead_model`` (ns per op and per kind of argument, per module
    call), ``overhead_ns_by_signature`` (each recorded op name and shapes
    priced by it) and ``overhead_ns_per_op`` (their mean), which
    ``ctl.analyze`` replays away (``compensation.py``). On a simulated GPU
    the recorder's time leaves the simulated host as it is spent
    (``opstream.ExactMode``; meta ``recorder_left``: the prices
    ``selfcost.measure_entry`` measured for what no clock inside sees),
    and there is nothing to replay away.
    ``timing``: how the CUDA device record() makes times work — "events"
    (CUDA events), "stamps" (globaltimer stamp kernels, needs CuPy) or
    "both", when ``rec.timelines`` holds a Timeline for each (see
    ``CudaDevice``); other devices take only "events" ("auto" without
    CUDA records no device, so there it is moot). ``out_dir``: under
    torch.distributed, write this rank's Timeline to ``out_dir/rank-<r>.ctl``
    at stop, also when the recorded block raises, and marked partial on
    Ctrl-C, SIGTERM or exit (``lifecycle.py``); until then the file is the
    recording's journal, so a kill (SIGKILL, a crash) leaves all but its
    last moments (``flusher.py``); ``ctl.merge(out_dir)``
    joins the ranks (see ``ranks.py``). ``stack``: the source line of every
    op, not only of syncs (``sources``). ``memory``: device memory per op.
    ``schedule``: ``ctl.schedule(...)`` (or torch.profiler's): record only
    its windows, each handed to ``on_trace_ready`` (``schedule.py``).

    With ``CUTIMELINE_DISABLE=1`` in the environment the recorder does
    nothing and its timeline is empty.
    """
    _not_compiling("ctl.record()")
    disabled = os.environ.get("CUTIMELINE_DISABLE", "").strip() not in ("", "0")
    options = checked(dict(max_bytes=max_bytes, max_ops=max_ops, modules=modules,
                           threads=threads, steps=steps, measure=measure, timing=timing,
                           out_dir=out_dir, stack=stack, memory=memory), disabled=disabled)
    plan = checked_schedule(schedule, on_trace_ready, options)
    dev = recording_device(device, resolve=not disabled, timing=timing)
    if plan is not None:
        return ScheduledRecorder(lambda: Recorder(dev, disabled=disabled, **options), plan,
                                 on_trace_ready, steps=steps, disabled=disabled)
    return Recorder(dev, disabled=disabled, **options)


def _not_compiling(what: str) -> None:
    """Refuse to start inside a function torch.compile compiles: dynamo
    would trace the recorder's own code (numpy included) into graphs and
    fail inside it. Traced, ``is_compiling()`` says so; run eagerly after a
    graph break, the frame evaluation callback is still dynamo's."""
    frame_callback = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    frame_callback = getattr(frame_callback, "get_eval_frame_callback", None)
    if is_compiling() or (frame_callback is not None
                          and frame_callback() not in (None, False)):
        raise CutimelineError(
            f"{what} was reached inside a function torch.compile is compiling; "
            f"record around the compiled call instead: `with ctl.record(): "
            f"compiled_fn(x)` (the recorder sees what compiled code runs).")


class Recorder:
    """One recording: ``start()``/``stop()`` or ``with``; ``timeline`` after
    stop. Made by ``record()``."""

    def __init__(self, device: Device | None, *, disabled: bool, **options: Any):
        self.device, self.disabled, self.options = device, disabled, options
        self._state = "new"
        # Session, Mode and Hooks while recording; the Timeline after
        self._session = self._mode = self._hooks = self._timeline = None
        self._timelines: dict[str, Timeline] = {}
        self._meta: dict[str, Any] = {}
        self._error: BaseException | None = None  # what the recorded block raised
        self._forked = False  # a forked child's copy: it stepped aside (forks.py)
        self._guard: Any = None  # with out_dir: SIGTERM and exit (lifecycle.py)
        # a window's (stepwatch.py): its first step's number, steps="auto" ruled
        # by rec.step(), and the meta of an earlier window's self-cost probe
        self._first_step, self._manual, self._reuse = 0, False, None

    def __repr__(self) -> str:
        dev = "cpu" if self.device is None else getattr(self.device, "name", self.device)
        return f"<cutimeline.Recorder {self._state} device={dev}>"

    def __enter__(self) -> "Recorder":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            self.stop()
            return False
        self._error = exc
        try:  # the user's exception must come out unchanged
            self.stop()
        except Exception as stop_error:
            warnings.warn(f"cutimeline could not stop cleanly after an exception "
                          f"in the recorded block: {stop_error}", RuntimeWarning, 2)
        return False

    def start(self) -> "Recorder":
        """Begin recording in the calling thread."""
        global _ACTIVE, _RECORDER
        _not_compiling("Starting a recorder")
        if self._state == "recording":
            raise CutimelineError("This recorder is already recording; call stop() "
                                  "before starting it again.")
        if self._state == "stopped":
            raise CutimelineError("This recorder has already recorded; make a new "
                                  "one with ctl.record() to record again.")
        if self.disabled:
            self._state = "recording"
            return self
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                raise CutimelineError(
                    "Another cutimeline recorder is already recording, and "
                    "recordings do not nest; stop it first.")
            o = self.options
            if o.get("out_dir"):  # rank, world size, host (ranks.py)
                self._meta = rank_meta()
            r = self._reuse if o["measure"] else None
            # a simulator's host: the recorder's time leaves it as it is spent
            # (opstream.ExactMode), at measured prices for what no clock sees
            exact = self.device is not None and self.device.keeps_host_clock()
            entry = None if not exact else dict(r["recorder_left"]) \
                if r and r.get("recorder_left") else measure_entry(o["modules"]) \
                if o["measure"] else {"entry_ns": 0, "module_entry_ns": 0, "probe_ns": 0}
            model = None if exact else dict(r["overhead_model"]) \
                if r and r.get("overhead_model") else measure(o["modules"]) \
                if o["measure"] else None
            per_launch = (lambda: r.get("overhead_ns_per_launch")) if r else \
                getattr(self.device, "measure_launch_ns", None)
            s = Session(self.device, max_ops=o["max_ops"], steps=o["steps"],
                        stack=o["stack"], memory=o["memory"])
            s.step_number, s.manual = self._first_step, self._manual
            if entry is not None:
                s.entry_ns, s.module_entry_ns = entry["entry_ns"], entry["module_entry_ns"]
            if model is not None:
                s.calibrate_every(CALIBRATE_EVERY_NS)
                s.calibrator = calibrator(model)
            self._meta = {
                **self._meta, "source": "record", "start_epoch_ns": time.time_ns(),
                "start_host_ns": _now(),
                # the cost of an op with one tensor; at stop, the mean over
                # the ops recorded (overhead_ns_by_signature prices each)
                "overhead_ns_per_op": None if model is None else model["op_ns"],
                "overhead_model": model,
                "overhead_ns_per_launch": per_launch() if o["measure"] and per_launch else None,
                **({} if entry is None else {"recorder_left": entry})}
            hooks = Hooks(s, modules=o["modules"], threads=o["threads"])
            if self.device is not None:
                self.device.start()
            # known before the hooks are: a fork from another thread steps aside
            self._session, self._hooks, _RECORDER = s, hooks, self
            try:
                hooks.install()
                self._mode = s.mode_for(s.writer())
                self._mode.__enter__()
            except BaseException:
                self._session = self._hooks = self._mode = _RECORDER = None
                hooks.remove()
                if self.device is not None:
                    self.device.harvest()
                raise
            self._thread = threading.get_ident()
            if threading.current_thread() is not threading.main_thread():
                _THREAD_END.guard = ThreadEnd(self)
            _ACTIVE = s
            self._state = "recording"
        if self.options.get("out_dir"):  # last: a SIGTERM finds the recording whole
            self._guard = RankGuard(self).install()
        return self

    def stop(self) -> "Recorder":
        """End the recording; ``timeline`` holds it (aligned if it has device
        events). Call it from the thread that called start(). In a process
        forked while recording it gives an empty Timeline with
        ``meta["forked"]``: the parent's holds the recording."""
        global _ACTIVE, _RECORDER
        if self._state != "recording":
            raise CutimelineError(
                "stop() was called on a recorder that is not recording" +
                ("; it has stopped already and rec.timeline holds its Timeline."
                 if self._state == "stopped" else
                 "; call start() first, or use it as `with ctl.record() as rec:`."))
        if self.disabled:
            self._state = "stopped"
            self._timeline = Timeline(meta={"source": "record", **(
                {"forked": True} if self._forked else {"disabled": True})})
            return self
        orphan = self._thread is None  # its thread ended (ThreadEnd)
        if not orphan and threading.get_ident() != self._thread:
            raise CutimelineError("stop() must be called from the thread that "
                                  "called start(); the recording goes on.")
        n = torch._C._len_torch_dispatch_stack()
        if not orphan and (not n or torch._C._get_dispatch_stack_at(n - 1) is not self._mode):
            raise CutimelineError(
                "stop() found another TorchDispatchMode entered inside the recording "
                "and still active; exit it first. The recording goes on.")
        s, guard = self._session, self._guard
        if guard is not None:  # Ctrl-C or SIGTERM now waits for the file
            guard.hold()
            guard.close_journal()  # its last rows, while they are there (flusher.py)
        s.off = True
        if not orphan and getattr(_THREAD_END, "guard", None) is not None:
            _THREAD_END.guard.rec = None
            del _THREAD_END.guard
        try:
            if not orphan:
                self._mode.__exit__(None, None, None)
            self._hooks.remove()
            # the closing pings first: the Timeline ends there, not after
            # the recorder's own measurements below
            harvest = self.device.harvest() if self.device is not None else None
            left = self._meta.get("recorder_left")
            if left and left.get("entry_ns") != s.entry_ns:  # ExactMode's price, in situ
                left = self._meta["recorder_left"] = {**left, "entry_ns": s.entry_ns,
                                                      "probe_entry_ns": left["entry_ns"]}
            if left is not None:  # Python's collections it gave back (gcpauses.py)
                self._meta["recorder_left"] = {**left, **self._hooks.gc_given}
            if self._meta.get("overhead_model"):  # after the last op: not timed
                refine(self._meta["overhead_model"])
                s.calibrate()  # at least one price of a real mix
            tl = assemble(s, harvest, {**meta_at_stop(s, harvest, self._meta, self.device,
                                                       self.options), **s.cut_meta()})
            self._timeline = aligned(tl)
            if guard is not None:  # this rank's file (ranks.py)
                self._timeline = guard.write(self._timeline, self._error, s.step_number)
            # timing="both": the same rows timed by the other clock's raw_ns
            self._timelines = {tl.meta.get("timing", "events"): self._timeline}
            for name, raw in (harvest.alternates if harvest else {}).items():
                res = {str(self.device.index): harvest.alternate_resolution_ns.get(name, 0)}
                self._timelines[name] = aligned(tl.replace(
                    events=tl.events.replace(raw_ns=raw),
                    meta={**tl.meta, "timing": name, "clock_resolution_ns": res}))
        finally:
            self._state = "stopped"
            with _ACTIVE_LOCK:
                _ACTIVE = _RECORDER = None
            # drop the session (modes left in other threads see it is off) and
            # free its buffers now, not when the last recorded thread ends
            self._session = self._mode = self._hooks = self._guard = None
            for w in s.writers:
                w.ops, w.chunks, w.launches, w.spans, w.users = [], [], [], [], []
            if guard is not None:  # handlers back; a held signal is delivered now
                guard.release()
        return self

    def step(self) -> None:
        """End the current step here (see ``steps`` in ``record``)."""
        if self._state != "recording":
            raise CutimelineError("rec.step() was called while the recorder is "
                                  "not recording; call it inside the `with` block.")
        if not self.disabled:
            self._session.boundary(self._session.writer(), manual=True)

    @property
    def timeline(self) -> Timeline:
        """The recorded Timeline (after stop)."""
        if self._timeline is None:
            raise CutimelineError("The timeline is ready after stop(); read "
                                  "rec.timeline after the `with ctl.record()` block.")
        return self._timeline

    @property
    def timelines(self) -> dict[str, Timeline]:
        """The recording as each clock timed it, by timing name: one entry,
        or with ``timing="both"`` "events" (``timeline``) and "stamps". They
        share ops, spans and syncs; events.raw_ns, clocks and gpu times differ."""
        tl = self.timeline
        return dict(self._timelines) or {tl.meta.get("timing", "events"): tl}

    def _step_aside(self) -> None:
        """In a process forked while recording: record nothing there
        (``forks.py``); ``step()`` does nothing and ``stop()`` gives an
        empty Timeline."""
        s, hooks, mode = self._session, self._hooks, self._mode
        self._session = self._hooks = self._mode = None
        self.disabled = self._forked = True
        step_aside(s, hooks, mode)


def _forked() -> None:
    """Called in the child of every ``os.fork`` (registered once, below)."""
    global _ACTIVE, _ACTIVE_LOCK, _RECORDER
    rec, _ACTIVE, _RECORDER = _RECORDER, None, None
    _ACTIVE_LOCK = threading.Lock()  # another thread may have held it at the fork
    if rec is not None:
        rec._step_aside()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)


class ThreadEnd:
    """Held in a ``threading.local`` by a thread other than the main one
    that started a recording; deleted as that thread ends, while it still
    runs Python. A thread that ends with the recorder's mode on its
    dispatch stack leaves it to a C++ thread-local destructor that takes
    the GIL after its Python state is gone; when the interpreter is
    shutting down by then, the thread is cancelled inside a ``noexcept``
    destructor and the process aborts ("terminate called without an
    active exception", exit 134). So the mode leaves the stack here, the
    recording stays open, and ``stop()`` may come from any thread."""

    __slots__ = ("rec",)

    def __init__(self, rec: Recorder):
        self.rec = rec

    def __del__(self) -> None:
        rec, self.rec = self.rec, None
        if rec is None or rec._state != "recording" or rec._thread != threading.get_ident():
            return
        n = torch._C._len_torch_dispatch_stack()
        if not n or torch._C._get_dispatch_stack_at(n - 1) is not rec._mode:
            return  # the user's own mode above it: theirs to leave
        rec._mode.__exit__(None, None, None)
        rec._thread = None
        warnings.warn("cutimeline: the thread that started the recording ended without "
                      "stopping it; its ops are recorded up to its end. Call rec.stop() "
                      "(from any thread) for the Timeline.", RuntimeWarning, 2)


_THREAD_END = threading.local()  # .guard: this thread's ThreadEnd


class span:
    """A USER span: ``with ctl.span("eval"):`` or ``@ctl.span("load")``.
    Costs one global read when no recorder is active."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise CutimelineError(f"span({name!r}) needs a name: a non-empty str.")
        self.name = name

    def __enter__(self) -> "span":
        s = _ACTIVE
        if s is not None and not is_compiling():  # ranges.py: among record_function's
            open_range(s, s.writer(), self.name, None)
        return self

    def __exit__(self, *exc: Any) -> bool:
        s = _ACTIVE
        if s is not None and not is_compiling():
            close_range(s, s.writer(), None)
        return False

    def __call__(self, fn: Callable) -> Callable:
        import functools

        @functools.wraps(fn)
        def spanned(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)
        return spanned
