"""The files an on-demand capture is asked through, and whom they trust.

An armed job (``recording/ondemand.py``) and ``cutimeline capture PID``
talk through two small JSON files in a folder of the job's user: the
job's *marker* ``armed-<pid>`` (its pid, uid, start time, signal, and the
folder its captures may be written under) and the sender's *request*
``capture-<pid>`` (steps, out, whether a signal comes with it). The trust
model:

* **The folder is private.** ``$XDG_RUNTIME_DIR/cutimeline`` when
  ``$XDG_RUNTIME_DIR`` is a folder of the user's that no one else may
  enter (systemd makes ``/run/user/<uid>`` so), else
  ``<temp dir>/cutimeline-<uid>``; made 0700, and used only when it is a
  real folder, owned by the user, with no access for group or others.
  Anything else there (another user's folder planted first, a symlink)
  is refused with a sentence: no file of ours is made or read in a folder
  someone else controls.
* **Paths are walked, not trusted** (``heldfolder.Folder``): a folder
  swapped for a link after the check is not where anything goes, so root
  capturing another user's job writes only in the folder it checked. A
  request is published only where none is pending (a hard link, which
  fails on an existing name); a file is read only if owned by the job's
  user.
* **The sender checks the process, not just the pid**: the marker must be
  owned by the process's user, name its pid and carry its start time
  (``/proc/<pid>/stat``), so a marker left by a job killed with SIGKILL
  does not speak for a process that reuses its pid; the signal is sent
  only when the process handles it now (``handles``): SIGUSR2's default
  would kill it. Without ``/proc`` (not Linux) those two checks are
  skipped.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from typing import NamedTuple

from ...errors import CutimelineError
from .heldfolder import MAX_BYTES, Folder, kind

__all__ = ["MAX_BYTES", "Folder", "Process", "private_folder", "capture_dir",
           "request_name", "armed_name", "request_path", "armed_path", "process",
           "handles", "start_time", "inside", "below"]


def _private(folder: Folder, uid: int) -> str | None:
    """What is wrong with the held ``folder`` as a private folder of
    ``uid``; None: nothing. Checked on the descriptor, not the path."""
    st = os.fstat(folder.fd)
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"its mode {stat.S_IMODE(st.st_mode):04o} lets others in (it must be 0700)"
    return None


def private_folder(uid: int | None = None, env: Mapping[str, str] | None = None, *,
                   create: bool = False, path: str | None = None) -> Folder:
    """The private folder of ``uid`` (default: this process's user) whose
    environment is ``env`` (default: this process's), see the module doc,
    held open and checked; made if missing when ``create``. ``path``:
    that folder, named (not derived from ``env``). CutimelineError when it
    cannot be used."""
    uid = os.geteuid() if uid is None else uid
    if path is None:
        path = _derive(uid, env)
    parent, name = os.path.split(os.path.abspath(path))
    wrong = None
    with Folder.open(parent, follow=True) as above:
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=above.fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise CutimelineError(f"Cannot make the folder {path} for on-demand "
                                      f"capture files ({exc.strerror}); set "
                                      f"XDG_RUNTIME_DIR or TMPDIR to a folder of "
                                      f"yours.") from None
        try:
            folder = above.walk(name)
        except CutimelineError:
            st = above.lstat(name)
            wrong = "it does not exist" if st is None else \
                f"it is not a folder ({kind(st.st_mode)})"
        else:
            wrong = _private(folder, uid)
            if wrong is not None:
                folder.close()
    if wrong is not None:
        raise CutimelineError(
            f"{path} cannot hold on-demand capture files: {wrong}. Someone else may have "
            f"made it; remove it, or set XDG_RUNTIME_DIR (or TMPDIR) to a folder only "
            f"you can enter.")
    folder.path = path
    return folder


def _derive(uid: int, env: Mapping[str, str] | None) -> str:
    """The private folder's path for ``uid`` in ``env`` (see the module doc)."""
    xdg = (os.environ if env is None else env).get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg):
        try:
            with Folder.open(xdg) as runtime:
                if _private(runtime, uid) is None:
                    return os.path.join(xdg, "cutimeline")
        except CutimelineError:
            pass
    base = tempfile.gettempdir() if env is None else next(
        (env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k)), "/tmp")
    return os.path.join(base, f"cutimeline-{uid}")


def capture_dir(uid: int | None = None, env: Mapping[str, str] | None = None, *,
                create: bool = False) -> str:
    """The path of ``private_folder(uid, env, create=create)``, checked."""
    with private_folder(uid, env, create=create) as folder:
        return folder.path


def request_name(pid: int) -> str:
    """The request file's name (in the private folder) that process ``pid`` polls."""
    return f"capture-{pid}"


def armed_name(pid: int) -> str:
    """The marker file's name of an armed process ``pid``."""
    return f"armed-{pid}"


def request_path(pid: int, folder: str | None = None) -> str:
    """The request file process ``pid`` polls (in ``folder``, default
    ``capture_dir()``), for messages and by-hand requests."""
    return os.path.join(folder or capture_dir(), request_name(pid))


def armed_path(pid: int, folder: str | None = None) -> str:
    """The marker file of an armed process ``pid``."""
    return os.path.join(folder or capture_dir(), armed_name(pid))


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


def below(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` when it is spelled under it (as
    written, no link resolved, ``..`` folded); None when it is not."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(folder))
    return None if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel
