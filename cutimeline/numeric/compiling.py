"""Compile notices: one line when Numba compiles cutimeline's kernels for a
while, so that a first run says why it pauses instead of sitting silent.

Numba compiles a kernel the first time it runs on a new type of input and
caches it on disk (``cache=True``); a cold cache costs about a second per
kernel, a warm one milliseconds. Numba reports each compile (not a cache
load) as a ``numba:compile`` event; ``compile_notice`` listens to them and,
once a compile of a cutimeline kernel has lasted ``after_s``, writes the
notice once.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator, TextIO

from numba.core import event

__all__ = ["COMPILE_ESTIMATE_S", "CompileNotice", "compile_notice"]

# What compiling every kernel an analysis and a plot need takes on a cold
# cache (benchmarks/speed/bench_coldstart.py, 2 shared cores: 17-21 s for an
# analysis, 25 s for the demo's analysis and plot); the notice gives the
# worst case: most runs compile fewer kernels.
COMPILE_ESTIMATE_S = 30


class CompileNotice(event.Listener):
    """Writes ``message`` to ``stream`` once, when a compile of a
    cutimeline kernel has been running for ``after_s`` (0: at its start)."""

    def __init__(self, stream: TextIO | None = None, *, after_s: float = 1.0,
                 message: str | None = None):
        self.stream, self.after_s = stream or sys.stderr, after_s
        self.message = message or (f"compiling cutimeline's kernels (once, up to "
                                    f"~{COMPILE_ESTIMATE_S} s)…")
        self.said = False
        self._active = 0  # compiles of ours running now (they nest)
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def on_start(self, ev: event.Event) -> None:
        if not _ours(ev):
            return
        with self._lock:
            self._active += 1
            if self.said or self._timer is not None:
                return
            if self.after_s <= 0:
                self._say_locked()
                return
            self._timer = threading.Timer(self.after_s, self._due)
            self._timer.daemon = True
            self._timer.start()

    def on_end(self, ev: event.Event) -> None:
        if _ours(ev):
            with self._lock:
                self._active = max(self._active - 1, 0)

    def _due(self) -> None:
        with self._lock:
            self._timer = None
            if self._active and not self.said:  # still compiling: say so
                self._say_locked()

    def _say_locked(self) -> None:
        self.said = True
        try:
            self.stream.write(self.message + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr
            pass

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


def _ours(ev: event.Event) -> bool:
    disp = (ev.data or {}).get("dispatcher") if isinstance(ev.data, dict) else None
    module = getattr(getattr(disp, "py_func", None), "__module__", "") or ""
    return module.startswith("cutimeline.")


@contextmanager
def compile_notice(stream: TextIO | None = None, *, after_s: float = 1.0,
                   enabled: bool = True) -> Iterator[CompileNotice]:
    """Within the block, say once on ``stream`` (stderr) when cutimeline's
    kernels take ``after_s`` or more to compile; ``enabled=False``: never."""
    notice = CompileNotice(stream, after_s=after_s)
    if not enabled:
        yield notice
        return
    event.register("numba:compile", notice)
    try:
        yield notice
    finally:
        event.unregister("numba:compile", notice)
        notice.cancel()
