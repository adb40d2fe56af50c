"""Clocks of the simulated GPU: the host clock it waits on, the device clock
it keeps, and how the recorder may read that clock (float32 elapsed times
chained from segment anchors, as ``cudaEventElapsedTime`` allows).

``synthetic_events`` builds large simulated Timelines (events, syncs, pings
and their truth) with NumPy alone, for the aligner's tests and benchmarks.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["HostClock", "FakeClock", "device_time_ns", "elapsed_ms", "read_error_ns",
           "chain_raw_ns", "synthetic_events"]

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


def _drain(ready: np.ndarray, dur: np.ndarray, free_ns: int) -> np.ndarray:
    """Completion times of work items run in order on one stream that is
    free from ``free_ns``: t_j = max(t_{j-1}, ready_j) + dur_j, vectorised
    as t_j = S_j + max(free, max_{m≤j} (ready_m + dur_m − S_m)), S = cumsum(dur)."""
    s = np.cumsum(dur)
    u = np.maximum.accumulate(ready + dur - s)
    return s + np.maximum(u, free_ns)


def synthetic_events(n_ops: int, *, streams: int = 1,
                     dispatch_ns: tuple[int, int] = (3_000, 30_000),
                     cost_ns: tuple[int, int] = (1_000, 60_000),
                     sync_every: int = 500, offset_ns: int = 500_000_000_000,
                     drift_ppm: float = 12.5, quantum_ns: int = 500,
                     launch_latency_ns: int = 4_000, event_latency_ns: int = 2_000,
                     anchor_interval_ns: int = 1_000_000_000, pings: int = 3,
                     start_ns: int = 1_000_000_000, seed: int = 0) -> Any:
    """A simulated Timeline of ``n_ops`` launches without running torch.

    The host dispatches op after op (each takes a uniform ``dispatch_ns``
    range), each to a random one of ``streams`` streams, with a BEGIN and an
    END event around it; each op costs a uniform ``cost_ns`` on the device,
    which follows SimGPU's rules (launch and event latency, stream order).
    Every ``sync_every`` ops the host waits for the whole device (a
    "synchronize" sync row); calibration pings open and close the run;
    anchors are laid every ``anchor_interval_ns`` of host time. Returns an
    unaligned Timeline with ops, events, gpu, syncs and truth tables, and
    the true clock in ``meta["sim"]`` (all times ns).
    """
    from ..errors import CutimelineError
    from ..timeline.schema import NONE, EventKind, GpuKind, OpFlag
    from ..timeline.timeline import Timeline
    for name, v, low in (("n_ops", n_ops, 0), ("streams", streams, 1),
                         ("sync_every", sync_every, 1), ("pings", pings, 1),
                         ("quantum_ns", quantum_ns, 1),
                         ("anchor_interval_ns", anchor_interval_ns, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise CutimelineError(f"synthetic_events: {name}={v!r} must be an "
                                  f"integer ≥ {low}.")
    for name, v in (("dispatch_ns", dispatch_ns), ("cost_ns", cost_ns)):
        if not (isinstance(v, tuple) and len(v) == 2 and 0 <= v[0] <= v[1]):
            raise CutimelineError(f"synthetic_events: {name}={v!r} must be a "
                                  f"(low, high) pair of ns with 0 ≤ low ≤ high.")
    rng = np.random.default_rng(seed)
    d = rng.integers(*dispatch_ns, n_ops, endpoint=True)
    c = rng.integers(*cost_ns, n_ops, endpoint=True)
    st = rng.integers(0, streams, n_ops)
    # events as chunks of columns: stream, kind, op, host_record, true, anchor
    chunks: list[tuple[np.ndarray, ...]] = []
    sync_rows: list[tuple[int, int, int, int]] = []  # kind, last, begin, end
    free = np.zeros(streams, np.int64)
    n_ev = 0
    wake = 1_000  # host returns this long after the device drained

    def add(stream, kind, op, host, true, anchor):
        nonlocal n_ev
        chunks.append(tuple(np.atleast_1d(np.asarray(a, np.int64)) for a in
                            (stream, kind, op, host, true, anchor)))
        n_ev += len(chunks[-1][0])

    def ping_all(cursor: int, n_anchor: int) -> int:
        for _ in range(pings):
            cursor = max(cursor, int(free.max()))
            true = max(int(free[0]), cursor + event_latency_ns)
            free[0] = true
            add(0, EventKind.PING, NONE, cursor, true, n_anchor - 1)
            sync_rows.append((1, n_ev - 1, cursor, true + wake))
            cursor = true + wake
        return cursor

    add(0, EventKind.ANCHOR, NONE, start_ns, start_ns + event_latency_ns, 0)
    free[0] = start_ns + event_latency_ns
    anchor_host, anchor_ev = [start_ns], [0]
    cursor = ping_all(start_ns, 1)
    ops_begin = np.empty(n_ops, np.int64)
    ev_begin = np.empty(n_ops, np.int64)
    for i0 in range(0, n_ops, sync_every):
        i1 = min(i0 + sync_every, n_ops)
        hb = cursor + np.concatenate([[0], np.cumsum(d[i0:i1 - 1])])
        he = hb + d[i0:i1]
        ops_begin[i0:i1] = hb
        # anchors: before the first op that begins an interval after the last
        anchor_at = []
        while True:
            j = int(np.searchsorted(hb, anchor_host[-1] + anchor_interval_ns))
            if j >= len(hb):
                break
            anchor_at.append(j)
            anchor_host.append(int(hb[j]))
        m = i1 - i0
        # items per op: BEGIN, OP (no event), END; anchors in front of BEGINs
        kind = np.tile(np.array([EventKind.BEGIN, -1, EventKind.END]), m)
        host = np.stack([hb, he, he], 1).ravel()
        ready = np.stack([hb + event_latency_ns, he + launch_latency_ns,
                          he + event_latency_ns], 1).ravel()
        dur = np.stack([np.zeros(m, np.int64), c[i0:i1],
                        np.zeros(m, np.int64)], 1).ravel()
        stream = np.repeat(st[i0:i1], 3)
        op = np.repeat(np.arange(i0, i1), 3)
        pos = np.asarray(anchor_at, np.int64) * 3
        kind = np.insert(kind, pos, EventKind.ANCHOR)
        host, stream = np.insert(host, pos, hb[anchor_at]), np.insert(stream, pos, stream[pos])
        ready = np.insert(ready, pos, hb[anchor_at] + event_latency_ns)
        dur, op = np.insert(dur, pos, 0), np.insert(op, pos, NONE)
        true = np.empty_like(ready)
        for s in np.unique(stream):
            on = stream == s
            true[on] = _drain(ready[on], dur[on], int(free[s]))
            free[s] = true[on][-1]
        ev = kind >= 0
        anchor = len(anchor_ev) - 1 + np.cumsum(kind[ev] == EventKind.ANCHOR)
        first = n_ev
        anchor_ev.extend(first + np.flatnonzero(kind[ev] == EventKind.ANCHOR))
        add(stream[ev], kind[ev], op[ev], host[ev], true[ev], anchor)
        ev_begin[i0:i1] = first + np.flatnonzero(kind[ev] == EventKind.BEGIN)
        cursor = int(he[-1])
        drained = max(cursor, int(free.max()))
        sync_rows.append((0, n_ev - 1, cursor, drained + wake))
        cursor = drained + wake
    ping_all(cursor, len(anchor_ev))
    cols = [np.concatenate([ch[k] for ch in chunks]) for k in range(6)]
    stream, kind, op, host, true, anchor_of = cols
    raw, dev = read_device_clock(true, np.asarray(anchor_ev, np.int64), anchor_of,
                                 start_ns=start_ns, offset_ns=offset_ns,
                                 drift_ppm=drift_ppm, quantum_ns=quantum_ns)
    sy = np.asarray(sync_rows, np.int64).reshape(-1, 4)
    ops_end = ops_begin + d
    tables = {
        "ops": {"seq": np.arange(n_ops), "thread": np.zeros(n_ops), "name": np.zeros(n_ops),
                "device": np.zeros(n_ops), "stream": st,
                "flags": np.full(n_ops, int(OpFlag.LAUNCH)), "depth": np.zeros(n_ops),
                "host_begin_ns": ops_begin, "host_end_ns": ops_end},
        "events": {"device": np.zeros(len(raw)), "stream": stream, "kind": kind,
                   "op": op, "raw_ns": raw, "host_record_ns": host},
        "gpu": {"op": np.arange(n_ops), "device": np.zeros(n_ops), "stream": st,
                "name": np.zeros(n_ops), "kind": np.full(n_ops, int(GpuKind.OP)),
                "begin_event": ev_begin, "end_event": ev_begin + 1,
                "launch_ns": ops_end},
        "syncs": {"kind": sy[:, 0] + 1, "device": np.zeros(len(sy)),
                  "last_event": sy[:, 1], "host_begin_ns": sy[:, 2],
                  "host_end_ns": sy[:, 3]},
        "truth": {"event": np.arange(len(raw)), "host_ns": true},
    }
    meta = {"source": "synthetic", "simulated": True, "aligned": False,
            "device_name": "synthetic GPU (simulated)",
            "device_names": {"0": "synthetic GPU (simulated)"},
            "clock_resolution_ns": {"0": read_error_ns(quantum_ns, anchor_interval_ns)},
            "sim": {"profile": None, "offset_ns": int(offset_ns),
                    "drift_ppm": float(drift_ppm), "start_host_ns": int(start_ns),
                    "quantum_ns": int(quantum_ns),
                    "launch_latency_ns": int(launch_latency_ns),
                    "event_latency_ns": int(event_latency_ns),
                    "anchor_interval_ns": int(anchor_interval_ns),
                    "anchor0_device_ns": int(dev[0]), "seed": int(seed)}}
    return Timeline(tables, ["synthetic_op", "synchronize", "ping"], meta)
