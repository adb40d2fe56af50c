"""Small simulated traces with known truth, for the aligner's tests.

An event-by-event model of what SimGPU does (``cutimeline/devices/sim/``), kept
independent of it so the aligner is scored against a second implementation,
and richer in what bounds the clock: stream syncs besides device-wide ones,
a random wake-up delay after each sync, several devices, floor or
round-to-nearest quantisation. All times are integer ns.

Model, per device: the host dispatches ops one after another; each op goes
to a random stream, with a BEGIN event recorded before its launch and an
END event after. An event recorded at host time h executes at
``max(stream free, h + event latency)``; the op's work starts at
``max(stream free, launch + launch latency)``. Syncs make the host wait
until the stream (or the device) drained, then return after a wake-up
delay. Calibration pings open and close the trace. The device clock is
``offset + (1 + drift)·(t − t0)`` quantised, read as float32-ms elapsed
times from anchors laid every ``anchor_ns`` and chained, as on CUDA.
"""

from __future__ import annotations

import numpy as np

from cutimeline.devices.clockread import read_error_ns
from cutimeline.timeline.schema import NONE, EventKind, GpuKind
from cutimeline.timeline.timeline import Timeline

EV_DTYPE = [("device", "i8"), ("stream", "i8"), ("kind", "i8"), ("op", "i8"),
            ("host", "i8"), ("true", "i8"), ("anchor", "i8")]


def _read_clock(true, device, anchor_of, anchors, clock, t0, quantum, rounding):
    """Raw readings: quantised device clock, float32 ms from the anchor,
    anchors chained from the first one (read exactly)."""
    raw = np.empty(len(true), np.int64)
    for d, (offset, drift) in enumerate(clock):
        on = device == d
        dt = true[on] - t0
        dev = t0 + offset + dt + np.floor(dt * drift * 1e-6).astype(np.int64)
        q = np.floor_divide(dev + (quantum // 2 if rounding == "round" else 0),
                            quantum) * quantum
        full = np.zeros(len(true), np.int64)
        full[on] = q
        mine = [a for a in anchors if device[a] == d]
        a_raw = {mine[0]: int(full[mine[0]])}
        for prev, a in zip(mine, mine[1:]):
            step = np.float32((full[a] - full[prev]) / 1e6)
            a_raw[a] = a_raw[prev] + int(np.rint(np.float64(step) * 1e6))
        idx = np.flatnonzero(on)
        for i in idx:
            a = anchor_of[i]
            ms = np.float32((full[i] - full[a]) / 1e6)
            raw[i] = a_raw[a] + int(np.rint(np.float64(ms) * 1e6))
    return raw


def trace(seed: int, *, n_ops: int = 1500, devices: int = 1, streams: int = 3,
          offset_ns: float | None = None, drift_ppm: float | None = None,
          quantum_ns: int = 500, rounding: str = "floor",
          dispatch_ns: tuple[int, int] = (2_000, 40_000),
          cost_ns: tuple[int, int] = (500, 80_000),
          launch_ns: tuple[int, int] = (2_000, 6_000),
          event_ns: tuple[int, int] = (1_000, 3_000),
          wake_ns: tuple[int, int] = (500, 3_000),
          sync_p: float = 0.01, stream_sync_share: float = 0.5,
          pings: int = 2, anchor_ns: int = 20_000_000,
          stated: bool = True) -> Timeline:
    """A simulated, unaligned Timeline with events, gpu rows, syncs and the
    truth table; the true clocks are in ``meta["synth"]``. ``offset_ns``
    and ``drift_ppm`` default to draws within ±1 s and ±100 ppm. ``stated``:
    the clocks' read error is in ``meta["clock_resolution_ns"]``, as a
    recording device states it."""
    rng = np.random.default_rng(seed)
    clock = []
    for _ in range(devices):
        off = rng.uniform(-1e9, 1e9) if offset_ns is None else offset_ns
        dr = rng.uniform(-100, 100) if drift_ppm is None else drift_ppm
        clock.append((int(off), float(dr)))
    t0 = int(rng.integers(10**11, 10**13))
    h = t0
    free = np.zeros((devices, streams), np.int64)
    ev: list[tuple[int, ...]] = []
    sy: list[tuple[int, ...]] = []  # kind(1 sync, 2 ping), device, stream, last, begin, end
    last_on: dict[tuple[int, int], int] = {}
    anchor_of = np.zeros(devices, np.int64)
    anchor_host = np.zeros(devices, np.int64)
    anchors: list[int] = []
    gpu: list[tuple[int, ...]] = []

    def record(d, s, kind, op, host, ready):
        true = max(int(free[d, s]), ready)
        free[d, s] = true
        if kind == EventKind.ANCHOR:
            anchor_of[d] = len(ev)
            anchors.append(len(ev))
        ev.append((d, s, kind, op, host, true, int(anchor_of[d])))
        last_on[d, s] = len(ev) - 1
        return len(ev) - 1

    def lat(r):
        return int(rng.integers(r[0], r[1] + 1))

    def ping_all():
        nonlocal h
        for d in range(devices):
            for _ in range(pings):
                h = max(h, int(free[d].max())) + lat(dispatch_ns) // 4
                i = record(d, 0, EventKind.PING, NONE, h, h + lat(event_ns))
                end = ev[i][5] + lat(wake_ns)
                sy.append((2, d, NONE, i, h, end))
                h = end

    for d in range(devices):
        record(d, 0, EventKind.ANCHOR, NONE, h, h + lat(event_ns))
        anchor_host[d] = h
    ping_all()
    for op in range(n_ops):
        d, s = int(rng.integers(devices)), int(rng.integers(streams))
        if h - anchor_host[d] >= anchor_ns:
            record(d, s, EventKind.ANCHOR, NONE, h, h + lat(event_ns))
            anchor_host[d] = h
        b = record(d, s, EventKind.BEGIN, op, h, h + lat(event_ns))
        launch = h + lat(dispatch_ns) // 2
        free[d, s] = max(int(free[d, s]), launch + lat(launch_ns)) + lat(cost_ns)
        record(d, s, EventKind.END, op, launch, launch + lat(event_ns))
        gpu.append((op, d, s, b, b + 1, launch, h))
        h = launch + lat(dispatch_ns) // 2
        if rng.random() < sync_p:
            d = int(rng.integers(devices))
            if rng.random() < stream_sync_share:
                s = int(rng.integers(streams))
                if (d, s) not in last_on:
                    continue
                target, last = int(free[d, s]), last_on[d, s]
            else:
                target, last, s = int(free[d].max()), max(
                    i for (dd, _), i in last_on.items() if dd == d), NONE
            end = max(h + 200, target + lat(wake_ns))
            sy.append((1, d, s, last, h, end))
            h = end
    ping_all()
    e = np.array(ev, dtype=np.int64)
    device, stream, kind, op, host, true, anch = e.T
    raw = _read_clock(true, device, anch, anchors, clock, t0, quantum_ns, rounding)
    y = np.array(sy, np.int64).reshape(-1, 6)
    g = np.array(gpu, np.int64).reshape(-1, 7)
    tables = {
        "ops": {"seq": g[:, 0], "device": g[:, 1], "stream": g[:, 2],
                "host_begin_ns": g[:, 6], "host_end_ns": g[:, 5]},
        "events": {"device": device, "stream": stream, "kind": kind, "op": op,
                   "raw_ns": raw, "host_record_ns": host},
        "syncs": {"kind": y[:, 0], "device": y[:, 1], "stream": y[:, 2],
                  "last_event": y[:, 3], "host_begin_ns": y[:, 4],
                  "host_end_ns": y[:, 5]},
        "gpu": {"op": g[:, 0], "device": g[:, 1],
                "stream": g[:, 2], "kind": np.full(len(g), int(GpuKind.OP)),
                "begin_event": g[:, 3], "end_event": g[:, 4], "launch_ns": g[:, 5]},
        "truth": {"event": np.arange(len(e)), "host_ns": true},
    }
    meta = {"source": "tests.synth", "simulated": True, "aligned": False,
            "synth": {"t0_ns": t0, "quantum_ns": quantum_ns, "rounding": rounding,
                      "clocks": [{"offset_ns": o, "drift_ppm": r} for o, r in clock]}}
    if stated:
        meta["clock_resolution_ns"] = {str(d): read_error_ns(quantum_ns, anchor_ns)
                                       for d in range(devices)}
    return Timeline(tables, ["op", "synchronize", "ping"], meta)


def true_host_ns(tl: Timeline, device: int, raw_ns: float) -> float:
    """The true host time at which device ``device``'s clock read ``raw_ns``
    (before quantisation and chaining)."""
    s = tl.meta["synth"]
    c = s["clocks"][device]
    return s["t0_ns"] + (raw_ns - s["t0_ns"] - c["offset_ns"]) / (1 + c["drift_ppm"] * 1e-6)
