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
* ``memory_budget`` — what a file claims (rows, trace events, JSON text)
  would take at most ``max_bytes()`` of memory through load → analyze →
  plot → export, estimated before the reader allocates it
  (``timeline_bytes``, ``PEAK_PER_TEXT_BYTE``, ``PEAK_PER_EVENT``); the
  budget is ``MAX_BYTES`` (at most half this machine's memory) unless
  ``max_bytes=`` or ``$CUTIMELINE_MAX_BYTES`` says otherwise. The bounds
  above hold a claim to the file's bytes, which a small file can still
  satisfy with millions of identical rows; this one holds it to memory;
* ``out_of_memory`` — what the reader says when memory runs out anyway
  (a real file too big for this machine): a sentence that names the file
  and the size it claims.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from typing import BinaryIO

from ..errors import CutimelineError
from .schema import SCHEMA

__all__ = ["FREE_ROWS", "ROWS_PER_BYTE", "FREE_META_BYTES", "META_PER_COLUMN_BYTE",
           "FREE_TEXT_BYTES", "TEXT_PER_GZIP_BYTE", "input_file", "row_budget",
           "meta_budget", "text_budget", "out_of_memory", "MAX_BYTES", "ENV_MAX_BYTES",
           "PEAK_PER_COLUMN_BYTE", "STRING_BYTES", "PEAK_PER_TEXT_BYTE", "PEAK_PER_EVENT",
           "max_bytes", "timeline_bytes", "rows_claimed", "memory_budget"]

#: rows (and strings) any .ctl file may claim: 10^6 rows decode to ~100 MB,
#: however few bytes describe them (a run of identical ops stores nothing
#: but its first row)
FREE_ROWS = 2 ** 20
#: rows per byte of file past those: recordings store 3-40 bytes per op
#: (timestamps never repeat exactly), so 64 rows per byte is 200× the
#: densest file cutimeline writes, and 10^8 rows need at least 1.5 MB
ROWS_PER_BYTE = 64
#: meta.json may inflate to this much whatever the file: the meta of a
#: recording (per-signature costs; before format 5, per-collective rows)
#: is a few MB at most
FREE_META_BYTES = 16 << 20
#: and to this many bytes per stored byte of its columns past that (a
#: merged run's collectives, in the meta of files before format 5, grow
#: with its ops, at most a few bytes each)
META_PER_COLUMN_BYTE = 16
#: a gzipped trace may inflate to this much whatever its size
FREE_TEXT_BYTES = 64 << 20
#: and to this many bytes per compressed byte past that: Kineto's JSON
#: compresses 8-30× (timestamps and ids differ on every line); deflate
#: makes up to 1,032 bytes of one, which only a crafted file comes near
TEXT_PER_GZIP_BYTE = 100

#: the memory a file may claim to need when neither ``max_bytes=`` nor
#: ``$CUTIMELINE_MAX_BYTES`` says (and at most half the machine's memory):
#: a trace of 2·10^6 events, a recording of 5·10^6 ops with a kernel each
#: fit; a 378 KB file claiming 2·10^7 ops (~8 GB) does not
MAX_BYTES = 4 << 30
ENV_MAX_BYTES = "CUTIMELINE_MAX_BYTES"
#: peak bytes through load → analyze → plot → export per byte of the loaded
#: Timeline's columns: 2.6× at load (every column decodes through int64),
#: 5.4× through analyze, 6.5× through plot and export, measured with
#: tracemalloc on a recording of 400,000 ops and 400,000 kernels
PEAK_PER_COLUMN_BYTE = 7
#: bytes one string of the string table takes loaded (a str and its slot)
STRING_BYTES = 64
#: peak bytes while the JSON of a trace is parsed, per byte of its text
#: (measured 4.0-4.6× on torch.profiler traces of 2 and 10 MB)
PEAK_PER_TEXT_BYTE = 5
#: peak bytes per trace event through import → analyze, its parsed JSON
#: included (measured 1.2-2.1 kB on the same traces)
PEAK_PER_EVENT = 2048


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


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def max_bytes(given: int | None = None) -> int:
    """The memory budget in bytes: ``given`` (a reader's ``max_bytes``
    argument), else ``$CUTIMELINE_MAX_BYTES`` (bytes, or a size such as
    ``16G``, ``512M``), else ``MAX_BYTES`` or half the machine's memory,
    whichever is less. A value that is no positive size raises
    CutimelineError."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
            raise CutimelineError(f"max_bytes={given!r} must be a positive number of "
                                  f"bytes (e.g. 16 << 30 for 16 GiB).")
        return given
    text = os.environ.get(ENV_MAX_BYTES)
    if text is not None:
        match = _SIZE.fullmatch(text)
        value = int(float(match[1]) * _UNITS[match[2].lower()]) if match else 0
        if value <= 0:
            raise CutimelineError(f"{ENV_MAX_BYTES}={text!r} is not a positive size; give "
                                  f"bytes (17179869184) or a size such as 16G or 512M.")
        return value
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on every platform
        memory = 0
    return min(MAX_BYTES, memory // 2) if memory > 0 else MAX_BYTES


def timeline_bytes(rows: Mapping[str, int], strings: int = 0) -> int:
    """The peak bytes a Timeline of ``rows`` (table → rows) and ``strings``
    strings takes through load → analyze → plot → export (an estimate:
    ``PEAK_PER_COLUMN_BYTE`` × its columns' bytes)."""
    columns = sum(n * sum(dtype.itemsize for _, dtype in SCHEMA[name])
                  for name, n in rows.items())
    return PEAK_PER_COLUMN_BYTE * columns + STRING_BYTES * strings


def rows_claimed(rows: Mapping[str, int], strings: int = 0) -> str:
    """What a file claims, in words: "20,000,000 rows (20,000,000 ops) and
    2 strings"."""
    tables = ", ".join(f"{n:,} {name}" for name, n in rows.items() if n)
    return (f"{sum(rows.values()):,} rows{f' ({tables})' if tables else ''} and "
            f"{strings:,} string{'' if strings == 1 else 's'}")


def memory_budget(path: str, needed: int, claimed: str, given: int | None = None) -> None:
    """Refuse a file that claims ``claimed`` ("20,000,000 rows"), which
    would take ``needed`` bytes of memory, past ``max_bytes(given)``."""
    budget = max_bytes(given)
    if needed <= budget:
        return
    source = (" (max_bytes)" if given is not None else f" (${ENV_MAX_BYTES})"
              if ENV_MAX_BYTES in os.environ else "")
    raise CutimelineError(
        f"{os.fspath(path)} claims {claimed}, which would take about {_size(needed)} of "
        f"memory to load and analyze, past cutimeline's memory budget of "
        f"{_size(budget)}{source}. If the file is yours and this machine has the "
        f"memory, raise the budget: ctl.load(path, max_bytes=...) or the environment "
        f"variable {ENV_MAX_BYTES} (e.g. {ENV_MAX_BYTES}={_suggest(needed)}).")


def _size(n: int) -> str:
    return (f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
            if n >= 1 << 20 else f"{n:,} bytes")


def _suggest(needed: int) -> str:
    """A budget above ``needed``, as the environment variable takes it."""
    return f"{-(-needed // (1 << 30))}G" if needed >= 1 << 30 else f"{-(-needed // (1 << 20))}M"
