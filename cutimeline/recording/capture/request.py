"""The sender's side of on-demand capture: ``cutimeline capture PID``.

``send_capture`` runs in another process than the job (as the job's user,
or root): it checks the process and its marker in the job's private folder
(``files.py``: the trust model), held open by descriptor
(``heldfolder.Folder``) from the check to the write, so a folder swapped
for a link meanwhile receives nothing; it publishes the request only where
none is pending (the job takes one request per capture) and sends the
signal the job armed with, if the job handles it now. The request says so
(``"signalled": true``), so the job matches that signal to it in whichever
order the two arrive (``recording/ondemand.py``).
"""

from __future__ import annotations

import json
import os
import signal as _signal
import time
from typing import Any

from ...errors import CutimelineError
from .files import armed_name, below, handles, inside, private_folder, process, request_name
from .heldfolder import Folder

__all__ = ["send_capture", "count_steps", "default_out"]


def count_steps(value: Any, where: str) -> int:
    """``value`` if a whole number ≥ 1; ``where``: how the user wrote it, {} the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CutimelineError(f"{where.format(repr(value))} must be a whole number "
                              f"of steps ≥ 1.")
    return value


def default_out(pid: int, folder: str) -> str:
    """``folder/cutimeline-<pid>-<date>-<time>.<ns>.ctl``: unique to the
    nanosecond and the process."""
    ns = time.time_ns()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(ns // 10 ** 9))
    return os.path.join(folder, f"cutimeline-{pid}-{stamp}.{ns % 10 ** 9:09d}.ctl")


def send_capture(pid: int, steps: int = 5, out: str | os.PathLike | None = None, *,
                 timeout: float | None = None, folder: str | None = None) -> str:
    """Ask the armed process ``pid`` to capture its next ``steps`` steps
    into ``out`` (made absolute here; it must lie under the folder the job
    armed with; default ``<that folder>/cutimeline-<pid>-<time>.ctl``):
    check the process and its marker (``files.py``), write the
    request file (refused while an earlier one is pending), then send the
    signal it armed with if it handles it now. With ``timeout`` (seconds),
    wait until the file is written. Returns the path. ``folder``: the
    job's capture folder, when it is not the one its environment names
    (``files.capture_dir``)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise CutimelineError(f"send_capture(pid={pid!r}) must be a process id.")
    steps = count_steps(steps, "send_capture(steps={})")
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
    files = _job_folder(pid, proc.uid, proc.env, folder, not_armed)
    with files:  # every file below it opened through it: no link is followed
        marker = files.child(armed_name(pid))
        try:
            data = files.read(armed_name(pid), proc.uid)
        except CutimelineError as exc:
            raise CutimelineError(not_armed.format(
                f"{str(exc).rstrip('.')}; a marker is a regular file of uid {proc.uid}'s, "
                f"the process's user")) from None
        if data is None:
            raise CutimelineError(not_armed.format(f"{marker} is missing"))
        try:
            armed = json.loads(data.decode("utf-8"))
        except ValueError:
            armed = None
        if not isinstance(armed, dict) or armed.get("pid") != pid or \
                armed.get("armed") is not True:
            raise CutimelineError(not_armed.format(f"{marker} is not a marker of this "
                                                   f"process"))
        if proc.start is not None and armed.get("start") != proc.start:
            raise CutimelineError(
                f"The marker {marker} was left by an earlier process {pid}, which ended "
                f"without removing it (the process now {pid} started later): process "
                f"{pid} is not armed. No signal was sent.")
        out_dir = armed.get("out_dir")
        if not isinstance(out_dir, str) or not os.path.isabs(out_dir):
            raise CutimelineError(not_armed.format(f"{marker} names no folder for captures"))
        out = os.path.abspath(os.fspath(out)) if out is not None else \
            default_out(pid, out_dir)
        if not inside(out, out_dir) or below(out, out_dir) is None and \
                below(out, os.path.realpath(out_dir)) is None:  # (as the job checks)
            raise CutimelineError(f"{out} lies outside {out_dir}, the folder process {pid} "
                                  f"writes captures under (ctl.arm(out_dir=...)); give a "
                                  f"path inside it.")
        if os.path.lexists(out):
            raise CutimelineError(f"{out} exists already; give another out path or "
                                  f"remove it.")
        signum = armed.get("signal")
        # only the signal it armed with, and only if it handles it now
        signalled = isinstance(signum, int) and not isinstance(signum, bool) and \
            signum in _signal.valid_signals() and handles(pid, signum) is not False
        request = {"steps": steps, "out": out, "signalled": signalled}
        if not files.write_json(request_name(pid), request, owner=proc.uid, exclusive=True):
            raise CutimelineError(
                f"Process {pid} has not yet taken the capture request in "
                f"{files.child(request_name(pid))} (it takes one at its next step "
                f"boundary); wait for that capture, or remove the file to withdraw it.")
    if signalled:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            raise CutimelineError(f"Process {pid} ended before it could be signalled; "
                                  f"no capture will be written.") from None
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


def _job_folder(pid: int, uid: int, env: dict[str, str] | None, folder: str | None,
                not_armed: str) -> Folder:
    """The private folder of process ``pid`` (user ``uid``), held open and
    checked: ``folder`` if given, else the one its environment ``env``
    names, else (changed since) the one ours names, whichever holds its
    marker."""
    if folder is not None:
        return private_folder(uid, path=folder)
    held, errors = [], []
    for e in (env, None) if pid != os.getpid() else (None,):
        try:
            held.append(private_folder(uid, e))
        except CutimelineError as exc:
            errors.append(str(exc))
    if not held:
        raise CutimelineError(not_armed.format(errors[0]))
    chosen = next((f for f in held if f.lstat(armed_name(pid)) is not None), held[0])
    for f in held:
        if f is not chosen:
            f.close()
    return chosen
