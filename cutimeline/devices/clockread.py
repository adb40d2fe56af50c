"""Reading a device clock as CUDA allows it, for both devices: float32
elapsed milliseconds chained from segment anchors, and how far a reading
may lie from the instant it marks.

``cudaEventElapsedTime`` is the only way to read CUDA's event clock: a
float32 count of milliseconds between two events, whose precision decays
with the distance (about 0.06 µs at 1 s, 1 µs at 10 s). So both devices
read every event against a nearby *segment anchor* and chain the anchors
(``chain_raw_ns``); the simulator makes its readings with ``elapsed_ms``,
exactly as the hardware rounds them. Each device states its clock's read
error (``read_error_ns``) in ``meta["clock_resolution_ns"]``, which the
aligner's bound allows for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["elapsed_ms", "chain_raw_ns", "read_error_ns"]


def elapsed_ms(begin_ns: Any, end_ns: Any) -> np.ndarray:
    """What ``cudaEventElapsedTime`` returns for events at these device
    times: float32 milliseconds (precision ~0.06 µs at 1 s, ~1 µs at 10 s)."""
    d = np.asarray(end_ns, np.int64) - np.asarray(begin_ns, np.int64)
    return (d / 1e6).astype(np.float32)


def read_error_ns(quantum_ns: int, link_ns: int = 0) -> int:
    """How far a device-clock reading may lie from the instant it marks
    (ns): the clock's tick ``quantum_ns`` (the reading floors or rounds the
    instant), plus half a float32 step of an elapsed time of ``link_ns``
    read in milliseconds (0: no float32 read), rounded up. A device puts
    this in ``meta["clock_resolution_ns"]``."""
    half_step = float(np.spacing(np.float32(link_ns / 1e6))) * 1e6 / 2 if link_ns else 0.0
    return int(quantum_ns) + int(np.ceil(half_step))


def chain_raw_ns(anchor_step_ms: np.ndarray, anchor_of: np.ndarray,
                 event_ms: np.ndarray) -> np.ndarray:
    """Raw device times (ns) from float32 elapsed times, chained by anchors.

    ``anchor_step_ms[k]`` is elapsed(anchor k-1, anchor k) (entry 0 unused:
    anchor 0 has raw 0); ``anchor_of[i]`` the anchor (0..K-1) event i is read
    against; ``event_ms[i]`` = elapsed(that anchor, event i). Each float32
    reading is rounded to whole ns; errors add up only along the anchors.
    This is the CUDA device's arithmetic too, so simulation and hardware
    share one reading rule.
    """
    steps = np.rint(np.asarray(anchor_step_ms, np.float64) * 1e6).astype(np.int64)
    anchor_raw = np.cumsum(np.concatenate([[0], steps[1:]]))
    own = np.rint(np.asarray(event_ms, np.float64) * 1e6).astype(np.int64)
    return anchor_raw[np.asarray(anchor_of, np.int64)] + own
