"""Source lines: where in the user's code an op or a host span came from.

The source is the first Python frame, walking outward from the
recorder's own, whose code lies outside torch, cutimeline and the
plumbing between them (``contextlib``, ``functools``, ``threading``,
importlib): file, line, function and the stripped text of that line
(NONE when the file cannot be read). A walk costs a dict lookup per
frame passed (``SourceFinder``: a file's verdict cached by its name, as
a str caches its hash and a code object's costs ~0.3 µs; a (code, line)
pair interned once by the code's id, the cache holding the code so the
id stays its own).

Which get one (``Session`` notes them): without ``record(stack=True)``,
every host-blocking op, every collective, the SYNC spans with no op
behind them (the CUDA calls ``hooks/cuda.py`` wraps) and every DataLoader
fetch; with ``stack=True`` every op too, through ``StackCount``, so the op
stream's path is unchanged and costs nothing more when the option is off
(what it costs on: ``benchmarks/RESULTS.md``, recorder options). An op
with no user frame above it (on an autograd engine thread) gets no row.

Rows are tuples ``(seq, thread, span index, file, line, function, code)``
in ``Session.sourced``: an op's by its seq (thread and span index NONE),
a span's by its writer's thread and index (seq NONE); ``assembly.py``
maps both to rows.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import sys
import threading
from typing import Any

import torch

from ...timeline.schema import NONE

__all__ = ["SourceFinder", "StackCount", "internal_file"]


def _dirs(*dirs: str) -> tuple[str, ...]:
    return tuple(p + os.sep for d in dirs for p in (d, os.path.realpath(d)))


# cutimeline/, three folders up from this file (recording/measures/sources.py)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_INTERNAL_DIRS = _dirs(os.path.dirname(torch.__file__), _PACKAGE)  # torch, and cutimeline
_INTERNAL_FILES = frozenset(
    p for m in (contextlib, functools, threading)
    for p in (m.__file__, os.path.realpath(m.__file__)))
_IMPORTLIB = _dirs(os.path.dirname(__import__("importlib").__file__))
# the demo plays the user's script: its lines are the user's
_DEMO = os.path.join(_PACKAGE, "demo.py")
_USER_FILES = frozenset((_DEMO, os.path.realpath(_DEMO)))


@functools.lru_cache(maxsize=4096)
def internal_file(filename: str) -> bool:
    """Whether code in ``filename`` is torch's, cutimeline's or the plumbing
    between them and the user's code (not a user's source line). Cached for
    the process (a file's answer never changes; ``realpath`` costs a system
    call per path component)."""
    if filename in _USER_FILES:
        return False
    if filename.startswith("<frozen ") or filename in _INTERNAL_FILES:
        return True  # <frozen runpy>, <frozen importlib._bootstrap>: plumbing
    if filename.startswith(_INTERNAL_DIRS) or filename.startswith(_IMPORTLIB):
        return True
    real = os.path.realpath(filename) if os.path.isabs(filename) else filename
    return real in _INTERNAL_FILES or real.startswith(_INTERNAL_DIRS)


class SourceFinder:
    """The user's frame above the caller, its strings interned into the
    session's ``strings`` (under its ``lock``: no reference to the session,
    which must not be kept alive by a cycle). Safe from any thread: its
    caches only grow, and a race fills an entry twice with the same value."""

    def __init__(self, strings: Any, lock: Any):
        self._strings, self._lock = strings, lock
        self._internal: dict[str, bool] = {}  # file name -> internal?
        # (id(code), line) -> (code, (file, line, function, code text))
        self._lines: dict[tuple[int, int], tuple[Any, tuple[int, int, int, int]]] = {}

    def find(self) -> tuple[int, int, int, int] | None:
        """(file, line, function, code) string ids and line number of the
        first user frame above the caller; None when there is none."""
        f = sys._getframe(1)
        internal = self._internal
        while f is not None:
            c = f.f_code
            name = c.co_filename
            i = internal.get(name)
            if i is None:
                i = internal[name] = internal_file(name)
            if not i:
                key = (id(c), f.f_lineno or 0)
                entry = self._lines.get(key)
                if entry is None:
                    entry = self._lines[key] = (c, self._describe(c, key[1]))
                return entry[1]
            f = f.f_back
        return None

    def intern(self, s: str) -> int:
        return self._strings.intern_under(self._lock, s)

    def _describe(self, code: Any, line: int) -> tuple[int, int, int, int]:
        intern = self.intern
        text = linecache.getline(code.co_filename, line).strip()
        name = getattr(code, "co_qualname", code.co_name)  # Python ≥ 3.11
        return (intern(code.co_filename), line, intern(name),
                intern(text) if text else NONE)


class StackCount:
    """``Session.count`` under ``record(stack=True)``: each sequence number
    it hands out notes the source of the op (or compiled graph, or CUDA
    graph replay) that drew it into ``rows``."""

    __slots__ = ("_count", "_find", "_rows")

    def __init__(self, count: Any, finder: SourceFinder, rows: list[tuple]):
        self._count, self._find, self._rows = count, finder.find, rows

    def __iter__(self) -> "StackCount":
        return self

    def __next__(self) -> int:
        seq = next(self._count)
        src = self._find()
        if src is not None:
            self._rows.append((seq, NONE, NONE, *src))
        return seq
