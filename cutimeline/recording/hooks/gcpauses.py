"""Python's garbage collections on a simulated host.

On a SimGPU the times of Python's collections are the simulation's, not
the program's. Collections run when the count of container objects made
and not yet freed passes a threshold. A meta kernel leaves many such
objects in reference cycles (``aten::relu`` on a meta tensor: 223 per
call, here with torch 2.13; on CUDA none), and the recorder keeps a row
per op. So collections come one to two orders of magnitude more often
than in the program on a GPU, and a full one lands as a host stall
wherever the count runs over (a heap with transformers imported: 170k
objects, 72 ms on this VM, in the middle of a loop of views that alone
collects nothing).

While recording on a device that keeps a host clock of its own
(``Device.keeps_host_clock``), ``Collections`` gives each collection's
time back to that clock (``Device.recorder_work``). It gives nothing back
when the collection starts in the recorder's or the simulator's code:
that time leaves the clock already. A collection inside a simulated
launch is left alone too, since the launch lasts its modelled cost
(``SimGPU.recorder_work``), and so is one the program asks for
(``gc.collect()``, which the recording wraps): that is the program's
work on a GPU too. The count and the time given back go into meta
``recorder_left`` (``gc_collections``, ``gc_ns``). On a real GPU the
collections are the program's, and they stay.

A callback is Python code that runs when a collection ends, so a signal
that came during the collection has its handler run there: Ctrl-C's
``KeyboardInterrupt`` is raised inside the callback, and the collector
prints and drops what a callback raises. While recording,
``sys.unraisablehook`` is wrapped (``unraisable``): a ``KeyboardInterrupt``
from this callback is delivered again (``_thread.interrupt_main``, from a
thread of its own, so that the handler runs once this thread is back in
the program's code), and reaches the program just after the collection,
as it would have without the recorder.
"""

from __future__ import annotations

import _thread
import gc
import sys
import threading
from time import perf_counter_ns as _now
from typing import Any, Callable

__all__ = ["Collections", "collections_for", "OWN"]

#: modules whose time leaves a simulated host as it is spent (measured there)
OWN = ("cutimeline.recording.", "cutimeline.devices.")


class Collections:
    """A ``gc.callbacks`` entry for one recording on a simulated host:
    ``lost(ns)`` (``Device.recorder_work``: the ns its clock left out) is
    called with each collection's time, unless the collection started in
    the recorder's or the simulator's own code (``OWN``) or in the
    program's ``gc.collect()`` (``collect``: a ``collect`` the program
    bound before the recording began is not seen, and its collections
    leave the clock). Collections do not overlap: none starts, in any
    thread, while one runs."""

    def __init__(self, lost: Callable[[int], int]):
        self.lost = lost
        self.t = 0
        self.own = False
        self.asked = 0  # inside the program's gc.collect() (collect)
        self.n = 0    # collections given back
        self.ns = 0   # their time

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            try:  # the frame whose allocation set it off
                name = sys._getframe(1).f_globals.get("__name__") or ""
            except ValueError:  # no Python frame: a collection from C
                name = ""
            self.own = self.asked > 0 or name.startswith(OWN)
            self.t = _now()
            return
        if self.own or not self.t:
            return
        ns, self.t = _now() - self.t, 0
        if self.lost(ns):  # not inside a simulated launch
            self.n += 1
            self.ns += ns

    def collect(self, original: Callable[..., int]) -> Callable[..., int]:
        """``gc.collect`` while recording: ``original``, its collections
        left to the program."""
        def collect(*args: Any, **kwargs: Any) -> int:
            self.asked += 1
            try:
                return original(*args, **kwargs)
            finally:
                self.asked -= 1
        return collect

    def unraisable(self, original: Callable[[Any], None]) -> Callable[[Any], None]:
        """``sys.unraisablehook`` while recording: a ``KeyboardInterrupt``
        raised inside this callback (a signal handler's, Ctrl-C's) is
        delivered again to the main thread, not dropped; all else goes to
        ``original``."""
        def hook(unraisable: Any) -> None:
            if unraisable.object is self and isinstance(unraisable.exc_value, KeyboardInterrupt) \
                    and _thread.get_ident() == threading.main_thread().ident:  # a handler's
                # from another thread: called here, its handler would run in this hook
                _thread.start_new_thread(_thread.interrupt_main, ())
                return
            original(unraisable)
        return hook

    def install(self) -> "Collections":
        gc.callbacks.append(self)
        return self

    def remove(self) -> dict[str, int]:
        """Stop; what was given back, for meta ``recorder_left``."""
        try:
            gc.callbacks.remove(self)
        except ValueError:  # the program cleared gc.callbacks
            pass
        return {"gc_collections": self.n, "gc_ns": self.ns}


def collections_for(session: Any) -> Collections | None:
    """The collections hook of ``session``'s recording, or None on a
    device whose host is the real one."""
    return None if session.lost is None else Collections(session.lost)
