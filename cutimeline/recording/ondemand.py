"""On-demand capture: arm a running job once, record N steps when asked.

    ctl.arm(steps=5)                    # in the training script, before the loop
    $ cutimeline capture <pid> --steps 5 --out run.ctl    # from a shell, later

``arm()`` installs a trigger and nothing else: a signal handler (SIGUSR2
by default, where the platform has it) that only sets a flag, two global
optimizer hooks that count steps (``stepwatch.py``; per step, not per op,
no dispatch mode), and a marker file ``armed-<pid>`` in the user's private
capture folder (``capturefiles.py``: the folder, the files and whom they
trust) that tells ``send_capture`` the process listens. At each step
boundary the trigger checks the flag and the request file
``capture-<pid>`` there (one ``os.stat``); on either it reads the request
(JSON ``{"steps": N, "out": path}``, either key optional; an empty file, as
``touch`` leaves, asks for the armed defaults) if the job's user owns it,
deletes it and records the next N steps with an ordinary recorder
(``ctl.record(**options)``), their STEP spans numbered by the steps
counted since ``arm()``, meta ``steps`` [a, b] and ``capture``. It writes
the Timeline to ``out``, which must lie under the folder chosen at
``arm(out_dir=...)`` (default: the folder of ``path``, else the working
folder at ``arm()``), by default ``<out_dir>/cutimeline-<pid>-<time>.ctl``
(the time to the nanosecond: captures never share a name), whole or not
at all, and appends the path to ``trigger.captures``; then it waits for
the next request, or with ``rearm=False`` disarms. The self-cost probe
runs at the first capture only. ``send_capture(pid, ...)`` checks the
process and its marker, writes the request and sends the signal.
"""

from __future__ import annotations

import json
import os
import signal as _signal
import threading
import time
import warnings
from typing import Any

from ..errors import CutimelineError
from .capturefiles import (armed_path, capture_dir, handles, inside, process, read_owned,
                           request_path, start_time, write_private)
from .control.stepwatch import StepWatch, Window, cut
from .recorder import record

__all__ = ["arm", "disarm", "Trigger", "send_capture", "request_path", "armed_path"]

_DEFAULT_SIGNAL = getattr(_signal, "SIGUSR2", None)
_TRIGGER: Trigger | None = None  # the armed trigger of this process
_LOCK = threading.Lock()


def _count(value: Any, where: str) -> int:
    """``value`` if a whole number ≥ 1; ``where``: how the user wrote it, {} the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CutimelineError(f"{where.format(repr(value))} must be a whole number "
                              f"of steps ≥ 1.")
    return value


def _default_out(pid: int, folder: str) -> str:
    """``folder/cutimeline-<pid>-<date>-<time>.<ns>.ctl``: unique to the
    nanosecond and the process."""
    ns = time.time_ns()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(ns // 10 ** 9))
    return os.path.join(folder, f"cutimeline-{pid}-{stamp}.{ns % 10 ** 9:09d}.ctl")


def arm(steps: int = 5, path: str | os.PathLike | None = None, *,
        signal: int | None = _DEFAULT_SIGNAL, rearm: bool = True,
        options: dict[str, Any] | None = None,
        out_dir: str | os.PathLike | None = None) -> "Trigger":
    """Arm this process for on-demand capture (see the module doc) and
    return the ``Trigger``. ``steps``: how many steps a capture records
    unless the request says; ``path``: where it writes them unless the
    request says (default ``<out_dir>/cutimeline-<pid>-<time>.ctl``);
    ``out_dir``: the folder under which a request may have captures
    written (default: ``path``'s folder, else the working folder); ``signal``:
    the signal that asks for a capture (None: the request file alone; it
    must be installed from the main thread); ``rearm``: after a capture,
    wait for the next request (else disarm); ``options``: keyword arguments
    of ``ctl.record()`` for the capture (device, steps, measure, ...).
    One trigger per process: ``disarm()`` the current one first."""
    global _TRIGGER
    trigger = Trigger(steps, path, signal=signal, rearm=rearm, options=options,
                      out_dir=out_dir)
    with _LOCK:
        if _TRIGGER is not None:
            raise CutimelineError("This process is already armed for capture; call "
                                  "ctl.disarm() before arming it again.")
        if trigger._next.disabled:  # CUTIMELINE_DISABLE: armed for nothing
            return trigger
        _TRIGGER = trigger
    try:
        trigger._install()
    except BaseException:
        with _LOCK:
            _TRIGGER = None
        raise
    return trigger


def disarm() -> None:
    """Remove the armed trigger (a capture under way is stopped and written
    with the steps it holds). Does nothing when none is armed."""
    trigger = _TRIGGER
    if trigger is not None:
        trigger.disarm()


class Trigger:
    """The armed state of one process (made by ``arm()``): ``captures``
    lists the files written, ``step()`` ends a step by hand (as ``rec.step()``)."""

    def __init__(self, steps: int, path: str | os.PathLike | None, *, signal: int | None,
                 rearm: bool, options: dict[str, Any] | None,
                 out_dir: str | os.PathLike | None = None):
        self.steps = _count(steps, "arm(steps={})")
        if path is not None and (not isinstance(path, (str, os.PathLike)) or
                                 not os.fspath(path)):
            raise CutimelineError(f"arm(path={path!r}) must name a file (a str or path).")
        self.path = None if path is None else os.path.abspath(os.fspath(path))
        if out_dir is not None and (not isinstance(out_dir, (str, os.PathLike)) or
                                    not os.fspath(out_dir)):
            raise CutimelineError(f"arm(out_dir={out_dir!r}) must name a folder.")
        self.out_dir = os.path.abspath(os.fspath(out_dir)) if out_dir is not None else \
            os.path.dirname(self.path) if self.path else os.getcwd()
        if self.path is not None and not inside(self.path, self.out_dir):
            raise CutimelineError(f"arm(path={self.path!r}) lies outside out_dir "
                                  f"{self.out_dir!r}; give a path inside it.")
        if signal is not None and (isinstance(signal, bool) or not isinstance(signal, int)
                                   or signal not in _signal.valid_signals()):
            raise CutimelineError(f"arm(signal={signal!r}) is not a signal of this "
                                  f"platform; give one such as signal.SIGUSR2, or None "
                                  f"to use the request file alone.")
        if signal is not None and threading.current_thread() is not threading.main_thread():
            raise CutimelineError("arm() installs a signal handler, which Python allows "
                                  "only in the main thread; call it there, or pass "
                                  "signal=None to use the request file alone.")
        if not isinstance(rearm, bool):
            raise CutimelineError(f"arm(rearm={rearm!r}) must be True or False.")
        self.signal, self.rearm, self.pid = signal, rearm, os.getpid()
        self.options = dict(options or {})
        if "schedule" in self.options or "on_trace_ready" in self.options:
            raise CutimelineError("arm(options=...) takes record()'s options but not "
                                  "schedule or on_trace_ready: a capture records N steps.")
        try:  # checks the options now, not when a request comes
            self._next = record(**self.options)
        except TypeError as exc:
            raise CutimelineError(f"arm(options={self.options!r}) has an option record() "
                                  f"does not take ({exc}).") from None
        self.captures: list[str] = []  # files written, in order
        self.armed = False
        self.uid = os.geteuid()
        self.folder: str | None = None  # the private folder of the files (at install)
        self.request = self.marker = ""
        self._watch = StepWatch(self.options.get("steps", "auto"), self._on_step)
        self._flag = False  # set by the signal handler
        self._window: Window | None = None
        self._goal = (0, "")  # the capture under way: steps, out
        self._reuse: dict | None = None
        self._previous: Any = None  # the signal's handler before ours

    def __repr__(self) -> str:
        state = "capturing" if self._window is not None else "armed" if self.armed else "off"
        return f"<cutimeline.Trigger {state} pid={self.pid} captures={len(self.captures)}>"

    def step(self) -> None:
        """End the current step here (with ``options={"steps": "manual"}``,
        or "auto" from its first call on)."""
        if self._window is not None:
            self._window.rec.step()
        self._watch.step()

    def disarm(self) -> None:
        """Stop listening; a capture under way is stopped and written."""
        global _TRIGGER
        if not self.armed:
            return
        self.armed = False
        try:
            if self._window is not None:
                self._finish()
        finally:
            self._watch.remove()
            self._restore_signal()
            for p in (self.marker, self.request) if os.getpid() == self.pid and \
                    self.folder else ():
                try:  # (a forked child leaves its parent's files alone)
                    os.remove(p)
                except OSError:
                    pass
            import atexit
            atexit.unregister(self.disarm)
            with _LOCK:
                if _TRIGGER is self:
                    _TRIGGER = None

    # -- installing -------------------------------------------------------------------
    def _install(self) -> None:
        import atexit
        self.folder = capture_dir(create=True)  # checked: ours, 0700 (capturefiles.py)
        self.request, self.marker = request_path(self.pid, self.folder), \
            armed_path(self.pid, self.folder)
        if self.signal is not None:
            self._previous = _signal.signal(self.signal, self._on_signal)
        self.armed = True
        try:
            self._watch.install()
            write_private(self.marker, {
                "pid": self.pid, "uid": self.uid, "start": start_time(self.pid),
                "signal": self.signal, "out_dir": self.out_dir, "armed": True})
        except BaseException:
            self.disarm()
            raise
        atexit.register(self.disarm)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.armed:
            self._flag = True  # read at the next step boundary
        elif callable(self._previous):  # disarmed off the main thread: pass it on
            self._previous(signum, frame)

    def _restore_signal(self) -> None:
        if self.signal is None or threading.current_thread() is not threading.main_thread():
            return  # off the main thread the handler stays, passing signals on
        if _signal.getsignal(self.signal) == self._on_signal:
            previous = self._previous
            _signal.signal(self.signal, previous if previous is not None else _signal.SIG_DFL)

    # -- at step boundaries ---------------------------------------------------------------
    def _on_step(self) -> None:
        if not self.armed or os.getpid() != self.pid:  # not in a forked child
            return
        w = self._window
        if w is not None:
            if self._watch.number - w.first >= self._goal[0]:
                self._finish()
            return
        flagged, self._flag = self._flag, False
        try:
            os.stat(self.request)
        except OSError:
            if not flagged:
                return
        self._begin(self._watch.number)

    def _begin(self, k: int) -> None:
        steps, out = self.steps, self.path
        # only a regular file of the job's user is read (capturefiles.py); it
        # goes either way, so that a foreign one is not seen at every step
        data = read_owned(self.request, self.uid)
        foreign = data is None and os.path.lexists(self.request)
        try:
            os.remove(self.request)
        except OSError:  # the signal alone: the armed defaults
            pass
        try:
            if foreign:
                raise ValueError(f"it is not a file of uid {self.uid}'s, this job's user")
            text = data.decode("utf-8") if data else ""
            asked = json.loads(text) if text.strip() else {}
            if not isinstance(asked, dict):
                raise ValueError("not a JSON object")
            steps = _count(asked.get("steps", steps), "the request's steps {}")
            out = asked.get("out", out)
            if out is not None and not isinstance(out, str):
                raise ValueError(f"out {out!r} is not a path")
            if out is not None:  # a relative one: in out_dir
                out = os.path.join(self.out_dir, out)
            if out is not None and not inside(out, self.out_dir):
                raise ValueError(f"out {out!r} lies outside {self.out_dir}, the folder "
                                 f"arm(out_dir=...) allows")
        except (ValueError, CutimelineError) as exc:
            warnings.warn(f"cutimeline ignores the capture request in {self.request} "
                          f"({exc}); write JSON such as {{\"steps\": 5, \"out\": "
                          f"\"{os.path.join(self.out_dir, 'run.ctl')}\"}}.", RuntimeWarning, 3)
            return
        rec, self._next = self._next, None
        try:
            self._window = Window(lambda: rec, k, manual=self._watch.manual,
                                  reuse=self._reuse)
        except CutimelineError as exc:  # another recording is running: the program goes on
            warnings.warn(f"cutimeline cannot capture from step {k}: {exc}",
                          RuntimeWarning, 3)
            self._renew()
            return
        self._goal = (steps, out or _default_out(self.pid, self.out_dir))

    def _finish(self) -> None:
        w, (steps, out) = self._window, self._goal
        self._window = None
        try:
            tl = w.stop()
            if self._reuse is None:
                self._reuse = Window.reuse(tl)
            tl = cut(tl, w.first, w.first, self._watch.number,
                     {"capture": {"pid": self.pid, "requested_steps": steps}})
            if tl is not None:
                os.makedirs(os.path.dirname(out), exist_ok=True)
                if not inside(out, self.out_dir):  # a link made meanwhile
                    raise CutimelineError(f"{out} now lies outside {self.out_dir}")
                tl.save(out)
                self.captures.append(out)
        except Exception as exc:  # a capture must not end the job it watches
            warnings.warn(f"cutimeline could not write the capture to {out} "
                          f"({type(exc).__name__}: {exc}); training goes on.",
                          RuntimeWarning, 3)
        finally:
            if self.rearm or not self.armed:
                self._renew()
            else:
                self.disarm()

    def _renew(self) -> None:
        if self.armed:
            self._next = record(**self.options)


def send_capture(pid: int, steps: int = 5, out: str | os.PathLike | None = None, *,
                 timeout: float | None = None, folder: str | None = None) -> str:
    """Ask the armed process ``pid`` to capture its next ``steps`` steps
    into ``out`` (made absolute here; it must lie under the folder the job
    armed with; default ``<that folder>/cutimeline-<pid>-<time>.ctl``):
    check the process and its marker (``capturefiles.py``), write the
    request file, then send the signal it armed with if it handles it now.
    With ``timeout`` (seconds), wait until the file is written. Returns
    the path. ``folder``: the job's capture folder, when it is not the one
    its environment names (``capturefiles.capture_dir``)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise CutimelineError(f"send_capture(pid={pid!r}) must be a process id.")
    steps = _count(steps, "send_capture(steps={})")
    proc = process(pid)
    if proc is None:
        raise CutimelineError(f"There is no process {pid}; check the pid.")
    me = os.geteuid()
    if me not in (0, proc.uid):
        raise CutimelineError(f"Process {pid} belongs to another user (uid {proc.uid}); "
                              f"run the capture as that user. No signal was sent.")
    not_armed = (f"Process {pid} is not armed for capture ({{}}); call ctl.arm() in it "
                 f"first. No signal was sent: one would end a process that does not "
                 f"handle it.")
    if folder is None:  # the job's environment names it; else (changed since) ours may
        folders, errors = [], []
        for env in (proc.env, None) if pid != os.getpid() else (None,):
            try:
                folders.append(capture_dir(proc.uid, env))
            except CutimelineError as exc:
                errors.append(str(exc))
        if not folders:
            raise CutimelineError(not_armed.format(errors[0]))
        folder = next((f for f in folders if os.path.lexists(armed_path(pid, f))), folders[0])
    marker = armed_path(pid, folder)
    data = read_owned(marker, proc.uid)
    try:
        armed = json.loads(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        armed = None
    if not isinstance(armed, dict) or armed.get("pid") != pid or armed.get("armed") is not True:
        raise CutimelineError(not_armed.format(
            f"{marker} is missing" if data is None and not os.path.lexists(marker) else
            f"{marker} is not a marker of uid {proc.uid}'s, the process's user"))
    if proc.start is not None and armed.get("start") != proc.start:
        raise CutimelineError(
            f"The marker {marker} was left by an earlier process {pid}, which ended without "
            f"removing it (the process now {pid} started later): process {pid} is not "
            f"armed. No signal was sent.")
    out_dir = armed.get("out_dir")
    if not isinstance(out_dir, str) or not os.path.isabs(out_dir):
        raise CutimelineError(not_armed.format(f"{marker} names no folder for captures"))
    out = os.path.abspath(os.fspath(out)) if out is not None else _default_out(pid, out_dir)
    if not inside(out, out_dir):
        raise CutimelineError(f"{out} lies outside {out_dir}, the folder process {pid} "
                              f"writes captures under (ctl.arm(out_dir=...)); give a path "
                              f"inside it.")
    if os.path.lexists(out):
        raise CutimelineError(f"{out} exists already; give another out path or "
                              f"remove it.")
    write_private(request_path(pid, folder), {"steps": steps, "out": out}, owner=proc.uid)
    signum = armed.get("signal")
    if isinstance(signum, int) and not isinstance(signum, bool) and \
            signum in _signal.valid_signals() and handles(pid, signum) is not False:
        os.kill(pid, signum)  # only the signal it armed with, and only if it handles it
    if timeout is not None:
        end = time.monotonic() + timeout
        while not os.path.exists(out):
            if time.monotonic() > end:
                raise CutimelineError(
                    f"Process {pid} did not write {out} within {timeout:g} s; the "
                    f"capture begins at its next step boundary (optimizer.step() or "
                    f"rec.step()) and ends {steps} steps later.")
            time.sleep(0.05)
    return out
