"""On-demand capture: arm a running job once, record N steps when asked.

    ctl.arm(steps=5)                    # in the training script, before the loop
    $ cutimeline capture <pid> --steps 5 --out run.ctl    # from a shell, later

``arm()`` installs a trigger and nothing else, so an armed job runs at
full speed: a signal handler (SIGUSR2 where the platform has it) that
only counts, two global optimizer hooks that count steps
(``stepwatch.py``; per step, not per op, no dispatch mode), and a marker
file ``armed-<pid>`` in the user's private capture folder
(``capture/files.py``: the folder, the files and whom they trust). At
each step boundary the trigger checks the signals counted and the
request file ``capture-<pid>`` (one ``fstatat`` on the folder it holds
open); a request (JSON ``{"steps": N, "out": path, "signalled": true}``,
every key optional; an empty file asks for the armed defaults) the job's
user owns records the next N steps with an ordinary recorder, STEP spans
numbered from ``arm()``, meta ``steps`` [a, b] and ``capture``, written
whole or not at all (``cutimeline-<pid>-<time>.ctl`` by default, to the
nanosecond: captures never share a name). The self-cost probe runs at
the first capture only. ``send_capture`` (``capture/request.py``) is the
other side.

**One request, one capture.** A request file is one request; so is a
signal that comes alone (``kill -USR2 <pid>``). A request saying
``"signalled": true`` comes with a signal that only wakes the job, matched
to it whether it arrives before the file is taken or after: N requests
make N captures, in whichever order file and signal arrive.

**Where the capture goes.** ``out`` must lie under ``arm(out_dir=...)``
and is walked below it (opened as it resolved at ``arm()``) by
descriptor (``capture/heldfolder.Folder``): each folder checked, then
made, no link followed; a link swapped in during a capture makes the
write fail with a warning, never a file elsewhere.
"""

from __future__ import annotations

import collections
import json
import os
import signal as _signal
import threading
import warnings
from typing import Any

from ..errors import CutimelineError
from ..timeline.ctlfile import fileformat
from .capture.files import (armed_name, armed_path, below, inside, private_folder, request_name,
                            request_path, start_time)
from .capture.heldfolder import Folder
from .capture.request import count_steps, default_out, send_capture
from .control.stepwatch import StepWatch, Window, cut
from .recorder import record

__all__ = ["arm", "disarm", "Trigger", "send_capture", "request_path", "armed_path"]

_DEFAULT_SIGNAL = getattr(_signal, "SIGUSR2", None)
_TRIGGER: Trigger | None = None  # the armed trigger of this process
_LOCK = threading.Lock()


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
        self.steps = count_steps(steps, "arm(steps={})")
        if path is not None and (not isinstance(path, (str, os.PathLike)) or
                                 not os.fspath(path)):
            raise CutimelineError(f"arm(path={path!r}) must name a file (a str or path).")
        self.path = None if path is None else os.path.abspath(os.fspath(path))
        if out_dir is not None and (not isinstance(out_dir, (str, os.PathLike)) or
                                    not os.fspath(out_dir)):
            raise CutimelineError(f"arm(out_dir={out_dir!r}) must name a folder.")
        self.out_dir = os.path.abspath(os.fspath(out_dir)) if out_dir is not None else \
            os.path.dirname(self.path) if self.path else os.getcwd()
        # the folder as it resolves now: captures are walked below it by descriptor
        self._out_real = os.path.realpath(self.out_dir)
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
        self.request = self.marker = ""  # their paths, for messages and by-hand requests
        self._files: Folder | None = None  # the private folder, held open
        self._watch = StepWatch(self.options.get("steps", "auto"), self._on_step)
        # one entry per signal received (the handler only appends: atomic)
        self._signals: collections.deque[int] = collections.deque()
        self._owed = 0  # signals still to come for requests taken before theirs came
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
            files, self._files = self._files, None
            if files is not None:
                if os.getpid() == self.pid:  # (a forked child leaves its parent's files alone)
                    files.remove(armed_name(self.pid))
                    files.remove(request_name(self.pid))
                files.close()
            import atexit
            atexit.unregister(self.disarm)
            with _LOCK:
                if _TRIGGER is self:
                    _TRIGGER = None

    # -- installing -------------------------------------------------------------------
    def _install(self) -> None:
        import atexit
        # held open, checked on the descriptor: ours, 0700 (capture/files.py)
        self._files = private_folder(create=True)
        self.folder = self._files.path
        self.request, self.marker = request_path(self.pid, self.folder), \
            armed_path(self.pid, self.folder)
        if self.signal is not None:
            self._previous = _signal.signal(self.signal, self._on_signal)
        self.armed = True
        try:
            self._watch.install()
            self._files.write_json(armed_name(self.pid), {
                "pid": self.pid, "uid": self.uid, "start": start_time(self.pid),
                "signal": self.signal, "out_dir": self.out_dir, "armed": True})
        except BaseException:
            self.disarm()
            raise
        atexit.register(self.disarm)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.armed:
            self._signals.append(signum)  # counted at the next step boundary
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
        while self._owed and self._signals:  # wake-ups of requests already taken
            self._signals.popleft()
            self._owed -= 1
        if self._files is not None and self._files.lstat(request_name(self.pid)) is not None:
            self._begin(self._watch.number, request=True)
        elif self._signals:  # a signal alone: a request for the armed defaults
            self._signals.popleft()
            self._begin(self._watch.number, request=False)

    def _begin(self, k: int, request: bool) -> None:
        steps, out = self.steps, self.path
        why = data = None
        try:
            # taken either way (renamed away, then read if a regular file of the
            # job's user: capture/heldfolder.py), so a foreign one is not seen at every step
            data = self._files.take(request_name(self.pid), self.uid) if request else None
            if request and data is None:  # gone since it was seen (withdrawn)
                return
        except CutimelineError as exc:
            why = (f"{str(exc).rstrip('.')}; a request is read only when it is a "
                   f"regular file of uid {self.uid}'s, this job's user")
        try:
            if why is not None:
                raise ValueError(why)
            text = data.decode("utf-8") if data else ""
            asked = json.loads(text) if text.strip() else {}
            if not isinstance(asked, dict):
                raise ValueError("not a JSON object")
            if asked.get("signalled") is True:  # its signal: come already, or owed
                if self._signals:
                    self._signals.popleft()
                else:
                    self._owed += 1
            steps = count_steps(asked.get("steps", steps), "the request's steps {}")
            out = asked.get("out", out)
            if out is not None and not isinstance(out, str):
                raise ValueError(f"out {out!r} is not a path")
            if out is not None:  # a relative one: in out_dir
                out = os.path.join(self.out_dir, out)
            if out is not None and (not inside(out, self.out_dir) or
                                    self._below(out) is None):
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
        self._goal = (steps, out or default_out(self.pid, self.out_dir))

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
                self._write(tl, out)
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

    def _below(self, out: str) -> str | None:
        """``out`` relative to ``out_dir``, spelled under it as armed or as it
        resolved at ``arm()``; None when it is spelled under neither."""
        return next((rel for rel in (below(out, self.out_dir), below(out, self._out_real))
                     if rel is not None), None)

    def _write(self, tl: Any, out: str) -> None:
        """Write ``tl`` to ``out`` below ``out_dir``, every folder on the way
        opened (made if missing) relative to the one above, no link followed."""
        rel = self._below(out)
        if rel is None or rel == os.curdir:
            raise CutimelineError(f"{out} lies outside {self.out_dir}")
        where, name = os.path.split(rel)
        with Folder.open(self._out_real, create=True) as top, \
                top.walk(where, create=True) as folder, folder.replacing(name) as f:
            fileformat.write(tl, f)

    def _renew(self) -> None:
        if self.armed:
            self._next = record(**self.options)
