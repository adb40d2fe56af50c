"""The files an on-demand capture is asked through, and whom they trust.

An armed job (``ondemand.py``) and ``cutimeline capture PID`` talk through
two small JSON files in a folder of the job's user: the job's *marker*
``armed-<pid>`` (its pid, uid, start time, signal, and the folder its
captures may be written under) and the sender's *request*
``capture-<pid>`` (steps, out). The trust model:

* **The folder is private.** ``$XDG_RUNTIME_DIR/cutimeline`` when
  ``$XDG_RUNTIME_DIR`` is a folder of the user's that no one else may
  enter (systemd makes ``/run/user/<uid>`` so), else
  ``<temp dir>/cutimeline-<uid>``; made 0700, and used only when it is a
  real folder (not a link), owned by the user, with no access for group or
  others. Anything else at that path (another user's folder planted
  there first, a symlink) is refused with a sentence: no file of ours is
  made or read in a folder someone else controls.
* **Files are made without trusting the path**: a new temporary name,
  created ``O_EXCL | O_NOFOLLOW`` (mode 0600), then renamed into place. A
  file is read only if it is a regular file (opened ``O_NOFOLLOW``) owned
  by the job's user, and only its first ``MAX_BYTES``.
* **The sender checks the process, not just the pid**: the marker must be
  owned by the process's user, name its pid, and carry its start time
  (``/proc/<pid>/stat``), so a marker left by a job killed with SIGKILL
  does not speak for a process that reuses its pid; the signal is sent
  only when the process handles it now (``SigCgt`` in
  ``/proc/<pid>/status``): SIGUSR2's default would kill it. Without
  ``/proc`` (not Linux) those two checks are skipped.

The job then checks what a request asks: its output must lie under the
folder chosen at ``arm()`` (``ondemand.py``).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..errors import CutimelineError

__all__ = ["MAX_BYTES", "Process", "capture_dir", "request_path", "armed_path",
           "write_private", "read_owned", "process", "handles", "start_time", "inside"]

MAX_BYTES = 1 << 16  # a marker or request is a few hundred bytes
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
           | getattr(os, "O_CLOEXEC", 0))
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)


def _private(path: str, uid: int) -> str | None:
    """What is wrong with ``path`` as a private folder of ``uid``; None: nothing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder" + (" (a symlink)" if stat.S_ISLNK(st.st_mode) else "")
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"its mode {stat.S_IMODE(st.st_mode):04o} lets others in (it must be 0700)"
    return None


def capture_dir(uid: int | None = None, env: Mapping[str, str] | None = None, *,
                create: bool = False) -> str:
    """The private folder of ``uid`` (default: this process's user) whose
    environment is ``env`` (default: this process's), see the module doc;
    made if missing when ``create``. CutimelineError when it cannot be used."""
    uid = os.geteuid() if uid is None else uid
    xdg = (os.environ if env is None else env).get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and _private(xdg, uid) is None:
        path = os.path.join(xdg, "cutimeline")
    else:
        base = tempfile.gettempdir() if env is None else next(
            (env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k)), "/tmp")
        path = os.path.join(base, f"cutimeline-{uid}")
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise CutimelineError(f"Cannot make the folder {path} for on-demand capture "
                                  f"files ({exc.strerror}); set XDG_RUNTIME_DIR or TMPDIR "
                                  f"to a folder of yours.") from None
    wrong = _private(path, uid)
    if wrong is not None:
        raise CutimelineError(
            f"{path} cannot hold on-demand capture files: {wrong}. Someone else may have "
            f"made it; remove it, or set XDG_RUNTIME_DIR (or TMPDIR) to a folder only "
            f"you can enter.")
    return path


def request_path(pid: int, folder: str | None = None) -> str:
    """The request file process ``pid`` polls (in ``folder``, default ``capture_dir()``)."""
    return os.path.join(folder or capture_dir(), f"capture-{pid}")


def armed_path(pid: int, folder: str | None = None) -> str:
    """The marker file of an armed process ``pid``."""
    return os.path.join(folder or capture_dir(), f"armed-{pid}")


def write_private(path: str, data: dict[str, Any], owner: int | None = None) -> None:
    """Write ``data`` as JSON to ``path``: a new temporary file beside it
    (``O_EXCL | O_NOFOLLOW``, 0600; given to uid ``owner``, which only root
    may do), renamed into place."""
    tmp = f"{path}.{os.getpid()}-{time.time_ns()}.tmp"
    fd = os.open(tmp, _CREATE, 0o600)
    try:
        if owner is not None and owner != os.geteuid():
            os.fchown(fd, owner, -1)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_owned(path: str, uid: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file owned by ``uid`` (not a
    link; at most ``MAX_BYTES``), else None (missing, foreign or too big)."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_BYTES)
    finally:
        if fd >= 0:
            os.close(fd)


class Process(NamedTuple):
    """What ``/proc`` says of a process: its effective uid, its start time
    (clock ticks after boot; None without ``/proc``) and environment."""
    uid: int
    start: int | None
    env: dict[str, str] | None


def process(pid: int) -> Process | None:
    """``pid``'s ``Process``, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _without_proc(pid)
    except ProcessLookupError:
        return None
    uid = int(next(ln.split()[2] for ln in status.splitlines() if ln.startswith("Uid:")))
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.decode("utf-8", "replace").split("=", 1) for kv in
                       f.read().split(b"\0") if b"=" in kv)
    except OSError:  # another user's, unless we are root
        env = None
    return Process(uid, int(fields[19]), env)


def _without_proc(pid: int) -> Process | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return Process(-1, None, None)  # alive, another user's
    return Process(os.geteuid(), None, None)


def handles(pid: int, signum: int) -> bool | None:
    """Whether ``pid`` catches ``signum`` now (a handler is installed:
    ``SigCgt``); None where ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next(ln for ln in f if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return None
    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)


def start_time(pid: int) -> int | None:
    """``pid``'s start time (``Process.start``) if ``/proc`` has it."""
    p = process(pid)
    return None if p is None else p.start


def inside(path: str, folder: str) -> bool:
    """Whether ``path``, links resolved, lies under ``folder``."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, top]) == top
