"""Synthetic simulated Timelines, made with NumPy alone: many launches on
SimGPU's rules (launch and event latency, stream order, anchors, pings) and
their truth, for the aligner's and the renderers' tests and benchmarks,
at sizes (10^7 events) that running torch ops through a SimGPU could not
reach.
"""

from __future__ import annotations

import numpy as np

from ...errors import CutimelineError
from ...timeline.gpus import EVENT_TICK_NS
from ...timeline.schema import NONE, EventKind, GpuKind, OpFlag
from ...timeline.timeline import Timeline
from ..clockread import read_error_ns
from .clock import read_device_clock

__all__ = ["synthetic_events"]


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
                     drift_ppm: float = 12.5, quantum_ns: int = EVENT_TICK_NS,
                     launch_latency_ns: int = 4_000, event_latency_ns: int = 2_000,
                     anchor_interval_ns: int = 1_000_000_000, pings: int = 3,
                     start_ns: int = 1_000_000_000, seed: int = 0) -> Timeline:
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
        ready = np.stack([hb + event_latency_ns, np.maximum(he, hb + launch_latency_ns),
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
