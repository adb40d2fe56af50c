"""Scheduled recording: torch.profiler's ``schedule`` for cutimeline — record
only some steps of a long run, each window handed over as it ends.

    with ctl.record(schedule=ctl.schedule(skip_first=10, wait=1, warmup=1, active=3),
                    on_trace_ready=ctl.ready_writer("traces")) as rec:
        for batch in loader:
            train_step(batch)       # optimizer.step() ends a step; rec.step() too
    rec.timelines_ready             # every window's Timeline; rec.timeline the last

Steps are counted as ``record(steps=...)`` says, from 0 at start; step
``k``'s phase is ``schedule(k)``, as in torch.profiler: ``skip_first``
steps once, then cycles of ``wait``, ``warmup`` and ``active`` steps,
``repeat`` cycles (0: until stop). Outside warmup and active steps no
dispatch mode and no recorder hook is installed, only two global optimizer
hooks that count steps (``stepwatch.py``): nothing per op. A window is an
ordinary recording begun at the boundary before its first warmup step; at
the end of its last active step it is stopped, its warmup steps are cut
off, and its Timeline (meta ``steps`` [first, last active step], the STEP
spans numbered with the user's absolute step numbers, meta ``schedule``)
is appended to ``rec.timelines_ready`` and given to ``on_trace_ready``.
A window still active at stop (or when the block raises) is delivered too,
with the steps it holds; one still in warmup is dropped, as torch.profiler
does. The recorder's self-cost probe (``measure=True``) runs once, at the
first window's start; later windows reuse its model. ``torch.profiler.schedule(...)``
(any function of the step returning a ``ProfilerAction``) is taken too.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ...errors import CutimelineError
from ...timeline.timeline import Timeline
from .stepwatch import StepWatch, Window, cut

__all__ = ["schedule", "Schedule", "as_schedule", "ScheduledRecorder", "ready_writer",
           "NONE", "WARMUP", "RECORD", "SAVE"]

# a step's phase: torch.profiler.ProfilerAction's names in lower case
NONE, WARMUP, RECORD, SAVE = "none", "warmup", "record", "record_and_save"
_PHASES = (NONE, WARMUP, RECORD, SAVE)


@dataclass(frozen=True)
class Schedule:
    """Which steps to record (see ``schedule``); ``schedule(k)`` is step k's phase."""

    skip_first: int = 0
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 0
    skip_first_wait: int = 0

    def __call__(self, step: int) -> str:
        if step < self.skip_first:
            return NONE
        step -= self.skip_first
        if self.skip_first_wait:  # the first cycle begins without its wait
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat and step >= self.repeat * cycle:
            return NONE
        k = step % cycle
        if k < self.wait:
            return NONE
        if k < self.wait + self.warmup:
            return WARMUP
        return RECORD if k < cycle - 1 else SAVE


def schedule(*, skip_first: int = 0, wait: int = 1, warmup: int = 1, active: int = 3,
             repeat: int = 0, skip_first_wait: int = 0) -> Schedule:
    """torch.profiler.schedule's meaning, counted in the recorder's steps:
    skip ``skip_first`` steps once, then cycles of ``wait`` steps unrecorded,
    ``warmup`` steps recorded and cut off, ``active`` steps recorded and
    delivered; ``repeat`` cycles (0: until the recorder stops).
    ``skip_first_wait`` (non-zero): the first cycle has no wait."""
    given = dict(skip_first=skip_first, wait=wait, warmup=warmup, active=active,
                 repeat=repeat, skip_first_wait=skip_first_wait)
    for name, value in given.items():
        least = 1 if name == "active" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise CutimelineError(
                f"schedule({name}={value!r}) must be a whole number of steps "
                f"≥ {least}" + (" (a window records at least one step)."
                                if name == "active" else "."))
    return Schedule(**given)


class _Foreign:
    """A schedule given as a function step -> phase (torch.profiler.schedule's
    ``ProfilerAction``, or one of this module's phase names)."""

    def __init__(self, fn: Callable[[int], Any]):
        self.fn, self.warned = fn, False

    def __call__(self, step: int) -> str:
        answer = self.fn(step)
        phase = getattr(answer, "name", answer)
        phase = phase.lower() if isinstance(phase, str) else phase
        if phase in _PHASES:
            return phase
        if step == 0:  # at start: the user's loop has not begun
            raise CutimelineError(
                f"The schedule answered {answer!r} for step 0; a schedule must return "
                f"a torch.profiler.ProfilerAction (NONE, WARMUP, RECORD, "
                f"RECORD_AND_SAVE) or one of {', '.join(map(repr, _PHASES))}.")
        if not self.warned:
            self.warned = True
            warnings.warn(f"The schedule answered {answer!r} for step {step}, which is "
                          f"not a phase; cutimeline does not record that step.",
                          RuntimeWarning, stacklevel=2)
        return NONE


def as_schedule(obj: Any) -> Callable[[int], str]:
    """``record(schedule=obj)`` as a function step -> phase."""
    if isinstance(obj, Schedule):
        return obj
    if callable(obj):
        return _Foreign(obj)
    raise CutimelineError(f"record(schedule={obj!r}) is not a schedule; give "
                          f"ctl.schedule(wait=..., warmup=..., active=...) or "
                          f"torch.profiler.schedule(...).")


class ScheduledRecorder:
    """A recording of a schedule's windows, with the surface of ``Recorder``
    (``start``/``stop``/``step``/``with``); made by ``record(schedule=...)``."""

    def __init__(self, make: Callable[[], Any], plan: Callable[[int], str],
                 on_trace_ready: Callable[[Timeline], Any] | None, *, steps: str,
                 disabled: bool):
        self.schedule, self.on_trace_ready = plan, on_trace_ready
        self.disabled, self._make, self._steps = disabled, make, steps
        self.timelines_ready: list[Timeline] = []  # every window delivered, in order
        self._state = "new"
        self._watch: StepWatch | None = None
        self._window: Window | None = None
        self._active: int | None = None  # the window's first active step
        self._phase = NONE  # the phase of the step running now
        self._skipping = False  # a window that could not start: wait for its end
        self._reuse: dict | None = None  # the first window's self-cost model
        self._meta = {"schedule": asdict(plan) if isinstance(plan, Schedule)
                      else repr(getattr(plan, "fn", plan))}

    def __repr__(self) -> str:
        step = self._watch.number if self._watch is not None else 0
        return (f"<cutimeline.ScheduledRecorder {self._state} step={step} "
                f"phase={self._phase} windows={len(self.timelines_ready)}>")

    def __enter__(self) -> "ScheduledRecorder":
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc is None:
            self.stop()
            return False
        try:  # the user's exception comes out unchanged; the window is delivered
            self._finish(exc)
        except Exception as stop_error:
            warnings.warn(f"cutimeline could not deliver the scheduled window after an "
                          f"exception in the recorded block: {stop_error}",
                          RuntimeWarning, 2)
        return False

    def start(self) -> "ScheduledRecorder":
        """Begin counting steps; a window begins now when step 0 is in one."""
        if self._state != "new":
            raise CutimelineError(
                "This scheduled recorder has already " + (
                    "started; call stop() first." if self._state == "recording" else
                    "recorded; make a new one with ctl.record(schedule=...)."))
        if not self.disabled:
            self._phase = self.schedule(0)
            self._watch = StepWatch(self._steps, self._advance).install()
            try:
                if self._phase != NONE:
                    self._open(0)
            except BaseException:
                self._watch.remove()
                raise
        self._state = "recording"
        return self

    def stop(self) -> "ScheduledRecorder":
        """Stop counting; a window still active is delivered with the steps
        it holds. ``rec.timelines_ready`` lists every window, ``rec.timeline``
        is the last."""
        if self._state != "recording":
            raise CutimelineError("stop() was called on a scheduled recorder that is "
                                  "not recording.")
        self._finish(None)
        return self

    def step(self) -> None:
        """End the current step here (see ``steps`` in ``record``)."""
        if self._state != "recording":
            raise CutimelineError("rec.step() was called while the recorder is "
                                  "not recording; call it inside the `with` block.")
        if self._watch is not None:
            if self._window is not None:  # its STEP span first
                self._window.rec.step()
            self._watch.step()

    @property
    def timeline(self) -> Timeline:
        """The last window's Timeline (after stop)."""
        if self._state != "stopped":
            raise CutimelineError("The timeline is ready after stop(); windows that "
                                  "ended meanwhile are in rec.timelines_ready.")
        if self.disabled:
            return Timeline(meta={"source": "record", "disabled": True})
        if not self.timelines_ready:
            n = self._watch.number if self._watch is not None else 0
            raise CutimelineError(
                f"The schedule recorded no window: the recording ended in step {n} "
                f"before any active step ended. Run more steps, or give a schedule "
                f"with fewer skip_first/wait/warmup steps.")
        return self.timelines_ready[-1]

    @property
    def timelines(self) -> dict[str, Timeline]:
        """The last window, by timing name (as ``Recorder.timelines``)."""
        tl = self.timeline
        return {tl.meta.get("timing", "events"): tl}

    # -- windows ------------------------------------------------------------------------
    def _advance(self) -> None:
        """A step ended: the next one's phase opens, keeps or closes a window."""
        k = self._watch.number
        prev, phase = self._phase, self.schedule(k)
        self._phase = phase
        ends = prev == SAVE or phase == NONE or prev == RECORD and phase == WARMUP
        if ends and (self._window is not None or self._skipping):
            if prev in (WARMUP, RECORD):  # torch.profiler warns alike
                warnings.warn(f"Incorrect schedule: {prev.upper()} followed by "
                              f"{phase.upper()} at step {k}.", RuntimeWarning, 2)
            self._skipping = False
            self._close(None)
        if phase == NONE or self._skipping:
            return
        if self._window is None:
            self._open(k)
        elif self._active is None and phase in (RECORD, SAVE):
            self._active = k

    def _open(self, k: int) -> None:
        try:
            self._window = Window(self._make, k, manual=self._watch.manual,
                                  reuse=self._reuse)
        except CutimelineError as exc:  # another recording is running: the program goes on
            self._skipping = True
            warnings.warn(f"cutimeline skips the scheduled window from step {k}: {exc}",
                          RuntimeWarning, 3)
            return
        self._active = k if self._phase in (RECORD, SAVE) else None

    def _close(self, error: BaseException | None) -> None:
        w, active = self._window, self._active
        self._window = self._active = None
        if w is None:
            return
        tl = w.stop(error)
        if self._reuse is None:
            self._reuse = Window.reuse(tl)
        if active is None or tl.meta.get("disabled") or tl.meta.get("forked"):
            return  # warmup only: dropped, as torch.profiler does
        tl = cut(tl, w.first, active, self._watch.number, self._meta)
        if tl is not None:
            self.timelines_ready.append(tl)
            if self.on_trace_ready is not None:
                self.on_trace_ready(tl)

    def _finish(self, error: BaseException | None) -> None:
        if self._state != "recording":
            return
        self._state = "stopped"
        watch = self._watch
        try:
            self._close(error)
        finally:
            if watch is not None:
                watch.remove()


def ready_writer(folder: str | os.PathLike) -> Callable[[Timeline], str]:
    """An ``on_trace_ready`` handler that writes each window to
    ``folder/step-<a>-<b>.ctl`` (its first and last step; under an initialised
    torch.distributed ``step-<a>-<b>.rank-<r>.ctl``) and returns the path.
    The folder is made now."""
    if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder):
        raise CutimelineError(f"ready_writer({folder!r}) needs a folder: a str or path.")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)

    def write(tl: Timeline) -> str:
        steps = tl.meta.get("steps")
        if not (isinstance(steps, list) and len(steps) == 2):
            raise CutimelineError("ready_writer names files by the window's steps, but "
                                  "this Timeline has no meta 'steps' [first, last]; give "
                                  "it the Timelines of record(schedule=...).")
        rank = ""
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank = f".rank-{dist.get_rank()}"
        path = os.path.join(folder, f"step-{steps[0]}-{steps[1]}{rank}.ctl")
        tl.save(path)
        return path

    return write
