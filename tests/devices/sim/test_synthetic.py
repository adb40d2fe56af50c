"""Synthetic simulated Timelines (``synthetic.py``) and the simulated
device clock (``clock.py``): event streams that follow SimGPU's rules."""

import numpy as np
import pytest
from test_sim import EV, LAT, make, truth

from cutimeline import CutimelineError
from cutimeline.devices.sim.clock import read_device_clock
from cutimeline.devices.sim import synthetic_events
from cutimeline.timeline.schema import EventKind


def test_synthetic_events_are_consistent():
    tl = synthetic_events(3_000, streams=3, sync_every=250, drift_ppm=-30.0,
                          anchor_interval_ns=5_000_000, seed=3)
    ev, t, sy = tl.events, tl.truth.host_ns, tl.syncs
    assert tl.meta["simulated"] and not tl.aligned
    assert len(tl.ops) == len(tl.gpu) == 3_000
    assert np.all(t >= ev.host_record_ns)
    assert np.all(sy.host_end_ns >= t[sy.last_event])
    assert np.all(ev.kind[tl.gpu.begin_event] == EventKind.BEGIN)
    assert np.all(ev.kind[tl.gpu.end_event] == EventKind.END)
    assert np.array_equal(ev.op[tl.gpu.begin_event], np.arange(3_000))
    assert (ev.kind == EventKind.ANCHOR).sum() > 3
    m = tl.meta["sim"]
    raw, dev = read_device_clock(t, np.flatnonzero(ev.kind == EventKind.ANCHOR),
                                 np.maximum.accumulate(np.cumsum(ev.kind == EventKind.ANCHOR) - 1),
                                 start_ns=m["start_host_ns"], offset_ns=m["offset_ns"],
                                 drift_ppm=m["drift_ppm"], quantum_ns=m["quantum_ns"])
    assert np.array_equal(raw, ev.raw_ns)
    assert np.abs(ev.raw_ns - (dev - dev[0])).max() < 200
    for s in range(3):
        assert np.all(np.diff(t[ev.stream == s]) >= 0)


def test_synthetic_events_follow_simgpu_rules():
    """Replayed through SimGPU with the same host times and op costs, the
    vectorised model gives the same true event times."""
    n, every = 40, 15
    tl = synthetic_events(n, streams=2, sync_every=every, pings=1, seed=9,
                          launch_latency_ns=LAT, event_latency_ns=EV)
    rng = np.random.default_rng(9)   # synthetic_events draws dispatch, then cost
    rng.integers(3_000, 30_000, n, endpoint=True)
    cost = rng.integers(1_000, 60_000, n, endpoint=True)
    ops = tl.ops
    gpu, clock = make(cost=lambda name, *_: int(cost[int(name)]))
    clock.t = int(tl.meta["sim"]["start_host_ns"])
    gpu.start()
    pairs = []
    for i in range(n):
        assert clock.t <= ops.host_begin_ns[i]
        clock.t = int(ops.host_begin_ns[i])
        b = gpu.begin(int(ops.stream[i]), i)
        clock.t = int(ops.host_end_ns[i])
        pairs.append((b, gpu.end(int(ops.stream[i]), i, str(i), (), {}, None)))
        if (i + 1) % every == 0:
            gpu.wait(None)
    t = truth(gpu.harvest())
    got = np.array([[t[b], t[e]] for b, e in pairs])
    want = tl.truth.host_ns[np.stack([tl.gpu.begin_event, tl.gpu.end_event], 1)]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("kw", [{"streams": 0}, {"sync_every": 0},
                                {"cost_ns": (5, 1)}, {"n_ops": -1}])
def test_synthetic_events_validate(kw):
    args = {"n_ops": 10, **kw}
    with pytest.raises(CutimelineError, match=next(iter(kw))):
        synthetic_events(**args)
