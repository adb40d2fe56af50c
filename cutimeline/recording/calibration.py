"""Calibration between steps: the recorder's cost priced again on a real mix of ops.

``Session.calibrate`` calls ``calibrate`` between two steps at most every
``Session.calibrate_every_ns``, and once at stop; the price comes from the
session's ``calibrator`` (``selfcost.Program``).
"""

from __future__ import annotations

import warnings
from time import perf_counter_ns as _now
from typing import Any

import torch

from ..timeline.schema import NONE, SpanKind

__all__ = ["calibrate"]

_USER_SPAN = int(SpanKind.USER)


def calibrate(s: Any, t1: int | None = None) -> None:
    """Price a real mix of ops against the start-up model again
    (the session's ``calibrator``; a few ms), between two steps at most every
    ``s.calibrate_every_ns``, or now (``t1`` None, at stop): what
    recording costs depends on the ops between the recorder's code and
    on the machine's load, which change over a run. The next step
    begins after it; its time is in ``s.calibrations``, which
    compensation removes, with the ratio it measured, and a USER span
    "cutimeline calibration" shows where it ran (not the one at stop,
    after the recording's end)."""
    from torch.utils._python_dispatch import _disable_current_modes
    with s.lock:
        if s.calibrator is None or t1 is not None and (
                t1 < s._next_calibration or s.off):
            return
        s._next_calibration = 2 ** 62  # one thread at a time
    t0 = _now()
    s.paused = True  # nor do this recording's hooks
    try:
        # no mode of the user's (dispatch or __torch_function__) sees the probe
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            ratio = s.calibrator(2 if t1 is not None else 4)
    except Exception as exc:  # the user's program goes on, uncalibrated
        s.calibrator = None
        warnings.warn(f"cutimeline could not measure its own cost on a training "
                      f"step ({type(exc).__name__}: {exc}); overhead compensation "
                      f"uses the start-up figures only.", RuntimeWarning, stacklevel=4)
        return
    finally:
        s.paused = False
    t2 = _now()
    if t1 is not None:  # at stop it is past the recording's end
        w = s.writer()
        s.span(w, _USER_SPAN, s.intern("cutimeline calibration"),
               len(w.users), t0, NONE, t2)
    with s.lock:
        s.calibrations.append((t0, t2, max(0, round(1000 * ratio))))
        s._next_calibration = t2 + s.calibrate_every_ns
        if t1 is not None and s.step_begin == t1:
            s.step_begin = t2
