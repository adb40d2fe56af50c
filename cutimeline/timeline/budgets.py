"""How much of an input cutimeline reads: declared budgets, checked before reading.

A file says how big it is in fields the reader would otherwise believe: a
``.ctl`` file's manifest claims rows, its zip claims members' sizes, a
gzip stream inflates to what it likes, a path may name ``/dev/zero`` or a
FIFO. Each budget bounds what one such claim may cost, from the bytes the
file really has, so a small file can never make the reader allocate much:

* ``input_file`` — only regular files are read (a FIFO, a character
  device such as ``/dev/zero`` or ``/dev/urandom``, a socket is refused
  before it is read, so nothing waits for a writer or reads forever);
* ``row_budget`` — a ``.ctl`` file claims at most ``FREE_ROWS`` rows (and
  strings) plus ``ROWS_PER_BYTE`` per byte of the file;
* ``meta_budget`` — its ``meta.json`` inflates to at most
  ``FREE_META_BYTES`` plus ``META_PER_COLUMN_BYTE`` per byte of its
  columns;
* ``text_budget`` — a gzipped trace inflates to at most
  ``FREE_TEXT_BYTES`` plus ``TEXT_PER_GZIP_BYTE`` per compressed byte;
* ``out_of_memory`` — what the reader says when memory runs out anyway
  (a real file too big for this machine): a sentence that names the file
  and the size it claims.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from ..errors import CutimelineError

__all__ = ["FREE_ROWS", "ROWS_PER_BYTE", "FREE_META_BYTES", "META_PER_COLUMN_BYTE",
           "FREE_TEXT_BYTES", "TEXT_PER_GZIP_BYTE", "input_file", "row_budget",
           "meta_budget", "text_budget", "out_of_memory"]

#: rows (and strings) any .ctl file may claim: 10^6 rows decode to ~100 MB,
#: however few bytes describe them (a run of identical ops stores nothing
#: but its first row)
FREE_ROWS = 2 ** 20
#: rows per byte of file past those: recordings store 3-40 bytes per op
#: (timestamps never repeat exactly), so 64 rows per byte is 200× the
#: densest file cutimeline writes, and 10^8 rows need at least 1.5 MB
ROWS_PER_BYTE = 64
#: meta.json may inflate to this much whatever the file: the meta of a
#: recording (per-signature costs, per-collective rows) is a few MB at most
FREE_META_BYTES = 16 << 20
#: and to this many bytes per stored byte of its columns past that (a
#: merged run's collectives grow with its ops, at most a few bytes each)
META_PER_COLUMN_BYTE = 16
#: a gzipped trace may inflate to this much whatever its size
FREE_TEXT_BYTES = 64 << 20
#: and to this many bytes per compressed byte past that: Kineto's JSON
#: compresses 8-30× (timestamps and ids differ on every line); deflate
#: makes up to 1,032 bytes of one, which only a crafted file comes near
TEXT_PER_GZIP_BYTE = 100


def input_file(path: str) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file; anything else
    (a folder, a FIFO, a device, a socket) is refused with a sentence, and
    a FIFO is opened without waiting for a writer to check that. A path
    that cannot be opened raises the OSError (FileNotFoundError, ...)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)"
                if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "not a regular file")
        raise CutimelineError(f"{path} is {kind}; cutimeline reads regular files only "
                              f"(save a stream to a file first).")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def row_budget(path: str, rows: int, file_bytes: int) -> None:
    """Refuse a file of ``file_bytes`` that claims ``rows`` rows and strings
    in all, past ``FREE_ROWS + ROWS_PER_BYTE · file_bytes``."""
    most = FREE_ROWS + ROWS_PER_BYTE * file_bytes
    if rows > most:
        raise CutimelineError(
            f"{path} is damaged: it claims {rows:,} rows in {file_bytes:,} bytes, which "
            f"such a file cannot hold (at most {most:,}: {ROWS_PER_BYTE} per byte past "
            f"{FREE_ROWS:,}).")


def meta_budget(path: str, claimed: int, column_bytes: int) -> None:
    """Refuse a ``meta.json`` that claims to inflate to ``claimed`` bytes
    beside ``column_bytes`` of stored columns."""
    most = FREE_META_BYTES + META_PER_COLUMN_BYTE * column_bytes
    if claimed > most:
        raise CutimelineError(
            f"{path} is damaged: its meta.json claims {claimed:,} bytes, more than the "
            f"meta of {column_bytes:,} bytes of columns can be ({most:,}).")


def text_budget(gzip_bytes: int) -> int:
    """The most bytes a gzipped trace of ``gzip_bytes`` may inflate to."""
    return FREE_TEXT_BYTES + TEXT_PER_GZIP_BYTE * gzip_bytes


def out_of_memory(path: str, claimed: str) -> CutimelineError:
    """The error for a file whose reading ran out of memory: ``claimed`` says
    what it claims to hold ("10,000,000 rows", "6 GB of JSON")."""
    return CutimelineError(f"{os.fspath(path)} claims {claimed}, and reading it ran out "
                           f"of memory; run on a machine with more memory, or record "
                           f"fewer steps (ctl.record(steps=...)).")
