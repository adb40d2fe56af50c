"""Progress on stderr for the command line: a one-line bar (tqdm's when it
is installed) for work that lasts over ``PROGRESS_AFTER_S``, only on a
terminal and never with ``--quiet``; and ``stage``, a ticking "label… N s"
line for work without a known fraction.

A bar redraws its line with ``\r``, which the command's escaping of what
it prints (``cli.py``) would show as ``\x0d``: it writes to the stream
under that escaping (``unescaped``) and escapes its label itself (the
label may hold a file's name; ``cutimeline.text``)."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from .text import terminal_text

__all__ = ["PROGRESS_AFTER_S", "Progress", "bar", "stage"]

PROGRESS_AFTER_S = 2.0         # shorter work shows no progress bar


class Progress:
    """A one-line progress bar on stderr, only on a terminal and for work over
    ``after_s`` (default ``PROGRESS_AFTER_S``); ``fraction`` None: a stage
    without a known fraction ("analysing… 3 s")."""

    def __init__(self, label: str, *, stream=None, after_s: float | None = None,
                 width: int = 30, quiet: bool = False):
        self.label, self.width = terminal_text(label), width
        self.stream = stream or unescaped(sys.stderr)
        self.after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self.t0, self.shown = time.perf_counter(), False
        self.tty = not quiet and _tty(self.stream)

    def __call__(self, stage: str, fraction: float | None) -> None:
        if not self.tty or time.perf_counter() - self.t0 < self.after_s:
            return
        if fraction is None:
            self.stream.write(f"\r{self.label}… {stage:<12}")
        else:
            f = min(max(float(fraction), 0.0), 1.0)
            n = int(round(f * self.width))
            self.stream.write(f"\r{self.label} [{'#' * n}{'.' * (self.width - n)}] "
                              f"{f:4.0%} {stage:<12}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(f"\r{' ' * (len(self.label) + self.width + 20)}\r")
            self.stream.flush()

    def done(self) -> None:
        if self.shown:
            self.stream.write(f"\r{self.label} done in "
                              f"{time.perf_counter() - self.t0:.1f} s{' ' * self.width}\n")
            self.stream.flush()


class _TqdmBar:
    """``Progress``'s interface over a tqdm bar (tqdm waits ``delay`` before
    it shows one), for work with a known fraction."""

    def __init__(self, tqdm, label: str, stream):
        self.bar = tqdm(total=1000, desc=label, file=stream, delay=PROGRESS_AFTER_S,
                        leave=False, bar_format="{desc} {percentage:3.0f}%|{bar}| "
                        "{elapsed} {postfix}")

    def __call__(self, stage: str, fraction: float) -> None:
        self.bar.set_postfix_str(stage, refresh=False)
        self.bar.update(int(min(max(fraction, 0.0), 1.0) * 1000) - self.bar.n)

    def clear(self) -> None:
        self.bar.close()

    done = clear


def unescaped(stream):
    """The stream under the command's escaping wrapper (``stream`` if none)."""
    return getattr(stream, "unescaped", stream)


def _tty(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def bar(label: str, quiet: bool):
    """A progress callback ``(stage, fraction)`` with ``clear()`` and
    ``done()`` on stderr: tqdm's bar if tqdm is installed, else ``Progress``;
    silent with --quiet or when stderr is not a terminal."""
    if not quiet and _tty(sys.stderr):
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return _TqdmBar(tqdm, terminal_text(label), unescaped(sys.stderr))
    return Progress(label, quiet=quiet)


@contextmanager
def stage(label: str, quiet: bool) -> Iterator[None]:
    """``label… N s`` on stderr while the block runs past PROGRESS_AFTER_S
    (a line of its own: a stage has no fraction for tqdm to draw)."""
    line = Progress(label, quiet=quiet)
    stop, t0 = threading.Event(), time.perf_counter()

    def tick() -> None:
        while not stop.wait(0.25):
            line(f"{time.perf_counter() - t0:.0f} s", None)

    ticker = threading.Thread(target=tick, name="cutimeline-progress", daemon=True)
    if line.tty:
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        line.clear()
