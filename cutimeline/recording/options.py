"""``record()``'s options checked: each bad one is a ``CutimelineError``
sentence that names it and what it takes."""

from __future__ import annotations

import os
from typing import Any, Callable

from ..devices.cuda import TIMINGS
from ..errors import CutimelineError
from .control.schedule import as_schedule
from .opstream import OP_ROW_BYTES

#: record()'s default cap: the op rows held while recording (10 M ops)
MAX_BYTES = 10_000_000 * OP_ROW_BYTES

__all__ = ["checked", "checked_schedule", "MAX_BYTES", "STEPS"]

STEPS = ("auto", "optimizer", "manual")
_FLAGS = ("modules", "threads", "measure", "stack", "memory")


def checked(options: dict[str, Any], *, disabled: bool) -> dict[str, Any]:
    """``options`` (record's keyword arguments but ``device``) checked, with
    ``out_dir`` as a str (made, unless the recorder is disabled)."""
    max_bytes, max_ops = options.get("max_bytes", MAX_BYTES), options["max_ops"]
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or \
            max_bytes < OP_ROW_BYTES:
        raise CutimelineError(f"record(max_bytes={max_bytes!r}) must be a whole number "
                              f"of bytes ≥ {OP_ROW_BYTES} (one op's row).")
    if max_ops is None:
        max_ops = max_bytes // OP_ROW_BYTES
    elif isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 1:
        raise CutimelineError(f"record(max_ops={max_ops!r}) must be a whole "
                              f"number of ops ≥ 1.")
    elif max_bytes != MAX_BYTES:
        raise CutimelineError(f"record(max_bytes={max_bytes!r}, max_ops={max_ops!r}) "
                              f"gives the cap twice; give max_bytes only (max_ops is "
                              f"the same cap in ops, {OP_ROW_BYTES} B each).")
    else:
        max_bytes = max_ops * OP_ROW_BYTES
    for name in _FLAGS:
        if not isinstance(options[name], bool):
            raise CutimelineError(f"record({name}={options[name]!r}) must be True or False.")
    if not isinstance(options["steps"], str) or options["steps"] not in STEPS:
        raise CutimelineError(f"record(steps={options['steps']!r}) is not understood; "
                              f"give one of {', '.join(map(repr, STEPS))}.")
    if not isinstance(options["timing"], str) or options["timing"] not in TIMINGS:
        raise CutimelineError(f"record(timing={options['timing']!r}) is not understood; "
                              f"give one of {', '.join(map(repr, TIMINGS))}.")
    out_dir = options["out_dir"]
    if out_dir is not None:
        if not isinstance(out_dir, (str, os.PathLike)) or not os.fspath(out_dir):
            raise CutimelineError(f"record(out_dir={out_dir!r}) must name a folder "
                                  f"(a str or path).")
        out_dir = os.fspath(out_dir)
        if not isinstance(out_dir, str) or (os.path.exists(out_dir)
                                            and not os.path.isdir(out_dir)):
            raise CutimelineError(f"record(out_dir={out_dir!r}) must name a folder; "
                                  f"that is a file, or not a path as text.")
        if not disabled:
            try:
                os.makedirs(out_dir, exist_ok=True)
            except OSError as exc:
                raise CutimelineError(f"record(out_dir={out_dir!r}): the folder cannot "
                                      f"be made ({exc.strerror or exc}).") from None
    return {**options, "out_dir": out_dir, "max_bytes": max_bytes, "max_ops": max_ops}


def checked_schedule(schedule: Any, on_trace_ready: Any,
                     options: dict[str, Any]) -> Callable[[int], str] | None:
    """``record(schedule=, on_trace_ready=)`` checked against each other and
    the other options: the schedule as a function step -> phase
    (``schedule.as_schedule``), or None for an ordinary recording."""
    if on_trace_ready is not None and not callable(on_trace_ready):
        raise CutimelineError(f"record(on_trace_ready={on_trace_ready!r}) must be a "
                              f"function that takes a Timeline, such as "
                              f"ctl.ready_writer('traces').")
    if schedule is None:
        if on_trace_ready is not None:
            raise CutimelineError("record(on_trace_ready=...) is called at the end of "
                                  "each window of a schedule; give schedule="
                                  "ctl.schedule(...) too, or read rec.timeline after stop.")
        return None
    if options["out_dir"] is not None:
        raise CutimelineError("record(out_dir=...) writes one file per rank at stop "
                              "and does not take a schedule; give "
                              "on_trace_ready=ctl.ready_writer(folder) instead.")
    return as_schedule(schedule)
