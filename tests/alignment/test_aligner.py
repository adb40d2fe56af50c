import subprocess
import sys

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline import CutimelineError, Timeline
from cutimeline.alignment.aligner import align, event_host_ns, launch_delay_ns, ping_offset_ns
from cutimeline.alignment.clockfit import MAX_DRIFT, fit_clock
from cutimeline.timeline.schema import NONE

from synth import trace, true_host_ns

BACKENDS = ("numba", "numpy")


def _covering(tl):
    """(sync row, covered event indices) for every sync, by brute force."""
    ev, sy = tl.events, tl.syncs
    for i in range(len(sy)):
        k = sy.last_event[i]
        if k < 0:
            continue
        on = (ev.device == ev.device[k]) & (np.arange(len(ev)) <= k)
        if sy.stream[i] != NONE:
            on &= ev.stream == sy.stream[i]
        yield i, np.flatnonzero(on)


def _violations(tl, host):
    early = int(np.sum(host < tl.events.host_record_ns))
    late = sum(int(np.sum(host[on] > tl.syncs.host_end_ns[i])) for i, on in _covering(tl))
    return early, late


# -- accuracy on simulated truth ---------------------------------------------------

@pytest.mark.parametrize("seed", range(24))
def test_aligned_times_match_the_truth_within_the_bound(seed):
    tl = trace(seed, devices=1 + seed % 3 // 2, streams=1 + seed % 4,
               rounding="round" if seed % 2 else "floor")
    a = align(tl)
    host = event_host_ns(a)
    err = np.abs(host - tl.truth.host_ns)
    c = a.clocks
    row = np.searchsorted(c.device, tl.events.device)
    # the bound holds for every event: the band is built from readings
    # widened by the stated read error, and an event's reading adds it once
    # more (+1: the offset's rounding to whole ns)
    assert (c.relax_ns == 0).all()
    assert (err <= c.bound_max_ns[row] + 1).all()
    assert _violations(tl, host) == (0, 0)
    for r in range(len(c)):
        mid = true_host_ns(tl, int(c.device[r]), float(c.ref_raw_ns[r]))
        assert abs(c.offset_ns[r] - mid) <= c.bound_ns[r] + 1
        assert c.bound_ns[r] <= c.bound_max_ns[r]


def test_the_stated_read_error_widens_the_bound_by_up_to_twice_it():
    # lower points lowered and upper points raised by it widen the band by
    # up to twice it (the half-width by up to once); the event's own
    # reading adds it once more
    for seed in range(4):
        tl = trace(seed, streams=2)
        res = tl.meta["clock_resolution_ns"]["0"]
        bare = align(tl.replace(meta={**tl.meta, "clock_resolution_ns": {}})).clocks
        stated = align(tl).clocks
        extra = stated.bound_ns[0] - bare.bound_ns[0] + bare.relax_ns[0]
        assert res <= extra <= 2.05 * res


def test_quantisation_with_no_latency_needs_relaxing_and_stays_causal():
    # without a stated read error, ticks make the bounds contradict: relaxed
    relaxed = 0
    for seed in range(6):
        tl = trace(seed, rounding="round", event_ns=(0, 0), wake_ns=(0, 0),
                   launch_ns=(0, 0), sync_p=0.05, n_ops=600, stated=False)
        a = align(tl)
        relaxed += a.clocks.relax_ns[0] > 0
        host = event_host_ns(a)
        assert _violations(tl, host) == (0, 0)
        # relaxing moves the line by no more than relax_ns
        assert a.clocks.relax_ns[0] <= tl.meta["synth"]["quantum_ns"]
        assert np.median(np.abs(host - tl.truth.host_ns)) <= 1000
        # with it stated, they do not, and the bound holds for every event
        s = align(trace(seed, rounding="round", event_ns=(0, 0), wake_ns=(0, 0),
                        launch_ns=(0, 0), sync_p=0.05, n_ops=600))
        assert s.clocks.relax_ns[0] == 0
        assert (np.abs(event_host_ns(s) - tl.truth.host_ns) <= s.clocks.bound_max_ns[0] + 1).all()
    assert relaxed >= 3


def test_a_stated_read_error_must_be_a_number_of_ns():
    tl = trace(0, n_ops=50)
    for bad in (-1, "500", float("nan"), True):
        with pytest.raises(CutimelineError, match="clock_resolution_ns"):
            align(tl.replace(meta={**tl.meta, "clock_resolution_ns": {"0": bad}}))
    with pytest.raises(CutimelineError, match="resolution_ns=-3"):
        fit_clock([0, 10], [0, 10], [5], [20], resolution_ns=-3)


def test_ten_minute_trace_with_50ppm_drift_fits_to_a_microsecond():
    from cutimeline.devices.sim import synthetic_events
    tl = synthetic_events(500_000, streams=4, drift_ppm=50.0, seed=3,
                          dispatch_ns=(1_000_000, 1_400_000),
                          cost_ns=(1_000, 2_000_000), sync_every=1000)
    assert len(tl.events) >= 10**6
    assert tl.end_ns - tl.start_ns >= 600e9
    a = align(tl)
    fit = np.abs(event_host_ns(a) - tl.truth.host_ns)
    ping = np.abs(event_host_ns(a, method="ping") - tl.truth.host_ns)
    assert np.median(fit) <= 1000
    assert np.median(ping) >= 1_000_000  # 50 ppm over 600 s: ms off
    assert a.clocks.ping_offset_ns[0] != NONE
    assert abs(a.clocks.slope[0] - (1 - 50e-6)) < 1e-8


def test_simgpu_truth_is_matched():
    from cutimeline.devices.sim import synthetic_events
    for seed in range(4):
        rng = np.random.default_rng(seed)
        tl = synthetic_events(3000, streams=3, seed=seed,
                              offset_ns=int(rng.integers(0, 2 * 10**9)),
                              drift_ppm=float(rng.uniform(-100, 100)),
                              launch_latency_ns=int(rng.integers(1000, 8000)),
                              sync_every=300, anchor_interval_ns=5_000_000)
        a = align(tl)
        host = event_host_ns(a)
        err = np.abs(host - tl.truth.host_ns)
        assert (err <= a.clocks.bound_max_ns[0] + 1).all()
        assert _violations(tl, host) == (0, 0)


def test_recording_through_simgpu_is_aligned():
    import torch

    from cutimeline.devices.sim import SimGPU
    from cutimeline.recording.recorder import record
    with record(device=SimGPU(seed=1, drift_ppm=80.0)) as rec:
        x = torch.ones(64, 64, device="meta")
        for _ in range(50):
            x = (x @ x).relu_() / 64
        x.sum().item()
    tl = rec.timeline
    a = align(tl)
    assert a.meta["aligned"] and len(a.clocks) == 1
    host = event_host_ns(a)
    err = np.abs(host - a.truth.host_ns[np.argsort(a.truth.event)])
    # every event, however loaded the host: the bound covers the readings
    assert (err <= a.clocks.bound_max_ns[0] + 1).all()
    assert _violations(a, host) == (0, 0)


# -- the fit on hand-made points ----------------------------------------------------

def test_exact_bounds_give_the_line_and_the_band():
    # host = 10_000 + 1.0001·raw: lower bounds 100 ns under, upper 300 over
    raw = np.arange(0, 10**9, 10**6, dtype=np.int64)
    line = 10_000 + raw + raw // 10_000
    f = fit_clock(raw, line - 100, raw[::50], line[::50] + 300)
    # the band is 400 ns wide over 1 s, so the slope is known to 4e-7
    assert abs(f.slope - 1.0001) < 4e-7
    mid = 10_000 + f.ref_raw_ns + f.ref_raw_ns // 10_000
    assert abs(f.offset_ns - (mid + 100)) <= 2  # middle of [−100, +300]
    assert 199 <= f.bound_ns <= 201 and f.bound_ns <= f.bound_max_ns < 400
    # every line + c, −100 ≤ c ≤ 300, is feasible, so the fit lies within
    # bound_max of each of them, also at the ends
    for r in raw[[0, -1]]:
        d = f.offset_ns + f.slope * (r - f.ref_raw_ns) - (10_000 + r + r / 10_000)
        assert 300 - f.bound_max_ns - 1e-6 <= d <= -100 + f.bound_max_ns + 1e-6
    assert f.relax_ns == 0 and f.n_lower == len(raw) and f.n_upper == 20
    # readings within 50 ns of their instants: the band is [−150, +350]
    # (half-width 250), and a reading's own 50 ns come on top
    g = fit_clock(raw, line - 100, raw[::50], line[::50] + 300, resolution_ns=50)
    assert abs(g.offset_ns - f.offset_ns) <= 2 and abs(g.slope - 1.0001) < 6e-7
    assert 299 <= g.bound_ns <= 301 and g.resolution_ns == 50 and g.relax_ns == 0


def test_contradicting_bounds_are_relaxed_by_the_least_epsilon():
    # lower points 10 ns over the identity at both ends, an upper point 4 ns
    # over it in between: no line fits; the best one violates each by 3 ns
    f = fit_clock([0, 1000], [10, 1010], [500], [504])
    assert f.relax_ns == pytest.approx(3.0)
    assert f.offset_ns == f.ref_raw_ns + 7
    assert f.slope == pytest.approx(1.0)
    assert f.bound_ns == pytest.approx(3.0)


def test_one_upper_bound_leaves_the_slope_to_the_drift_limit():
    raw = np.arange(0, 10**9, 10**6, dtype=np.int64)
    f = fit_clock(raw, raw - 100, raw[-1:], raw[-1:] + 100)
    assert np.isfinite(f.bound_max_ns)
    assert abs(f.slope - 1) <= MAX_DRIFT
    # the band opens with the slope left free: about MAX_DRIFT × span
    assert 0.2 * MAX_DRIFT * 1e9 < f.bound_max_ns < 1.1 * MAX_DRIFT * 1e9


def test_fit_clock_rejects_missing_bounds():
    with pytest.raises(CutimelineError, match="unbounded"):
        fit_clock([1, 2], [1, 2], [], [])
    with pytest.raises(CutimelineError, match="equally long"):
        fit_clock([1, 2], [1], [1], [1])


# -- Timelines ------------------------------------------------------------------------

def test_align_fills_gpu_times_and_keeps_raw_columns():
    tl = trace(5, n_ops=300)
    a = align(tl)
    assert a.meta["aligned"] and not tl.meta["aligned"]
    for col, arr in tl.events.columns.items():
        assert a.events[col] is arr or np.array_equal(a.events[col], arr)
    host = event_host_ns(a)
    # an op's work begins at its BEGIN event or, on an idle stream where
    # BEGIN ran when recorded, at the op's return from its launch
    began = host[a.gpu.begin_event]
    back = np.minimum(np.maximum(began, a.ops.host_end_ns[a.gpu.op]), a.gpu.end_ns)
    assert np.array_equal(a.gpu.begin_ns, back)
    assert (a.gpu.begin_ns > began).any() and (a.gpu.begin_ns == began).any()
    assert np.array_equal(a.gpu.end_ns, host[a.gpu.end_event])
    assert np.all(a.gpu.end_ns >= a.gpu.begin_ns)
    assert align(a) is a  # idempotent
    assert np.array_equal(event_host_ns(tl), host)  # fitted on the fly


def test_align_round_trips_through_a_file(tmp_path):
    a = align(trace(6, n_ops=200))
    a.save(tmp_path / "t.ctl")
    b = align(ctl.load(tmp_path / "t.ctl"))
    assert np.array_equal(b.clocks.offset_ns, a.clocks.offset_ns)
    assert np.array_equal(event_host_ns(b), event_host_ns(a))


def test_launch_delay_is_begin_minus_launch():
    a = align(trace(7, n_ops=200))
    d = launch_delay_ns(a)
    assert np.array_equal(d, (a.gpu.begin_ns - a.gpu.launch_ns).astype(float))
    g = a.gpu.replace(launch_ns=np.where(np.arange(len(a.gpu)) % 2, NONE, a.gpu.launch_ns))
    d = launch_delay_ns(a.replace(gpu=g))
    assert np.isnan(d[1::2]).all() and not np.isnan(d[::2]).any()


def test_ping_offset_is_the_mean_ping_midpoint():
    tl = trace(8, n_ops=100, pings=3)
    sy, ev = tl.syncs, tl.events
    p = sy.kind == tl.string_id("ping")
    want = np.mean((sy.host_begin_ns[p] + sy.host_end_ns[p]) / 2 - ev.raw_ns[sy.last_event[p]])
    assert abs(ping_offset_ns(tl)[0] - want) <= 1
    assert align(tl).clocks.ping_offset_ns[0] == ping_offset_ns(tl)[0]


def test_imported_trace_without_events_is_only_marked_aligned():
    tl = Timeline({"gpu": {"begin_ns": [5, 9], "end_ns": [7, 12], "device": [0, 0]}},
                  meta={"aligned": False})
    a = align(tl)
    assert a.meta["aligned"] and len(a.clocks) == 0
    assert np.array_equal(a.gpu.begin_ns, [5, 9])
    assert len(event_host_ns(a)) == 0


def test_events_without_any_upper_bound_are_refused():
    tl = trace(9, n_ops=100)
    no_sync = tl.replace(syncs={})
    with pytest.raises(CutimelineError, match="no sync or calibration ping"):
        align(no_sync)


def test_bad_inputs_are_refused():
    tl = trace(10, n_ops=50)
    with pytest.raises(CutimelineError, match="backend"):
        align(tl, backend="cuda")
    with pytest.raises(CutimelineError, match="method"):
        event_host_ns(tl, method="exact")
    ev = tl.events
    with pytest.raises(CutimelineError, match="events.device"):
        align(tl.replace(events=ev.replace(device=np.full(len(ev), -1))))
    sy = tl.syncs
    with pytest.raises(CutimelineError, match="own device"):
        align(tl.replace(syncs=sy.replace(device=np.full(len(sy), 3))))
    early = sy.replace(host_end_ns=np.where(np.arange(len(sy)) == 1, 0, sy.host_end_ns))
    with pytest.raises(CutimelineError, match="inconsistent"):
        align(tl.replace(syncs=early))
    stale = align(tl).clocks.replace(device=np.full(1, 4))
    with pytest.raises(CutimelineError, match="no row for device 0"):
        event_host_ns(tl.replace(clocks=stale))
    without_pings = tl.replace(syncs=sy.take(sy.kind != tl.string_id("ping")))
    with pytest.raises(CutimelineError, match="no calibration ping"):
        event_host_ns(without_pings, method="ping")


# -- the Numba and NumPy paths of align agree (the kernels: test_hull.py) -------------

def test_align_twins_agree():
    tl = trace(11, devices=2, streams=3, n_ops=800)
    a, b = align(tl, backend="numba"), align(tl, backend="numpy")
    for col, arr in a.clocks.columns.items():
        assert np.array_equal(arr, b.clocks[col]), col
    assert np.array_equal(a.gpu.begin_ns, b.gpu.begin_ns)
    assert np.array_equal(event_host_ns(a, backend="numba"), event_host_ns(a, backend="numpy"))


def test_import_cutimeline_compiles_nothing():
    code = ("import sys, cutimeline; "
            "assert 'numba' not in sys.modules, 'numba imported'; "
            "assert 'cutimeline.alignment.aligner' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
