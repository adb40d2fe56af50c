"""Clocks of the simulated GPU: the host clock it waits on, the device clock
it keeps, and what the recorder reads of that clock (float32 elapsed times
chained from segment anchors, as ``cudaEventElapsedTime`` allows: the
reading rule both devices share, ``devices/clockread.py``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..clockread import chain_raw_ns, elapsed_ms

__all__ = ["HostClock", "FakeClock", "device_time_ns", "read_device_clock"]

_SPIN_NS = 100_000  # wait_until sleeps until this close, then spins


class HostClock:
    """The real host clock (``time.perf_counter_ns``, as the recorder uses)."""

    #: the C function itself: a simulated op reads it four times
    now = staticmethod(time.perf_counter_ns)

    def wait_until(self, t_ns: int) -> None:
        """Block until ``now() >= t_ns``: sleep for the long part (sleep
        overshoots by tens of µs), then spin for the last 100 µs."""
        left = t_ns - time.perf_counter_ns()
        if left > _SPIN_NS:
            time.sleep((left - _SPIN_NS) / 1e9)
        while time.perf_counter_ns() < t_ns:
            pass


class FakeClock:
    """A host clock for tests: time moves only by ``advance`` and by waits
    (which jump to their target), so simulated timelines are exact."""

    def __init__(self, start_ns: int = 1_000_000_000):
        self.t = int(start_ns)

    def now(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += int(ns)

    def wait_until(self, t_ns: int) -> None:
        self.t = max(self.t, int(t_ns))


# -- the device clock, as CUDA lets one read it --------------------------------

def device_time_ns(host_ns: Any, *, start_ns: int, offset_ns: int,
                   drift_ppm: float, quantum_ns: int) -> np.ndarray:
    """True device-clock time (ns) of true host times ``host_ns``:
    ``offset + (1 + drift·1e-6)·(host − start)``, floored to the quantum."""
    dt = np.asarray(host_ns, np.int64) - np.int64(start_ns)
    # exact integer part plus the drift term in float64 (|dt·drift| ≪ 2^53)
    t = np.int64(offset_ns) + dt + np.floor(dt * (drift_ppm * 1e-6)).astype(np.int64)
    return np.floor_divide(t, quantum_ns) * quantum_ns


def read_device_clock(true_ns: np.ndarray, anchors: np.ndarray,
                      anchor_of: np.ndarray, *, start_ns: int, offset_ns: int,
                      drift_ppm: float, quantum_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw_ns, device_ns) of events whose true host times are ``true_ns``:
    the true device clock, and what the recorder reads of it through
    float32 elapsed times from the anchors (event indices ``anchors``;
    ``anchor_of[i]`` is the anchor event i is read against)."""
    dev = device_time_ns(true_ns, start_ns=start_ns, offset_ns=offset_ns,
                         drift_ppm=drift_ppm, quantum_ns=quantum_ns)
    if not len(dev):
        return dev.copy(), dev
    at = dev[anchors]
    steps = elapsed_ms(np.concatenate([at[:1], at[:-1]]), at)
    return chain_raw_ns(steps, anchor_of, elapsed_ms(at[anchor_of], dev)), dev
