"""Argument checks of the public functions, each a sentence of what was wanted.

Every public function checks its arguments at entry and says what it
wanted and what it got ("slice_time wants begin_ns as a whole number of
ns; got a str"); these are the checks several stages share
(``timeline.as_timeline`` checks for a Timeline).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import CutimelineError

__all__ = ["what", "need_int", "need_path", "need_callable", "need_text", "need_flag"]


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
