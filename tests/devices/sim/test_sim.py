"""SimGPU: streams, latencies, waits, the device clock as CUDA reads it, the
roofline cost model, truth, validation; and end to end under the recorder."""

import math
import threading
import warnings

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.clockread import chain_raw_ns, elapsed_ms
from cutimeline.devices.sim import FakeClock, SimGPU, synthetic_events
from cutimeline.devices.sim.clock import device_time_ns, read_device_clock
from cutimeline.devices.sim.roofline import PROFILES, GpuProfile, OpModel
from cutimeline.timeline.schema import NONE, EventKind
from cutimeline.timeline.table import Table

aten = torch.ops.aten
LAT, EV = 4_000, 2_000  # launch and event latency used below


def make(costs=None, **kw):
    """A SimGPU on a fake clock whose op costs are {name: ns}; CUDA event
    semantics unless bracket= says otherwise."""
    clock = FakeClock()
    costs = costs or {}
    opts = dict(offset_ns=7_000_000_000, drift_ppm=0.0, launch_latency_ns=LAT,
                event_latency_ns=EV, pings=1, clock=clock, bracket="cuda",
                host_cost="measured",
                cost=lambda name, *_: costs.get(name, 1_000))
    opts.update(kw)
    return SimGPU(**opts), clock


def launch(gpu, clock, name, seq, stream=0, dispatch_ns=1_000):
    """One op as the recorder drives it: BEGIN, the op runs, END."""
    b = gpu.begin(stream, seq)
    clock.advance(dispatch_ns)
    e = gpu.end(stream, seq, name, (), {}, None)
    return b, e


def truth(h):
    return h.truth["host_ns"]


# -- streams and latencies ---------------------------------------------------

def test_idle_stream_op_starts_launch_latency_after_its_dispatch_began():
    gpu, clock = make({"k": 10_000})
    gpu.start()
    h0 = clock.now()
    b, e = launch(gpu, clock, "k", 0, dispatch_ns=1_000)
    assert gpu.drained_at(0) == h0 + LAT + 10_000
    h = gpu.harvest()
    t = truth(h)
    assert t[b] == h0 + EV                      # BEGIN: idle stream, event latency
    assert t[e] == h0 + LAT + 10_000            # END: after the op's work
    assert h.events["host_record_ns"][b] == h0
    assert h.events["host_record_ns"][e] == h0 + 1_000


def test_idle_stream_op_starts_no_earlier_than_its_launch_returned():
    # a dispatch longer than the launch latency: the kernel starts at the
    # return, so the row (from the return, aligner) is its work alone
    gpu, clock = make({"k": 10_000})
    gpu.start()
    h0 = clock.now()
    b, e = launch(gpu, clock, "k", 0, dispatch_ns=6_000)
    t = truth(gpu.harvest())
    assert t[e] == h0 + 6_000 + 10_000


def test_kernel_bracket_begins_at_the_work_not_at_the_record():
    gpu, clock = make({"k": 10_000}, bracket="kernel")
    gpu.start()
    h0 = clock.now()
    b, e = launch(gpu, clock, "k", 0, dispatch_ns=50_000)   # slow CPU-side op
    b2, e2 = launch(gpu, clock, "k", 1, dispatch_ns=1_000)
    t = truth(gpu.harvest())
    assert t[b] == h0 + 50_000                   # right before its work, at the return
    assert t[e] == h0 + 50_000 + 10_000          # the row is the work alone
    assert t[b2] == t[e]                          # queued behind the first op
    assert t[e2] == t[b2] + 10_000


def test_kernel_bracket_sync_covers_its_own_begin():
    gpu, clock = make({"k": 10_000}, bracket="kernel")
    gpu.start()
    launch(gpu, clock, "k", 0)
    t_begin = clock.now()
    b = gpu.begin(0, 1)
    gpu.wait(0)                     # a host-blocking op (.item())
    gpu.note_sync("item", 0, 1, t_begin, clock.now())
    h = gpu.harvest()
    row = list(h.syncs["kind"]).index("item")
    assert h.syncs["last_event"][row] == b
    assert truth(h)[b] <= h.syncs["host_end_ns"][row]
    assert truth(h)[b] >= h.events["host_record_ns"][b]


def test_kernel_bracket_region_begins_at_its_first_work_on_its_stream():
    # a compiled region (BEGIN, an op inside, its own work, END): its BEGIN
    # executes with the first work on its stream, not when it was recorded;
    # a BEGIN pending on another stream waits for work there
    gpu, clock = make({"k": 10_000, "region": 3_000, "side": 500}, bracket="kernel")
    gpu.start()
    h0 = clock.now()
    region = gpu.begin(0, 0)
    side = gpu.begin(1, 1)
    clock.advance(20_000)                         # host work before the inner op
    b, e = launch(gpu, clock, "k", 2)
    end = gpu.end(0, 0, "region", (), {}, None)
    clock.advance(1_000)
    gpu.end(1, 1, "side", (), {}, None)
    t = truth(gpu.harvest())
    assert t[region] == t[b] == h0 + 20_000 + LAT
    assert t[e] == t[b] + 10_000 and t[end] == t[e] + 3_000
    assert t[side] == h0 + 20_000 + 2_000 + LAT   # settled by its own stream's work


def test_ops_queue_in_stream_order():
    gpu, clock = make({"long": 100_000, "short": 1_000})
    gpu.start()
    h0 = clock.now()
    b1, e1 = launch(gpu, clock, "long", 0)
    b2, e2 = launch(gpu, clock, "short", 1)
    t = truth(gpu.harvest())
    end1 = h0 + LAT + 100_000
    assert t[e1] == end1
    assert t[b2] == end1                 # the BEGIN waits behind the long op
    assert t[e2] == end1 + 1_000         # the op starts when the stream frees


def test_end_event_no_earlier_than_its_event_latency():
    gpu, clock = make({"free": 0}, launch_latency_ns=0, event_latency_ns=5_000)
    gpu.start()
    h0 = clock.now()
    b, e = launch(gpu, clock, "free", 0, dispatch_ns=100)
    t = truth(gpu.harvest())
    assert t[e] == h0 + 100 + 5_000


def test_streams_run_independently():
    gpu, clock = make({"long": 1_000_000, "short": 1_000})
    gpu.start()
    h0 = clock.now()
    launch(gpu, clock, "long", 0, stream=0)
    b, e = launch(gpu, clock, "short", 1, stream=1)
    t = truth(gpu.harvest())
    assert t[b] == h0 + 1_000 + EV
    assert t[e] == h0 + 1_000 + LAT + 1_000


def test_wait_stream_orders_work_across_streams():
    gpu, clock = make({"long": 1_000_000, "short": 1_000})
    gpu.start()
    launch(gpu, clock, "long", 0, stream=0)
    drained0 = gpu.drained_at(0)
    gpu.wait_stream(1, 0)
    b, e = launch(gpu, clock, "short", 1, stream=1)
    t = truth(gpu.harvest())
    assert t[b] == drained0
    assert t[e] == drained0 + 1_000


def test_wait_stream_ignores_work_enqueued_later():
    gpu, clock = make({"long": 1_000_000, "short": 1_000})
    gpu.start()
    ev = gpu.record_event(0)
    launch(gpu, clock, "long", 0, stream=0)   # after the event: not waited for
    gpu.wait_event(ev, 1)
    h1 = clock.now()
    b, e = launch(gpu, clock, "short", 1, stream=1)
    t = truth(gpu.harvest())
    assert t[b] == h1 + EV
    assert t[e] < gpu.drained_at(0)


def test_current_stream_is_per_thread():
    gpu, _ = make()
    seen = {}
    with gpu.stream(3):
        assert gpu.current_stream() == 3
        t = threading.Thread(target=lambda: seen.update(s=gpu.current_stream()))
        t.start()
        t.join()
        with gpu.stream(5):
            assert gpu.current_stream() == 5
        assert gpu.current_stream() == 3
    assert gpu.current_stream() == 0 and seen["s"] == 0


def test_owns_meta_by_default_cpu_when_asked_but_not_in_host_blocks():
    assert SimGPU().owns("meta") and not SimGPU().owns("cpu")
    gpu, _ = make(owns=("cpu", "meta"))
    assert gpu.owns(torch.device("cpu")) and gpu.owns(torch.device("meta"))
    assert not gpu.owns(torch.device("cuda", 0))
    with gpu.host():
        assert not gpu.owns(torch.device("cpu"))
    assert gpu.owns("cpu")
    assert SimGPU(owns="meta").owns("meta") and not SimGPU(owns="meta").owns("cpu")


# -- syncs ---------------------------------------------------------------------

def test_wait_blocks_host_until_stream_drains():
    gpu, clock = make({"long": 3_000_000})
    gpu.start()
    b, e = launch(gpu, clock, "long", 0)
    t0 = clock.now()
    gpu.wait(0)
    assert clock.now() == gpu.drained_at(0) > t0
    gpu.note_sync("item", 0, 0, t0, clock.now())
    h = gpu.harvest()
    row = list(h.syncs["kind"]).index("item")
    assert h.syncs["last_event"][row] == e
    assert h.syncs["host_end_ns"][row] >= truth(h)[e]
    assert h.syncs["stream"][row] == 0 and h.syncs["op"][row] == 0


def test_wait_on_one_stream_leaves_others_queued():
    gpu, clock = make({"long": 5_000_000, "short": 1_000})
    gpu.start()
    launch(gpu, clock, "long", 0, stream=1)
    launch(gpu, clock, "short", 1, stream=0)
    gpu.wait(0)
    assert clock.now() < gpu.drained_at(1)
    gpu.wait(None)
    assert clock.now() == gpu.drained_at(None) == gpu.drained_at(1)
    gpu.harvest()


def test_real_clock_wait_really_blocks_the_host():
    import time

    # 2 ms of simulated work; the host's clock is the real one throughout
    gpu = SimGPU(cost={"k": 2_000_000}, pings=1, host_cost="measured")
    gpu.start()
    gpu.begin(0, 0)
    gpu.end(0, 0, "k", (), {}, None)
    gpu.wait(0)
    assert time.perf_counter_ns() >= gpu.drained_at(0)
    h = gpu.harvest()
    assert np.all(truth(h) >= h.events["host_record_ns"])


def test_synchronize_is_noted_like_torch_cuda_synchronize():
    gpu, clock = make({"k": 50_000, "short": 1_000})
    gpu.start()
    launch(gpu, clock, "k", 0, stream=2)
    launch(gpu, clock, "short", 1, stream=1)
    gpu.synchronize(1)
    assert clock.now() == gpu.drained_at(1) < gpu.drained_at(2)
    gpu.synchronize()
    assert clock.now() == gpu.drained_at(2)
    h = gpu.harvest()
    kinds = list(h.syncs["kind"])
    one, every = kinds.index("stream_synchronize"), kinds.index("synchronize")
    assert h.syncs["stream"][one] == 1 and h.syncs["op"][one] == NONE
    assert h.syncs["stream"][every] == NONE and h.syncs["op"][every] == NONE
    ends = truth(h)[h.events["kind"] == EventKind.END]
    assert h.syncs["host_end_ns"][every] >= ends.max()


def test_note_sync_covers_only_events_before_its_wait():
    gpu, clock = make({"k": 50_000})
    gpu.start()
    b, e = launch(gpu, clock, "k", 0)
    t0 = clock.now()
    gpu.wait(0)
    launch(gpu, clock, "k", 1)        # as if another thread launched meanwhile
    gpu.note_sync("item", 0, 0, t0, clock.now())
    h = gpu.harvest()
    row = list(h.syncs["kind"]).index("item")
    assert h.syncs["last_event"][row] == e


def test_calibration_pings_bracket_their_event():
    gpu, clock = make(pings=3)
    gpu.start()
    launch(gpu, clock, "k", 0)
    h = gpu.harvest()
    ping = h.syncs["kind"] == "ping"
    assert ping.sum() == 6
    last = h.syncs["last_event"][ping]
    assert np.all(h.events["kind"][last] == EventKind.PING)
    assert np.all(h.syncs["host_begin_ns"][ping] <= truth(h)[last])
    assert np.all(truth(h)[last] <= h.syncs["host_end_ns"][ping])
    assert h.events["kind"][0] == EventKind.ANCHOR and h.events["raw_ns"][0] == 0


# -- the device clock ----------------------------------------------------------

def test_device_time_is_offset_drifted_and_quantised():
    t = device_time_ns([0, 1_234, 10**10], start_ns=0, offset_ns=10_250,
                       drift_ppm=100.0, quantum_ns=500)
    assert list(t) == [10_000, 11_000, (10_250 + 10**10 + 10**6) // 500 * 500]
    assert np.all(t % 500 == 0)


def test_elapsed_ms_is_float32_like_cuda():
    ms = elapsed_ms(0, 10_000_000_500)   # 10 s + 0.5 µs
    assert ms.dtype == np.float32
    back = int(np.rint(np.float64(ms) * 1e6))
    assert back != 10_000_000_500                  # float32 lost the 0.5 µs
    assert abs(back - 10_000_000_500) <= 500      # half an ulp at 10 s (~0.5 µs)
    assert int(np.rint(np.float64(elapsed_ms(0, 3_500)) * 1e6)) == 3_500


def test_short_recording_reads_quantised_times_exactly():
    gpu, clock = make({"k": 12_345}, offset_ns=10**12 + 123)
    gpu.start()
    for i in range(50):
        launch(gpu, clock, "k", i, dispatch_ns=3_000 + 7 * i)
    h = gpu.harvest()
    raw = h.events["raw_ns"]
    dev = device_time_ns(truth(h), start_ns=h.meta["sim"]["start_host_ns"],
                         offset_ns=10**12 + 123, drift_ppm=0.0, quantum_ns=500)
    assert np.all(raw % 500 == 0)
    assert np.array_equal(raw, dev - dev[0])


def test_drift_shows_in_raw_times():
    gpu, clock = make({"k": 1_000}, drift_ppm=50.0)
    gpu.start()
    for i in range(21):
        launch(gpu, clock, "k", i, dispatch_ns=1_000)
        clock.advance(500_000_000 - 1_000)  # an op every 0.5 s for 10 s
    h = gpu.harvest()
    begins = np.flatnonzero(h.events["kind"] == EventKind.BEGIN)
    d_true = truth(h)[begins[-1]] - truth(h)[begins[0]]
    d_raw = h.events["raw_ns"][begins[-1]] - h.events["raw_ns"][begins[0]]
    assert abs(d_raw - d_true * (1 + 50e-6)) < 1_000   # 500 µs of drift, ±1 µs
    assert h.meta["sim"]["drift_ppm"] == 50.0


@pytest.mark.parametrize("interval_ns, n_anchors, bound_ns", [
    (1_000_000_000, 30, 300),   # the default: a 1 s step reads to ±31 ns
    (250_000_000, 120, 100),    # quarter-second steps read to ±8 ns
])
def test_anchor_chaining_keeps_error_small_over_many_seconds(interval_ns, n_anchors,
                                                             bound_ns):
    gpu, clock = make({"k": 20_000}, drift_ppm=-17.3, offset_ns=3 * 10**11 + 77,
                      anchor_interval_ns=interval_ns)
    gpu.start()
    for i in range(600):                 # an op every 50 ms for 30 s
        launch(gpu, clock, "k", i, dispatch_ns=10_000)
        clock.advance(50_000_000 - 10_000 + 500 * (i % 7))
    h = gpu.harvest()
    anchors = h.events["kind"] == EventKind.ANCHOR
    assert abs(anchors.sum() - n_anchors) <= 2
    m = h.meta["sim"]
    dev = device_time_ns(truth(h), start_ns=m["start_host_ns"], offset_ns=m["offset_ns"],
                         drift_ppm=m["drift_ppm"], quantum_ns=m["quantum_ns"])
    err = h.events["raw_ns"] - (dev - dev[0])
    assert np.abs(err).max() < bound_ns
    # one float32 reading from the start instead would be off by up to 1 µs
    direct = np.rint(elapsed_ms(dev[0], dev).astype(np.float64) * 1e6)
    assert np.abs(direct - (dev - dev[0])).max() > 2 * bound_ns


def test_chain_raw_ns_adds_anchor_steps():
    steps = np.array([0, 1.5, 2.0], np.float32)
    raw = chain_raw_ns(steps, np.array([0, 1, 2, 2]), np.array([0, 0, 0, 0.25], np.float32))
    assert list(raw) == [0, 1_500_000, 3_500_000, 3_750_000]


def test_read_device_clock_of_nothing():
    raw, dev = read_device_clock(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                 np.zeros(0, np.int64), start_ns=0, offset_ns=0,
                                 drift_ppm=0.0, quantum_ns=500)
    assert len(raw) == len(dev) == 0


# -- truth and harvest -----------------------------------------------------------

def _random_workload(gpu, clock, rng, n=300):
    for i in range(n):
        with gpu.stream(int(rng.integers(0, 3))):
            s = gpu.current_stream()
            launch(gpu, clock, "k", i, stream=s, dispatch_ns=int(rng.integers(500, 20_000)))
            if rng.random() < 0.05:
                t0 = clock.now()
                which = None if rng.random() < 0.5 else s
                gpu.wait(which)
                gpu.note_sync("item", which, i, t0, clock.now())
            if rng.random() < 0.05:
                gpu.wait_stream(int(rng.integers(0, 3)), s)
        clock.advance(int(rng.integers(0, 30_000)))


def test_truth_is_consistent_with_what_the_recorder_sees():
    rng = np.random.default_rng(5)
    gpu, clock = make(cost=lambda *_: int(rng.integers(0, 80_000)), drift_ppm=8.0)
    gpu.start()
    _random_workload(gpu, clock, rng)
    h = gpu.harvest()
    t, ev, sy = truth(h), h.events, h.syncs
    assert np.array_equal(h.truth["event"], np.arange(len(t)))
    assert np.all(t >= ev["host_record_ns"])
    assert np.all(sy["host_end_ns"] >= t[sy["last_event"]])
    assert np.all(sy["host_end_ns"] >= sy["host_begin_ns"])
    for s in np.unique(ev["stream"]):   # each stream runs its events in order
        assert np.all(np.diff(t[ev["stream"] == s]) >= 0)
    # the harvest fits the Timeline's tables (sync kinds are strings)
    assert len(Table("events", h.events)) == len(Table("truth", h.truth)) == len(t)
    # ... and the thread ids of the waits, which the recorder maps to its threads
    assert len(Table("syncs", {k: v for k, v in h.syncs.items()
                               if k not in ("kind", "ident")}))
    assert set(h.syncs["ident"].tolist()) == {threading.get_ident()}
    assert all(isinstance(k, str) for k in h.syncs["kind"])


def test_harvest_is_labelled_a_simulation():
    gpu, clock = make(profile="a100")
    gpu.start()
    launch(gpu, clock, "k", 0)
    h = gpu.harvest()
    assert h.meta["simulated"] is True
    assert h.meta["device_name"] == "SimGPU a100 (simulated)"
    m = h.meta["sim"]
    assert (m["profile"], m["offset_ns"], m["drift_ppm"]) == ("a100", 7_000_000_000, 0.0)
    assert m["start_host_ns"] == FakeClock().now()
    import json
    json.dumps(h.meta)                   # meta must be saveable


def test_threads_launching_at_once_get_distinct_events():
    gpu = SimGPU(cost={"k": 1_000}, pings=1)
    gpu.start()
    out = []

    def worker(k):
        with gpu.stream(k):
            for i in range(200):
                b = gpu.begin(k, k * 1000 + i)
                e = gpu.end(k, k * 1000 + i, "k", (), {}, None)
                out.append((b, e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h = gpu.harvest()
    idx = [i for pair in out for i in pair]
    assert len(set(idx)) == 1600
    ev = h.events
    for b, e in out:
        assert ev["op"][b] == ev["op"][e] and ev["stream"][b] == ev["stream"][e]
        assert ev["kind"][b] == EventKind.BEGIN and ev["kind"][e] == EventKind.END
    assert np.all(truth(h) >= ev["host_record_ns"])


def test_a_device_records_again_after_harvest():
    gpu, clock = make()
    gpu.start()
    launch(gpu, clock, "k", 0)
    first = gpu.harvest()
    gpu.start()
    launch(gpu, clock, "k", 0)
    second = gpu.harvest()
    assert len(first.events["raw_ns"]) == len(second.events["raw_ns"])
    assert second.meta["sim"]["start_host_ns"] > first.meta["sim"]["start_host_ns"]


def test_jitter_varies_costs_reproducibly():
    def run(seed):
        gpu, clock = make({"k": 100_000}, jitter=0.3, seed=seed)
        gpu.start()
        for i in range(20):
            launch(gpu, clock, "k", i)
        t = truth(gpu.harvest())
        return np.diff(t[t > 0])

    assert np.array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


def test_cost_dict_overrides_by_name_and_falls_back_to_roofline():
    x = torch.empty(1024, 1024, device="meta")
    gpu, clock = make(cost={"aten::add": 777, "aten::mm": 5})
    model = OpModel(PROFILES["h100"])
    assert gpu.ops.cost_ns(aten.add.Tensor, (x, x), {}, x) == 777
    assert gpu.ops.cost_ns(aten.mm.default, (x, x), {}, x) == 5
    assert gpu.ops.cost_ns(aten.mul.Tensor, (x, x), {}, x) == \
        model.cost_ns(aten.mul.Tensor, (x, x), {}, x)


# -- the roofline cost model ------------------------------------------------------


# -- validation --------------------------------------------------------------------

@pytest.mark.parametrize("kw, text", [
    ({"profile": "v100"}, "'v100'"),
    ({"quantum_ns": 0}, "quantum_ns=0"),
    ({"offset_ns": -5}, "offset_ns=-5"),
    ({"offset_ns": 1.5}, "offset_ns=1.5"),
    ({"drift_ppm": float("nan")}, "drift_ppm=nan"),
    ({"drift_ppm": "5"}, "drift_ppm='5'"),
    ({"launch_latency_ns": -1}, "launch_latency_ns=-1"),
    ({"event_latency_ns": True}, "event_latency_ns=True"),
    ({"cost": 5}, "cost=5"),
    ({"cost": {"aten::mm": -3}}, "cost['aten::mm']=-3"),
    ({"jitter": 3}, "jitter=3"),
    ({"tf32": "yes"}, "tf32='yes'"),
    ({"owns": ()}, "owns=()"),
    ({"owns": ("cpu", 3)}, "owns=('cpu', 3)"),
    ({"index": -1}, "index=-1"),
    ({"anchor_interval_ns": 0}, "anchor_interval_ns=0"),
    ({"pings": 0}, "pings=0"),
    ({"seed": -1}, "seed=-1"),
    ({"clock": object()}, "clock=<object"),
])
def test_bad_options_are_named(kw, text):
    with pytest.raises(CutimelineError, match=None) as err:
        SimGPU(**kw)
    assert text in str(err.value) and str(err.value).endswith(".")


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        SimGPU("h100", 5)


def test_custom_profile_is_checked():
    good = GpuProfile("mine", dict(PROFILES["h100"].peak_flops), 1e12)
    assert SimGPU(good).name == "SimGPU mine (simulated)"
    with pytest.raises(CutimelineError, match="'fp8'"):
        SimGPU(GpuProfile("bad", {k: v for k, v in good.peak_flops.items() if k != "fp8"}, 1e12))
    with pytest.raises(CutimelineError, match="bandwidth"):
        SimGPU(GpuProfile("bad", good.peak_flops, 0.0))


def test_misuse_is_a_clear_error():
    gpu, clock = make()
    with pytest.raises(CutimelineError, match="start()"):
        gpu.begin(0, 0)
    with pytest.raises(CutimelineError, match="start()"):
        gpu.harvest()
    gpu.start()
    with pytest.raises(CutimelineError, match="already recording"):
        gpu.start()
    with pytest.raises(CutimelineError, match="stream -1"):
        with gpu.stream(-1):
            pass
    with pytest.raises(CutimelineError, match="SimEvent"):
        gpu.wait_event("not an event", 0)
    gpu.harvest()
    with pytest.raises(CutimelineError, match="start()"):
        gpu.end(0, 0, "k", (), {}, None)


@pytest.mark.parametrize("bad", [-1, float("nan"), "fast", None])
def test_cost_function_must_return_a_duration(bad):
    gpu, clock = make(cost=lambda *_: bad)
    gpu.start()
    gpu.begin(0, 0)
    with pytest.raises(CutimelineError, match="returned"):
        gpu.end(0, 0, "k", (), {}, None)


# -- synthetic Timelines --------------------------------------------------------------


# -- end to end under the recorder ---------------------------------------------------

def _need_recorder():
    from cutimeline.recording.recorder import record
    return record


def _mlp_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_mlp_training_step_records_gpu_rows(device):
    record = _need_recorder()
    with record(device=SimGPU("h100", owns=(device,))) as rec:
        _mlp_step(device)
    tl = rec.timeline
    assert len(tl.gpu) > 10
    assert tl.meta["simulated"] is True
    assert "(simulated)" in repr(tl.meta)
    assert len(tl.truth) == len(tl.events)
    names = set(tl.decode(tl.gpu["name"]))
    assert any("mm" in n for n in names)


def test_item_on_the_loss_blocks_the_host_for_queued_simulated_work():
    record = _need_recorder()
    # 5 ms of simulated work per op: far more than the host needs even on a
    # loaded machine, so the queue is deep when .item() comes
    gpu = SimGPU("h100", cost=lambda *_: 5_000_000)
    with record(device=gpu) as rec:
        loss = _mlp_step("meta")
        queued = gpu.drained_at(None)
        assert math.isfinite(loss.item())  # a modelled value (values.py), after the wait
    tl = rec.timeline
    names = list(tl.decode(tl.ops["name"]))
    item = [i for i, n in enumerate(names) if "_local_scalar_dense" in n]
    assert item, "the .item() op was not recorded"
    assert queued > tl.ops.host_begin_ns[item[0]]        # work was still queued
    assert tl.ops.host_end_ns[item[0]] >= queued         # and the host waited
    assert len(tl.syncs) > 0


def test_simgpu_is_public():
    assert ctl.SimGPU is SimGPU
    assert "SIMULATED" in repr(synthetic_events(10))


# -- the launch queue ---------------------------------------------------------------

def _queued_launches(q):
    """Five 10 µs muls launched 1 µs apart into a queue of ``q`` (0:
    unbounded), driven as the recorder drives them: BEGIN, run, END."""
    gpu, clock = make({"aten::mul.Tensor": 10_000}, launch_queue=q)
    gpu.start()
    t0 = clock.now()
    x = torch.ones(4, device="meta")
    ends = []
    for seq in range(5):
        gpu.begin(0, seq)
        clock.advance(1_000)
        out = gpu.run(aten.mul.Tensor, (x, x), {})
        ends.append(gpu.end(0, seq, aten.mul.Tensor, (x, x), {}, out))
    h = gpu.harvest()
    return h, t0, ends


def test_a_full_launch_queue_holds_the_host_until_the_oldest_launch_finishes():
    h, t0, ends = _queued_launches(2)
    launched = h.events["host_record_ns"][ends] - t0
    done = truth(h)[ends] - t0
    assert done.tolist() == [14_000, 24_000, 34_000, 44_000, 54_000]
    # the third launch waits for the first to finish, and so on
    assert launched.tolist() == [1_000, 2_000, 14_000, 24_000, 34_000]
    assert h.meta["launch_queue"] == 2
    h, t0, ends = _queued_launches(0)  # unbounded: the host runs ahead
    assert (h.events["host_record_ns"][ends] - t0).tolist() == [1_000, 2_000, 3_000,
                                                               4_000, 5_000]
    assert h.meta["launch_queue"] == 0


def test_the_recorder_sees_a_full_queue_as_the_launching_op_s_host_time():
    record = _need_recorder()
    # 1 ms kernels: far longer than the host's 10 µs and the recorder's own
    # time per op, even on a loaded machine
    gpu = SimGPU("h100", cost={"aten::mul": 1_000_000}, host_cost=10_000, launch_queue=4)
    x = torch.ones(16, device="meta")
    with record(device=gpu, steps="manual") as rec:
        for _ in range(12):
            x = x.mul(2)
        rec.step()
    tl = rec.timeline
    assert tl.meta["launch_queue"] == 4
    ev = tl.events
    end = np.flatnonzero(ev.kind == EventKind.END)
    launched = ev.host_record_ns[end]
    done = tl.truth.host_ns[np.searchsorted(tl.truth.event, end)]
    # never more than 4 launched and unfinished: launch k after op k−4 ended
    assert (launched[4:] >= done[:-4]).all()
    own = tl.ops.host_end_ns - tl.ops.host_begin_ns
    assert (own[:4] < 500_000).all() and (own[5:] > 500_000).all()  # the wait is in the op


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1024"])
def test_launch_queue_must_be_a_count(bad):
    with pytest.raises(CutimelineError, match=f"launch_queue={bad!r} must be an integer"):
        SimGPU(launch_queue=bad)


def test_dropout_in_training_is_one_kernel_as_on_cuda():
    """aten's dropout takes its fused kernel for CUDA tensors: one
    native_dropout (and its backward), not meta's bernoulli_, div_, mul."""
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)).to("meta")
    with ctl.record(device=SimGPU("h100")) as rec:
        m(torch.randn(8, 64, device="meta")).sum().backward()
        m.eval()
        m(torch.randn(8, 64, device="meta"))  # eval: no dropout at all
    names = list(rec.timeline.to_pandas("ops")["name"])
    assert names.count("aten::native_dropout") == 1
    assert names.count("aten::native_dropout_backward") == 1
    assert not any(n.startswith(("aten::bernoulli", "aten::div_")) for n in names)
    assert torch.nn.functional.dropout.__name__ == "dropout"
    assert not hasattr(torch.nn.functional.dropout, "__wrapped__")  # undone at stop


def test_owning_cpu_tensors_warns_that_the_verdict_is_not_cudas():
    # torch takes its CPU code paths on CPU tensors (AdamW without foreach,
    # its step counts read with .item(): device syncs here): a loop that is
    # GPU-bound on meta tensors read host-bound on CPU ones, silently.
    from cutimeline.devices.sim.options import CpuOwnedWarning
    with pytest.warns(CpuOwnedWarning, match="not what CUDA would give") as caught:
        SimGPU(owns=("cpu", "meta"))
    assert caught[0].filename == __file__  # the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SimGPU(owns=("meta",))
        SimGPU()
