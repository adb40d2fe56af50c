"""Window spellings: the one parser behind ``window=`` and ``--window``.

``Timeline.window_bounds`` (and through it ``ctl.analyze``, ``ctl.plot``)
and the command line's ``--window`` take the same spellings, each turned
into one of three canonical forms:

* a step: ``3`` or ``"3"`` → ``3``;
* steps first to last, both included: ``(3, 5)``, ``range(3, 6)``,
  ``"3-5"`` or ``"3:5"`` → ``(3, 5)``;
* seconds from the Timeline's start: ``(0.5, 0.75)`` (a float in the pair)
  or ``"0.5s-0.75s"`` → ``(0.5, 0.75)``.

Anything else is a ``CutimelineError`` that lists these forms.
"""

from __future__ import annotations

import re
from typing import Any, Union

import numpy as np

from ..errors import CutimelineError

__all__ = ["parse_window", "WINDOW_FORMS", "Window"]

#: a canonical window: a step, (first, last) steps, or (begin_s, end_s) seconds
Window = Union[int, tuple[int, int], tuple[float, float]]

#: the accepted spellings, in words, for error messages
WINDOW_FORMS = ("a step (3 or \"3\"), a step range ((3, 5), range(3, 6) or \"3-5\"), "
                "or seconds from the start as floats ((0.5, 0.75) or \"0.5s-0.75s\")")

_SECONDS = r"(\d*\.?\d+)s"


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) \
        and not isinstance(v, (bool, np.bool_))


def _from_text(text: str) -> Any:
    t = text.strip().replace(":", "-")
    if re.fullmatch(r"\d+", t):
        return int(t)
    m = re.fullmatch(r"(\d+)-(\d+)", t)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(rf"{_SECONDS}-{_SECONDS}", t)
    if m:
        return float(m.group(1)), float(m.group(2))
    return None


def parse_window(window: Any) -> Window:
    """The canonical form of ``window`` (see the module doc): ``3`` or
    ``"3"`` → 3, ``(3, 5)``, ``range(3, 6)`` or ``"3-5"`` → (3, 5),
    ``(0.5, 0.75)`` or ``"0.5s-0.75s"`` → (0.5, 0.75) seconds. A step range
    must not run backwards and a span of seconds must end after it begins."""
    value: Any = window
    if isinstance(window, str):
        value = _from_text(window)
    elif isinstance(window, range) and len(window) and window.step > 0:
        value = (window[0], window[-1])
    if _is_int(value):
        if value >= 0:
            return int(value)
    elif isinstance(value, tuple) and len(value) == 2 and all(map(_is_number, value)):
        a, b = value
        if all(map(_is_int, value)):
            if 0 <= a <= b:
                return int(a), int(b)
        elif a < b:
            return float(a), float(b)
    raise CutimelineError(f"Window {window!r} is not understood: give {WINDOW_FORMS}; "
                          f"a range runs from its first step or second to its last.")
