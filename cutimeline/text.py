"""Text for a person, one policy for every stage: how numbers read
(durations, percentages, bytes, FLOP rates, runs of ranks, the two notes
every surface gives on how a Timeline was read), how a name from a trace
is made harmless where it becomes text, and the sentences in which a
public function refuses an argument; ``Word``, the base of the enums
whose members are words every surface prints. It imports nothing of
cutimeline but the error type, so every stage may use it.

Names from a trace (op, kernel, module, thread, device and file names
come from the program recorded or from a file anyone may have written)
stay as they are in the Timeline (an export writes them back unchanged);
only where they become text for a person are they escaped, one function
per medium: ``terminal_text`` (everything ``cutimeline.cli`` prints, and
``cutimeline.progress``'s labels) and ``figure_text`` (every name
``cutimeline.rendering`` shows, once), which also escapes ``$``:
matplotlib would read it as the start of math text, and a name such as
``a$b\\c$`` fails to parse and ends the plot.

Every public function checks its arguments at entry and says what it
wanted and what it got ("slice_time wants begin_ns as a whole number of
ns; got a str"): ``what`` and the ``need_*`` checks are the ones several
stages share (``timeline.as_timeline`` checks for a Timeline).
"""

from __future__ import annotations

import enum
import os
import re
from typing import Any

import numpy as np

from .errors import CutimelineError

__all__ = ["fmt_ns", "pct", "fmt_bytes", "fmt_tflops", "fmt_mfu", "fmt_runs", "steps_from_text",
           "warnings_text", "terminal_text", "figure_text", "what", "need_int",
           "need_path", "need_callable", "need_text", "need_flag", "Word"]


class Word(str, enum.Enum):
    """The base of an enum of words (``Verdict``, ``Bottleneck``,
    ``CauseName``, ``EditName``): a member equals, hashes, formats and prints as its value,
    so plain strings still name it, and f-strings, JSON and the command line
    print the word as they did before there was an enum (Python 3.11's
    ``enum.StrEnum``, on 3.10 too)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# -- numbers as words ------------------------------------------------------------
def fmt_ns(ns: float) -> str:
    """ns as a short human duration: 850 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            v = ns / scale
            return f"{v:.3g} {unit}" if abs(v) < 100 else f"{v:.0f} {unit}"
    return f"{ns:.0f} ns"


def pct(x: float) -> str:
    """A fraction as a whole percentage: 0.623 → "62%"."""
    return f"{100 * x:.0f}%"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 800 B, 12 KiB, 512 MiB, 3.2 GiB."""
    n = float(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:  # 1023 MiB, not 1.02e+03 MiB
            v = n / scale
            return f"{v:.3g} {unit}" if abs(v) < 999.5 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_tflops(flop_per_s: float, digits: int = 3) -> str:
    """FLOP/s as TFLOP/s to ``digits`` significant digits: "41.2 TFLOP/s";
    "989.5 TFLOP/s" (a datasheet peak, ``digits=4``); whole from 10**digits."""
    t = float(flop_per_s) / 1e12
    return f"{t:.0f} TFLOP/s" if abs(t) >= 10 ** digits else f"{t:.{digits}g} TFLOP/s"


def fmt_mfu(mfu: float) -> str:
    """MFU (a fraction of the peak) as a percentage to two significant
    digits, whole from 10%: 0.412 → "41%", 0.042 → "4.2%", 0.0021 →
    "0.21%". The one MFU text: the summary's compute line and the figure's
    step strip both print it."""
    m = 100 * float(mfu)
    return f"{m:.0f}%" if abs(m) >= 10 else f"{m:.2g}%"


def fmt_runs(numbers: list[int]) -> str:
    """Sorted whole numbers as runs: [1, 2, 3, 7] → "1–3, 7" (a world of
    10^6 ranks with two files lists one run, not 10^6 lines)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def steps_from_text(meta: dict) -> str:
    """" (ends of ProfilerStep#N)": which marker made an imported trace's
    steps (``formats/kineto/steps.py``); "" when the Timeline does not say."""
    marker = meta.get("steps_from")
    return f" (ends of {marker})" if isinstance(marker, str) and marker else ""


def warnings_text(warnings: tuple[str, ...], first: bool = False) -> str:
    """"3 warnings on how it was read (Timeline.warnings)", with the first
    of them after a colon when ``first``."""
    n = len(warnings)
    head = f"{n} warning{'s' * (n != 1)} on how it was read (Timeline.warnings)"
    return f"{head}: {warnings[0]}" + (" …" if n > 1 else "") if first else head


# -- names from a trace, made harmless -------------------------------------------
# C0 but tab and newline, DEL and C1; bidi embeddings, overrides and isolates;
# the lone surrogates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    if 0xD800 <= c <= 0xDFFF:
        return "\ufffd"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_text(text: str) -> str:
    r"""``text`` safe to write to a terminal: control characters (C0 but
    tab and newline, DEL, C1, among them ESC, which starts the sequences
    that set a window's title, clear the screen or, by OSC 52, the
    clipboard) and the bidirectional overrides that reorder what is shown
    are written as visible escapes (``\x1b``, ``\u202e``); a lone
    surrogate (no character: it cannot be encoded) becomes U+FFFD."""
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text


def figure_text(text: str) -> str:
    """``text`` safe to hand to matplotlib as a label or title: as
    ``terminal_text``, and every ``$`` literal. Apply it once: ``\\$``
    escaped again would show its backslash."""
    return terminal_text(text).replace("$", r"\$")


# -- argument checks -------------------------------------------------------------
def what(value: Any) -> str:
    """``value`` for a message: "None", "a str", "a Report"."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def need_int(value: Any, name: str, who: str, *, lo: int | None = None,
             none: bool = False) -> int | None:
    """``value`` as an int (numpy integers too, not bool), at least ``lo``;
    None passes with ``none``."""
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CutimelineError(f"{who} wants {name} as a whole number; got {what(value)}.")
    if lo is not None and value < lo:
        raise CutimelineError(f"{who} wants {name} of at least {lo}; got {value}.")
    return int(value)


def need_path(value: Any, name: str, who: str) -> str:
    """``value`` as a path (str or os.PathLike of str)."""
    if isinstance(value, (str, os.PathLike)):
        value = os.fspath(value)
        if isinstance(value, str):
            return value
    raise CutimelineError(f"{who} wants {name} as a path (a str or os.PathLike); got "
                          f"{what(value)}.")


def need_callable(value: Any, name: str, who: str) -> Any:
    """``value`` when it is None or callable."""
    if value is not None and not callable(value):
        raise CutimelineError(f"{who} wants {name} as a function or None; got "
                              f"{what(value)}.")
    return value


def need_text(value: Any, name: str, who: str) -> str:
    if not isinstance(value, str):
        raise CutimelineError(f"{who} wants {name} as a str; got {what(value)}.")
    return value


def need_flag(value: Any, name: str, who: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise CutimelineError(f"{who} wants {name} as True or False; got {what(value)}.")
    return bool(value)
