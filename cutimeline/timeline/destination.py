"""Where cutimeline writes a file: what it may replace, and how.

Every file cutimeline writes goes through here: ``Timeline.save``,
``Timeline.to_parquet``, ``export_chrome``, the figures (``plot``,
``plot_compare``, the what-if figure) and a recording's journal
(``journal.py``). One policy for all of them:

* **Only a regular file is replaced.** A destination that exists and is a
  directory, FIFO, socket or device node is refused with a
  ``CutimelineError`` naming what it is: replacing ``/dev/null`` as root
  would leave a regular file where the device was, and writing into a FIFO
  waits for a reader that may never come.
* **A symlink is replaced, never written through**: the new file takes the
  link's place and the file it pointed to is left as it was, so a write
  touches nothing outside the destination's own folder (a link planted in
  a shared folder cannot aim a write elsewhere).
* **Whole or not at all**: the bytes go to a new temporary file beside the
  destination, created exclusively and without following links
  (``O_EXCL | O_NOFOLLOW``, mode 0666 less the umask, as any file the
  user writes), which replaces the destination (``os.replace``) once
  written; a failed write removes it and leaves the destination as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import CutimelineError

__all__ = ["check", "replacing", "temporary", "commit"]

_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def check(path: str | os.PathLike) -> None:
    """Refuse ``path`` when it exists and is neither a regular file nor a
    symlink (see the module doc); an absent path is fine."""
    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # absent (or unreachable: the write itself will say why)
        return
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    raise CutimelineError(f"Cannot write {path}: it is {kind}, and cutimeline replaces "
                          f"only regular files (a symlink is replaced, not followed); "
                          f"give the path of a file.")


def temporary(path: str | os.PathLike) -> tuple[int, str]:
    """A new temporary file beside ``path``: its descriptor (open for
    writing) and its path, for ``commit``."""
    path = os.fspath(path)
    check(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".cutimeline-{uuid.uuid4().hex[:12]}.tmp")
    return os.open(tmp, _FLAGS, 0o666), tmp


def commit(tmp: str, path: str | os.PathLike) -> None:
    """Put the written ``tmp`` in ``path``'s place (checked again: it may
    have changed while the file was written)."""
    check(path)
    os.replace(tmp, os.fspath(path))


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """``with replacing(path) as f:`` write ``f``; at the block's end the
    file replaces ``path``, and if the block raises it is removed."""
    fd, tmp = temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        commit(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
