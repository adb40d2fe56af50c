"""A rank's file when its recording does not end well: SIGTERM, Ctrl-C, exit.

With ``record(out_dir=...)`` the rank's file is written at ``stop()``
(``ranks.py``); until then it is the recording's journal
(``flusher.py``), which is all a process killed without a word (SIGKILL,
a crash) leaves. An end Python sees leaves the whole file, with
``meta["partial"]`` saying why and in which step ("SIGTERM at step 7"):

* **SIGTERM** (what torchrun, Slurm and Kubernetes send first): while a
  rank records, started from the main thread, our handler writes the file,
  puts the previous handler back and sends the signal again, so the
  process ends exactly as it would have (no ``finally`` or atexit run). A
  user's handler stays in charge: ours notes the signal and calls it (if
  the block then ends by an exception, the file says SIGTERM). With
  SIGTERM ignored, or handled in C (``signal.getsignal`` gives None, which
  Python could not put back), nothing is installed.
* **Ctrl-C**: ``KeyboardInterrupt`` in the block; ``stop()`` runs from
  ``with``'s exit and marks the file partial. A SIGINT or SIGTERM during
  ``stop()`` is held until the file is written, then delivered
  (``hold``/``release``).
* **Exit while recording** (no ``stop()``, an uncaught exception): an
  atexit function writes the file.

A kill while that file is written (about 1.5 s for 10^6 ops) leaves the
journal. Nothing of this is set up without ``out_dir``. ``stop()`` puts
back exactly the handlers it installed (one the user installed meanwhile
is left alone) and unregisters the atexit function; a forked child
inherits both and ignores them.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import warnings
from typing import Any

from ...errors import CutimelineError
from ...timeline.ctlfile.journal import Journal
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline
from ..assembly import aligned, assemble, meta_at_stop
from ..ranks import RANK_FILE, write_rank
from .flusher import Flusher

__all__ = ["RankGuard", "partial_reason"]

_HELD = (signal.SIGINT, signal.SIGTERM)


def partial_reason(error: BaseException | None, signalled: str | None,
                   step: int) -> str | None:
    """Why a recording ended early, as "SIGTERM at step 7"; None when it
    ended normally or by an ordinary exception (``meta["error"]`` says
    that). ``signalled``: a signal that arrived while recording."""
    if signalled is not None and error is not None:
        return f"{signalled} at step {step}"
    if error is not None and not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
        return f"{type(error).__name__} at step {step}"
    return None


def _harvest(device: Any, wait_s: float | None) -> Any:
    """``device.harvest()``, in a helper thread given ``wait_s`` seconds
    when the caller may hold the device's lock (it would wait forever)."""
    if wait_s is None:
        return device.harvest()
    box: list = []

    def run():
        try:
            box.append(device.harvest())
        except BaseException as exc:
            box.append(exc)
    t = threading.Thread(target=run, name="cutimeline harvest", daemon=True)
    t.start()
    t.join(wait_s)
    if not box:
        raise TimeoutError("the signal came inside the device's own bookkeeping, "
                           "which holds the device's work")
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def _inside(frame: Any, prefix: str) -> bool:
    """Whether ``frame`` or a frame that called it runs code of a module
    named ``prefix...``: a signal handler's frame tells what it interrupted
    (code there may hold a lock the handler would wait for forever)."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(prefix):
            return True
        frame = frame.f_back
    return False


class RankGuard:
    """What a recording with ``out_dir`` sets up beyond the recorder: the
    SIGTERM handler and the atexit function (see the module doc). Made and
    installed by ``start()``, held and released by ``stop()``."""

    def __init__(self, recorder: Any):
        self.rec, self.pid = recorder, os.getpid()
        self.previous: Any = None  # SIGTERM's handler before ours; None: not installed
        self.held: dict[int, Any] | None = None  # during stop: the handlers we replaced
        self.pending: list[int] = []  # signals held during stop, delivered at release
        self.signalled: str | None = None  # a signal seen while recording
        self.writing = False
        self.flusher: Flusher | None = None  # the journal's (flusher.py)

    def install(self) -> "RankGuard":
        if threading.current_thread() is threading.main_thread():  # else signal() refuses
            prev = signal.getsignal(signal.SIGTERM)
            if prev is signal.SIG_DFL or callable(prev):
                self.previous = prev
                signal.signal(signal.SIGTERM, self._on_term)
        atexit.register(self._at_exit)
        self.flusher = self._journal()
        return self

    def _journal(self) -> Flusher | None:
        """Start the rank's journal at its file's path; None (and a
        warning: the recording goes on, its file comes at stop) when it
        cannot be written."""
        rec = self.rec
        path = os.path.join(rec.options["out_dir"], RANK_FILE.format(
            rank=rec._meta.get("rank", 0)))
        try:
            meta = meta_at_stop(rec._session, None, rec._meta, rec.device, rec.options)
            journal = Journal(path, {**meta, "aligned": True})
        except (OSError, CutimelineError, TypeError, ValueError) as exc:
            warnings.warn(f"cutimeline cannot keep a journal at {path} ({exc}); the "
                          f"file is written at stop, and a kill before that leaves none.",
                          RuntimeWarning, 4)
            return None
        index = NONE if rec.device is None else rec.device.index
        try:
            return Flusher(rec._session, index, journal).start()
        except RuntimeError as exc:  # no thread to be had
            journal.close()
            warnings.warn(f"cutimeline cannot keep a journal at {path} ({exc}); the file "
                          f"is written at stop, and a kill before that leaves one that "
                          f"holds no rows.", RuntimeWarning, 4)
            return None

    def close_journal(self, stopped: bool = True) -> None:
        """At stop: the journal's last rows (``stopped``: and its end), its
        thread ended, before the buffers it reads go."""
        if self.flusher is not None:
            self.flusher.close(stopped)

    def _drop_journal(self, written: str) -> None:
        """After the file was ``written``: the journal, when the rank
        changed since start (it is at another path) and it is still ours."""
        f = self.flusher
        if f is None or os.path.abspath(written) == os.path.abspath(f.journal.path):
            return
        try:
            st = os.lstat(f.journal.path)
            if (st.st_dev, st.st_ino) == f.journal.identity:
                os.unlink(f.journal.path)
        except OSError:
            pass

    # -- while recording -----------------------------------------------------------
    def _on_term(self, signum: int, frame: Any) -> Any:
        prev = self.previous
        if os.getpid() != self.pid or self.writing:  # a forked child's copy, or twice
            if os.getpid() != self.pid:
                signal.signal(signum, prev if prev is not None else signal.SIG_DFL)
                signal.raise_signal(signum)
            return None
        self.signalled = "SIGTERM"
        if prev is not signal.SIG_DFL:
            return prev(signum, frame)  # the user's handler decides what happens
        self.writing = True
        try:
            self.write_now("SIGTERM", inside=_inside(frame, "cutimeline.devices."))
        finally:  # die of the signal, as without us
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        return None

    def _at_exit(self) -> None:
        if os.getpid() == self.pid and not self.writing:
            last = getattr(sys, "last_value", None)  # an uncaught exception's
            self.writing = True
            self.write_now(type(last).__name__ if last is not None else "exit", last)

    def write_now(self, why: str, error: BaseException | None = None, *,
                  inside: bool = False) -> None:
        """Write the rank's file from what the session holds now, in the
        middle of the recording (the process ends next), partial for
        ``why``; ``error``: an exception that ended the program. When the
        device cannot hand its work over (``inside`` its own code, the
        interrupted main thread may hold its lock: it gets a second), the
        file holds the host side and ``meta["device_error"]`` says why.
        Never raises: a sentence on stderr says what went wrong."""
        rec = self.rec
        s = rec._session
        if s is None or rec._state != "recording":
            return
        if self.flusher is not None:  # the process ends: the file replaces the journal
            self.flusher.abandon()
        try:
            s.off = True  # the modes pass every op through from here
            # the interrupted main thread may hold the session's lock, which
            # nobody would ever release: the assembly below takes a new one
            s.lock = threading.Lock()
            meta, tl = dict(rec._meta), None
            if rec.device is not None:
                try:
                    harvest = _harvest(rec.device, 1.0 if inside else None)
                    tl = aligned(assemble(s, harvest, {**meta_at_stop(
                        s, harvest, meta, rec.device, rec.options), **s.cut_meta()}))
                except Exception as exc:  # mid-launch, say: keep the host side
                    meta["device_error"] = f"{type(exc).__name__}: {exc}"
            if tl is None:
                tl = assemble(s, None, {**meta_at_stop(s, None, meta, rec.device,
                                                        rec.options), **s.cut_meta()})
            tl = write_rank(tl, rec.options["out_dir"], error, f"{why} at step {s.step_number}")
            self._drop_journal(_rank_path(rec.options["out_dir"], tl))
        except Exception as exc:
            print(f"cutimeline: could not write this rank's file on {why} "
                  f"({type(exc).__name__}: {exc}).", file=sys.stderr)

    # -- at stop ---------------------------------------------------------------------
    def write(self, tl: Timeline, error: BaseException | None, step: int) -> Timeline:
        """The rank's file at stop (``ranks.write_rank``): partial when an
        interruption ended the recording in ``step``."""
        out = self.rec.options["out_dir"]
        tl = write_rank(tl, out, error, partial_reason(error, self.signalled, step))
        self._drop_journal(_rank_path(out, tl))
        return tl

    def hold(self) -> None:
        """From here until ``release``: SIGINT and SIGTERM are noted, not
        acted on, so that the file is written whole."""
        if threading.current_thread() is not threading.main_thread():
            return
        self.held = {}
        for sig in _HELD:
            prev = signal.getsignal(sig)
            if prev is not None and prev is not signal.SIG_IGN:
                self.held[sig] = prev
                signal.signal(sig, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self.pending.append(signum)

    def release(self) -> None:
        """Put every handler back exactly, unregister the atexit function,
        then deliver what ``hold`` held back."""
        atexit.unregister(self._at_exit)
        self.close_journal(stopped=False)  # closed already, unless stop() failed
        held, self.held = self.held or {}, None
        for sig, prev in held.items():
            if sig == signal.SIGTERM and self.previous is not None:
                prev = self.previous if prev == self._on_term else prev
            signal.signal(sig, prev)
        if signal.SIGTERM not in held and self.previous is not None and \
                threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == self._on_term:
            signal.signal(signal.SIGTERM, self.previous)
        self.previous = None
        for sig in dict.fromkeys(self.pending):  # each once, in the order they came
            signal.raise_signal(sig)


def _rank_path(out_dir: str, tl: Timeline) -> str:
    return os.path.join(out_dir, RANK_FILE.format(rank=tl.meta.get("rank", 0)))
