"""A run's first steps recorded after a warm-up: the recordings of
``record_script`` (``script.py``), from the same parts as a schedule's
windows (``stepwatch.py``).

``FirstSteps`` records from the run's start (a ``Window`` from step 0), so
that a run that ends no step is recorded whole. At the end of step
``skip`` that recording is dropped (its self-cost model is kept for the
next) and a fresh window records the next ``steps`` steps, or fewer when
``seconds`` have passed at a step's end, as torch.profiler's
``schedule(skip_first=skip, wait=0, warmup=0, active=steps, repeat=1)``
would. Steps are counted by the caller's ``StepWatch``; its post hook
runs after the window recorder's, so each window stops after its last
STEP span has ended and starts before the next one's begins.
"""

from __future__ import annotations

from time import perf_counter_ns as _now
from typing import Any, Callable

from ...timeline.timeline import Timeline
from .stepwatch import Window, cut

__all__ = ["FirstSteps"]


class FirstSteps:
    """The recordings of one run (see the module doc): ``open()`` at its
    start, ``step(n)`` as its step ``n`` (from 1) ends, ``finish()`` at its end.
    ``make``: a fresh ``Recorder`` (not started) each time."""

    def __init__(self, make: Callable[[], Any], skip: int, steps: int,
                 seconds: float | None):
        self.make, self.skip, self.steps = make, skip, steps
        self.limit_ns = None if seconds is None else int(seconds * 1e9)
        self.window: Window | None = None
        self.active: int | None = None  # the window's first recorded step (None: warm-up)
        self.began = 0  # when the window began (host ns)
        self.reuse: dict | None = None  # the first recording's self-cost model
        self.ended = 0  # steps ended
        self.timeline: Timeline | None = None  # the window's, once it is closed
        self.stopped_by = ""  # "steps" or "seconds": what closed the window

    def open(self, first: int = 0) -> None:
        """Start a window at the start of step ``first``."""
        self.window = Window(self.make, first, manual=False, reuse=self.reuse)
        self.active = first if first >= self.skip else None
        self.began = _now()

    def mark(self) -> None:
        """A step ends that the window's recorder does not see end itself
        (``steps_from``'s ranges): its STEP span ends here."""
        if self.window is not None:
            self.window.rec.step()

    def step(self, n: int) -> bool:
        """Step ``n`` ended; whether the steps to record are recorded (then
        and at every later step)."""
        self.ended = n
        if self.timeline is not None:
            return True
        if self.active is None:
            if n == self.skip:  # the warm-up's recording is dropped
                self.reuse = Window.reuse(self.window.stop())
                self.open(n)
            return False
        if n - self.active >= self.steps:
            self.stopped_by = "steps"
        elif self.limit_ns is not None and _now() - self.began >= self.limit_ns:
            self.stopped_by = "seconds"
        if self.stopped_by:
            self.timeline = self.finish(None)
        return bool(self.stopped_by)

    def finish(self, error: BaseException | None) -> Timeline | None:
        """Stop the window (``error``: what the run raised) and give what it
        recorded: the steps it holds (``cut``); a run that ended no step,
        whole; one that raised in the warm-up, from its start. None when the
        run ended, without an error, before the first recorded step."""
        w, active, n = self.window, self.active, self.ended
        if w is None:  # closed at its last step
            return self.timeline
        self.window = None
        tl = w.stop(error)
        if n == 0 or tl.meta.get("disabled") or tl.meta.get("forked") or (
                error is not None and active is None):
            return tl
        if error is None and (active is None or n <= active):
            return None
        return cut(tl, w.first, active, n, {}) or tl
