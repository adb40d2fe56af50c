"""A folder held by a descriptor, and the files below it opened through it.

``Folder`` is the one path walker of on-demand capture (``files.py``,
``request.py``, ``recording/ondemand.py``): the folder is opened once (``O_DIRECTORY``, its own name
not followed unless asked), and every name below it is opened relative to
that descriptor (``dir_fd``: openat, mkdirat, renameat, linkat), one
component at a time, never following a link. A path is never looked up
twice, so a link swapped in after a check cannot redirect what follows:
the check is the open. Files are written under a new temporary name
(``O_EXCL | O_NOFOLLOW``) and renamed (or hard-linked) into place, whole
or not at all; they are read only if regular, owned by the expected user
and at most ``MAX_BYTES``. Errors are CutimelineError sentences.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from ...errors import CutimelineError

__all__ = ["MAX_BYTES", "Folder", "kind"]

MAX_BYTES = 1 << 16  # a marker or request is a few hundred bytes
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_READ = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_KINDS = ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a symlink", "a FIFO", ...)."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class Folder:
    """A folder held by a descriptor: every file and folder below it is
    opened relative to that descriptor (``dir_fd``), a component at a time,
    never following a link, so that no path is looked up twice. ``path``
    names it in messages only. Close it (or use ``with``)."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path: str, *, create: bool = False, follow: bool = False) -> Folder:
        """The folder ``path`` (absolute): its own name not followed if a
        link (unless ``follow``: a folder the user named, links and all);
        made (with its parents) first if missing and ``create``."""
        if os.open not in os.supports_dir_fd:
            raise CutimelineError("On-demand capture needs a system whose os.open takes "
                                  "dir_fd (Linux, macOS, BSD); this one does not.")
        try:
            if create:
                os.makedirs(path, exist_ok=True)
            fd = os.open(path, _DIR | (0 if follow else _NOFOLLOW))
        except OSError as exc:
            raise CutimelineError(f"Cannot open the folder {path}: "
                                  f"{_why(path, exc)}.") from None
        return cls(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cutimeline Folder {self.path!r} fd={self.fd}>"

    def child(self, name: str) -> str:
        """``name``'s path, for messages."""
        return os.path.join(self.path, name)

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own status (a link not followed); None if absent."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def walk(self, rel: str, *, create: bool = False, mode: int = 0o777) -> Folder:
        """The folder ``rel`` (a relative path; "" is this one) as a new
        ``Folder``: each component opened ``O_DIRECTORY | O_NOFOLLOW``
        relative to the one above, made (``mode``, less the umask) if
        missing and ``create``. A component that is a link or not a folder
        is refused with a CutimelineError: checked, then made, where it is."""
        names = [n for n in rel.split(os.sep) if n not in ("", ".")]
        if ".." in names:
            raise CutimelineError(f"{rel!r} climbs out of {self.path} ('..'); give a "
                                  f"path below it.")
        fd, path = os.dup(self.fd), self.path
        try:
            for name in names:
                path = os.path.join(path, name)
                if create:
                    try:
                        os.mkdir(name, mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise CutimelineError(f"Cannot make the folder {path} "
                                              f"({exc.strerror}).") from None
                try:
                    inner = os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    st = self._lstat_at(fd, name)
                    why = "it does not exist" if st is None else \
                        f"it is {kind(st.st_mode)}" if not stat.S_ISDIR(st.st_mode) else \
                        exc.strerror
                    raise CutimelineError(f"Cannot use the folder {path}: {why}; "
                                          f"cutimeline follows no link below "
                                          f"{self.path}.") from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return Folder(fd, path)

    @staticmethod
    def _lstat_at(fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None

    def read(self, name: str, uid: int, *, shown: str | None = None) -> bytes | None:
        """The bytes of ``name``; None if absent. CutimelineError if it is
        not a regular file owned by ``uid`` (a link is not followed) or is
        larger than ``MAX_BYTES``. ``shown``: its name in messages."""
        path = self.child(shown or name)
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            st = self.lstat(name)
            raise CutimelineError(f"{path} is {kind(st.st_mode)}, not a regular file." if st
                                  else f"Cannot read {path} ({exc.strerror}).") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise CutimelineError(f"{path} is {kind(st.st_mode)}, not a regular file.")
            if st.st_uid != uid:
                raise CutimelineError(f"{path} belongs to uid {st.st_uid}, not {uid}.")
            if st.st_size > MAX_BYTES:
                raise CutimelineError(f"{path} is larger than {MAX_BYTES} bytes.")
            return f.read(MAX_BYTES)

    def take(self, name: str, uid: int) -> bytes | None:
        """Read ``name`` (as ``read``) and remove it, whatever it is; None
        if absent. It is first renamed to a name of its own, so a request
        published meanwhile under ``name`` is not removed unread."""
        taken = f".{name}.taken-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(name, taken, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CutimelineError(f"Cannot take {self.child(name)} "
                                  f"({exc.strerror}).") from None
        try:
            return self.read(taken, uid, shown=name)
        finally:
            self.remove(taken)

    def remove(self, name: str) -> None:
        """Remove the file (or link) ``name`` if it is there."""
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)

    @contextlib.contextmanager
    def replacing(self, name: str, *, mode: int = 0o666, owner: int | None = None,
                  exclusive: bool = False) -> Iterator[BinaryIO]:
        """``with folder.replacing(name) as f:`` write ``f``, a new
        temporary file here (``O_EXCL | O_NOFOLLOW``, ``mode`` less the
        umask, given to uid ``owner``, which only root may do); at the
        block's end it takes ``name``'s place (a link there is replaced,
        not followed; a folder, FIFO or device is refused), or with
        ``exclusive`` only if ``name`` is free (else ``FileExistsError``).
        If the block raises, the temporary file is removed."""
        if not exclusive:
            self._check_replaceable(name)
        tmp = f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            fd = os.open(tmp, _CREATE, mode, dir_fd=self.fd)
        except OSError as exc:
            raise CutimelineError(f"Cannot write in {self.path} "
                                  f"({exc.strerror}).") from None
        try:
            with os.fdopen(fd, "wb") as f:
                if owner is not None and owner != os.geteuid():
                    os.fchown(f.fileno(), owner, -1)
                yield f
            if exclusive:  # link(2) fails on an existing name: nothing is replaced
                os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd,
                        follow_symlinks=False)
                self.remove(tmp)
            else:
                self._check_replaceable(name)  # again: it may have changed meanwhile
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(tmp)
            raise

    def _check_replaceable(self, name: str) -> None:
        st = self.lstat(name)
        if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise CutimelineError(f"Cannot write {self.child(name)}: it is "
                                  f"{kind(st.st_mode)}, and cutimeline replaces only "
                                  f"regular files; give the path of a file.")

    def write_json(self, name: str, data: dict[str, Any], *, owner: int | None = None,
                   exclusive: bool = False) -> bool:
        """Write ``data`` as JSON to ``name`` (mode 0600, see ``replacing``);
        False, and nothing written, when ``exclusive`` and ``name`` exists."""
        try:
            with self.replacing(name, mode=0o600, owner=owner, exclusive=exclusive) as f:
                f.write(json.dumps(data).encode())
        except FileExistsError:
            return False
        except OSError as exc:
            raise CutimelineError(f"Cannot write {self.child(name)} "
                                  f"({exc.strerror}).") from None
        return True


def _why(path: str, exc: OSError) -> str:
    """What ``path`` is, when opening it as a folder failed with ``exc``."""
    try:
        st = os.lstat(path)
    except OSError:
        return "it does not exist" if isinstance(exc, FileNotFoundError) else exc.strerror
    return f"it is not a folder ({kind(st.st_mode)})" if not stat.S_ISDIR(st.st_mode) \
        else exc.strerror
