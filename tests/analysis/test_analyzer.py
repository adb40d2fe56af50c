"""analyze() end to end: the five SimGPU scenarios of the issue, imported
traces, host-only recordings, windows, engines and misuse."""

import glob
import hashlib
import json
import os
import pathlib

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.recording.recorder import record
from cutimeline.timeline.schema import NONE, OpFlag

from handmade import random_timeline, timeline
from tickclock import TickClock, on_clock

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "kineto")
MATMUL_NS = {"aten::addmm": 1_000_000, "aten::mm": 1_000_000}


class SlowDataset(Dataset):
    """5 ms per sample, as a dataset that decodes or reads from disk: 5 ms
    of the test's clock (``tickclock.py``), in the main process or in a
    forked worker, which has a copy of the clock."""

    def __init__(self, clock: TickClock):
        self.clock = clock

    def __len__(self):
        return 64

    def __getitem__(self, i):
        self.clock.advance(5_000_000)
        return torch.ones(32), torch.zeros(1)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 1))


def train_on_loader(num_workers, clock):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # fork, whatever the platform's default: the workers must inherit the
    # patched clock (spawned ones would import the real one)
    loader = DataLoader(SlowDataset(clock), batch_size=8, num_workers=num_workers,
                        multiprocessing_context="fork" if num_workers else None)
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), cost=MATMUL_NS, seed=1, clock=clock)
    with record(device=gpu) as rec:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return ctl.analyze(rec.timeline)


def test_dataloader_without_workers_is_input_bound(clock):
    # 40 ms of fetch (8 samples of 5 ms, on the test's clock) before each
    # step's ≈ 6 ms of GPU work: the verdict does not depend on how fast
    # this machine runs the loop
    slow = train_on_loader(0, clock)
    # step 0 also creates the iterator; the last step's device window holds
    # only its own work (its fetch, before that work, is the step before's)
    steady = slow.steps[1:-1]
    assert set(steady["verdict"]) == {"input-bound"}
    assert steady["data_ns"].sum() >= 0.8 * steady["idle_ns"].sum()
    assert slow.summary().startswith("Verdict: input-bound — batches ready when the step asks")
    assert "DataLoader(num_workers>=2, pin_memory=True)" in slow.summary()
    # two workers make a 40 ms batch each, on the clock as the workers
    # are modelled (``recording/hooks/fetches.py``): one every 20 ms
    fast = train_on_loader(2, clock)
    # steps 0-1 wait for the workers to start; compare the rest
    assert len(fast.steps) == len(slow.steps)
    assert fast.steps["idle_ns"][2:].sum() <= 0.5 * slow.steps["idle_ns"][2:].sum()


@pytest.fixture
def clock():
    """A TickClock (2 µs a SimGPU read) that the recorder and SimGPU both
    read, no run-queue time: no verdict below depends on how fast this
    machine is."""
    with on_clock(TickClock(2_000), runqueue=lambda: 0) as c:
        yield c


def test_a_read_then_python_longer_than_its_wait_is_host_bound(clock):
    # the read waits ≈ 2 ms for the forward, then the host spends 20 ms on
    # the value: 2 ms of the idle after it are the read's, the rest the
    # host's Python, which the GPU would have waited for anyway
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(8, 32), torch.zeros(8, 1)
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), cost=MATMUL_NS, seed=2, clock=clock,
                     host_cost=5_000)
    with record(device=gpu) as rec:
        for _ in range(5):
            loss = torch.nn.functional.mse_loss(model(x), y)
            if loss.item() > 0:
                clock.advance(20_000_000)  # 20 ms of the user's Python
            opt.zero_grad()
            loss.backward()
            opt.step()
    steady = ctl.analyze(rec.timeline).steps[1:]
    assert (steady["verdict"] == "host-bound").all()  # the clock is the test's
    assert (steady["sync_ns"] < 0.25 * steady["idle_ns"]).all()


def test_item_every_step_is_sync_bound_and_drains_the_queue(clock):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(8, 32), torch.zeros(8, 1)
    # a 20 ms forward the host waits for, then 15 ms of acting on the value:
    # without the read the host would have done that while the GPU ran the
    # forward (a sync's share of the idle after it is at most its wait)
    cost = {"aten::addmm": 10_000_000, "aten::mm": 1_000_000}
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), cost=cost, seed=2, clock=clock,
                     host_cost=5_000)
    with record(device=gpu) as rec:
        for _ in range(5):
            loss = torch.nn.functional.mse_loss(model(x), y)
            if loss.item() > 0:   # the host acts on the value...
                clock.advance(15_000_000)  # ...and logs it: the GPU has nothing to do
            opt.zero_grad()
            loss.backward()
            opt.step()
    tl = rec.timeline
    rep = ctl.analyze(tl)
    steady = rep.steps[1:]
    assert (steady["verdict"] == "sync-bound").all()  # the clock is the test's
    assert rep.overall["verdict"] == "sync-bound"
    assert steady["sync_ns"].sum() >= 0.6 * steady["idle_ns"].sum()
    # every step's .item() waited until the queue was empty: once its own
    # gpu row (bracketed by events like any op) is done, nothing is queued
    t, depth = rep.queue_depth()
    y = tl.syncs
    item = y.op[tl.decode(y.kind) == "aten::_local_scalar_dense"]
    assert len(item) == 5
    done = tl.gpu.end_ns[np.isin(tl.gpu.op, item)]
    assert depth[np.searchsorted(t, done, side="right") - 1].tolist() == [0] * 5
    assert (rep.steps["queue_min"] == 0).all()
    assert rep.summary().startswith("Verdict: sync-bound — no host reads of GPU values")


def test_tiny_ops_are_launch_bound():
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), cost={"aten::add": 500, "aten::mul": 500},
                     launch_latency_ns=500, event_latency_ns=500, seed=3)
    x = torch.ones(16)
    # measure=False: the verdict read on the host as recorded. With its own
    # cost measured, the recorder's probe (a few µs an op, measured on the
    # real clock) is taken off a host whose dispatch SimGPU models on its
    # virtual one (4 µs an op): on some runs it takes most of the host away,
    # the base step turns GPU-bound, and the verdict flips (2 runs in 6)
    with record(device=gpu, measure=False) as rec:
        for _ in range(4):
            for _ in range(500):
                x = x.mul(1.0001).add(0.0001)
            rec.step()
    rep = ctl.analyze(rec.timeline)
    s = rep.steps
    # (the OS may stall the host inside an op's event bracket, which then
    # counts as GPU time, or between two ops for over host_gap_ns, which is
    # then host time, enough on a loaded machine to make a step "mixed":
    # demand launch on top in most steps and the whole run, not all)
    assert (s["cause"] == "launch").sum() >= len(s) - 1
    assert set(s["verdict"]) <= {"launch-bound", "mixed"}
    # (0.5 µs kernels are below what the clock fit resolves, ±~5 µs here
    # from the pings alone: rows come out a few µs long, so busy ~0.5)
    assert (s["busy_frac"] < 0.75).sum() >= len(s) - 1
    assert rep.overall["verdict"] == "launch-bound" and rep.overall["busy_frac"] < 0.75
    assert s["launch_ns"].sum() >= 0.6 * s["idle_ns"].sum()
    assert (s["launch_ns"] + s["host_ns"]).sum() >= 0.8 * s["idle_ns"].sum()
    assert rep.offenders(0)["ops"][0][0] in ("aten::add.Tensor", "aten::mul.Tensor")


def test_large_matmuls_are_gpu_bound_and_the_lead_grows():
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), seed=4)
    a = torch.empty(8192, 8192, device="meta")
    with record(device=gpu) as rec:
        for _ in range(3):
            for _ in range(10):
                a @ a
            gpu.synchronize()
            rec.step()
    tl = rec.timeline
    rep = ctl.analyze(tl)
    s = rep.steps
    assert set(s["verdict"]) == {"GPU-bound"}
    assert (s["busy_frac"] >= 0.9).all()
    # the host queues all ten matmuls at once: each waits longer than the last
    assert (s["lead_last_ns"] > 50 * np.maximum(s["lead_first_ns"], 1)).all()
    lead = rep.cpu_lead()
    for b, e in zip(s["host_begin_ns"], s["host_end_ns"]):  # launched in the step
        inside = (tl.gpu.launch_ns >= b) & (tl.gpu.launch_ns < e)
        assert np.all(np.diff(lead[inside]) > 0)


def test_a_stream_waiting_on_a_busy_stream_is_no_cause():
    gpu = ctl.SimGPU("h100", owns=("cpu", "meta"), cost={"aten::mm": 10_000_000, "aten::mul": 5_000_000,
                                   "aten::add": 100_000}, seed=5)
    a = torch.ones(64, 64, device="meta")
    with record(device=gpu) as rec:
        for _ in range(3):
            with gpu.stream(1):
                b = a * 2               # stream 1: 5 ms
            c = a @ a                   # stream 0: 10 ms, starting later
            gpu.wait_stream(1, 0)
            with gpu.stream(1):
                c + b                   # queued behind b, waits for c too
            gpu.synchronize()
            rec.step()
    rep = ctl.analyze(rec.timeline)
    gaps = rep.gap_table("stream")
    # while stream 1 waits, stream 0 runs: the device never waits so, and
    # the wait is no cause of idle time (overlapped), not dependency
    waiting = gaps[(gaps["stream"] == 1) & (gaps["cause"] == "overlapped")]
    assert len(waiting) == 3
    assert (waiting["overlapped_ns"] >= 4_000_000).all()  # over 5 ms each
    st = rep.streams
    s1 = st[st["stream"] == 1][0]
    assert s1["overlapped_ns"] >= waiting["overlapped_ns"].sum()
    assert s1["dependency_ns"] < 0.1 * s1["overlapped_ns"]
    assert rep.devices["dependency_ns"][0] < 0.1 * s1["overlapped_ns"]


def test_host_only_recording_gives_a_host_side_summary():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(8, 32), torch.zeros(8, 1)
    with record(device="cpu") as rec:
        for _ in range(3):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    rep = ctl.analyze(rec.timeline)
    assert set(rep.steps["verdict"]) == {"host-only"}
    text = rep.summary()
    assert "No GPU work" in text and "most host time" in text
    assert rep.streams is None and rep.hta is None
    ops = rep.table("ops", pandas=True)
    assert "aten::addmm" in set(ops["name"])
    json.dumps(rep.to_dict(), allow_nan=False)
    with pytest.raises(CutimelineError, match="needs gpu rows"):
        rep.table("streams")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(DATA, "**", "*.json.gz"),
                                               recursive=True)))
def test_every_imported_trace_analyses(path):
    tl = ctl.load(path)
    rep = ctl.analyze(tl)
    first, second = rep.summary().splitlines()[:2]
    assert first.startswith("Verdict: ")
    verdict = rep.judgement.verdict
    assert first.startswith(f"Verdict: {verdict}")
    assert ("Change first: " in first) == (verdict != "unknown")
    assert second.startswith("cutimeline report — read as a torch.profiler trace (")
    # a trace with steps keeps the whole trace; one without runs from its
    # first to its last device activity, as HTA's window does
    if len(tl.step_numbers()) or not len(tl.gpu):
        assert rep.window == (tl.start_ns, tl.end_ns)
        assert second.endswith("over the whole recording")
    else:
        assert rep.window == (tl.gpu.begin_ns.min(), tl.gpu.end_ns.max())
        assert second.endswith("from the first to the last device activity")
    d = rep.to_dict()
    json.dumps(d, allow_nan=False)
    if rep.devices is not None:
        w = rep.window[1] - rep.window[0]
        assert (rep.devices["busy_ns"] + rep.devices["idle_ns"] == w).all()
        assert (rep.streams["busy_ns"] + rep.streams["idle_ns"] == w).all()


def _stepless(source="kineto", steps=()):
    """Host work from 0 to 3 ms; GPU work from 1.02 ms to 2.8 ms only."""
    rows = [(0, 1_000_000, 1_020_000, 1_500_000), (0, 1_600_000, 1_700_000, 2_800_000)]
    ops = [("aten::mm", 999_000, 1_001_000, OpFlag.LAUNCH),
           ("aten::mm", 1_599_000, 1_601_000, OpFlag.LAUNCH),
           ("setup", 0, 900_000, 0), ("teardown", 2_900_000, 3_000_000, 0)]
    return timeline(rows, ops=ops, steps=steps, meta={"source": source})


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_a_trace_without_steps_is_read_from_its_first_to_last_device_activity(engine):
    rep = ctl.analyze(_stepless(), engine=engine)
    assert rep.window == (1_020_000, 2_800_000)
    assert rep.settings["window"] == "first to last device activity"
    assert rep.overall["duration_ns"] == 1_780_000
    assert rep.devices["busy_ns"][0] == 480_000 + 1_100_000
    assert rep.devices["idle_ns"][0] == 200_000  # the gap between the two rows
    lines = rep.summary().splitlines()
    assert lines[1] == ("cutimeline report — read as a torch.profiler trace, 0 steps, "
                        "1.78 ms from the first to the last device activity")
    assert lines[2] == ("Not counted: 1.02 ms of host-only time before the first "
                        "device activity, 200 µs after the last.")
    assert ctl.analyze(_stepless(), engine=engine).to_dict()["settings"]["window"] == \
        "first to last device activity"


def test_recordings_traces_with_steps_and_given_windows_keep_their_windows():
    # a recording (any source but a trace) without steps: the whole of it
    rec = ctl.analyze(_stepless(source="record"))
    assert rec.window == (0, 3_000_000)
    assert rec.summary().splitlines()[1] == ("cutimeline report — recorded by "
                                             "cutimeline, 0 steps, 3 ms over the "
                                             "whole recording")
    assert "Not counted" not in rec.summary()
    # a trace with steps: the whole trace, as before
    stepped = ctl.analyze(_stepless(steps=[(0, 900_000, 1_550_000),
                                           (1, 1_550_000, 2_850_000)]))
    assert stepped.window == (0, 3_000_000)
    assert stepped.summary().splitlines()[1].endswith("2 steps, 3 ms over the whole recording")
    # a window given is the window used, named as the figures name theirs
    for window, words in [(1, "step 1"), ((0, 1), "steps 0–1"), (range(0, 2), "steps 0–1"),
                          ((0.0005, 0.0025), "0.0005–0.0025 s")]:
        rep = ctl.analyze(_stepless(steps=[(0, 900_000, 1_550_000),
                                           (1, 1_550_000, 2_850_000)]), window=window)
        assert rep.settings["window"] == words
        assert rep.summary().splitlines()[1].endswith(f" over {words}")
    seconds = ctl.analyze(_stepless(), window=(0.0005, 0.0025))
    assert seconds.window == (500_000, 2_500_000)
    assert "Not counted" not in seconds.summary()


def test_alexnet_is_measured_without_its_30_s_preamble():
    # no ProfilerStep, 30.4 s of model set-up before the first kernel
    tl = ctl.load(os.path.join(DATA, "critical_path", "alexnet",
                               "benchmark_result_2869224_1695835535_trace.json.gz"))
    assert tl.meta["source"] == "kineto"
    rep = ctl.analyze(tl)
    g = tl.gpu
    assert rep.window == (g.begin_ns.min(), g.end_ns.max())
    assert rep.window[1] - rep.window[0] == 12_920_244_000  # HTA: 12996.0 (see test_hta)
    lines = rep.summary().splitlines()
    assert lines[1].endswith("0 steps, 12.9 s from the first to the last device activity")
    assert lines[2] == ("Not counted: 30.4 s of host-only time before the first "
                        "device activity, 75.8 ms after the last.")
    # the gap before the first kernel is no longer a gap of the report
    assert not any(gp["begin_s"] < 30 for gp in rep.to_dict()["biggest_gaps"])
    assert rep.hta["temporal_breakdown"]["idle_pct"] == pytest.approx(99.49, abs=0.01)


@pytest.mark.parametrize("seed, n", [(0, 400), (1, 400), (2, 400), (3, 70_000)])
def test_engines_give_the_same_report(seed, n):
    # 70,000 rows: past engines._BIG, the kernels' outputs come from NumPy;
    # priced as a recording prices itself, so the replay's pricing runs too
    tl = random_timeline(seed, n=n, streams=3)
    tl = tl.replace(meta={**tl.meta, "overhead_ns_per_op": 900,
                          "overhead_model": {"backward_ns": 40, "module_ns": 700},
                          "overhead_calibrations": [[tl.end_ns + 1, tl.end_ns + 90, 1600]]})
    a = ctl.analyze(tl, engine="numba")
    b = ctl.analyze(tl, engine="numpy")
    da, db = a.to_dict(), b.to_dict()
    assert da.pop("settings")["engine"] == "numba"
    assert db.pop("settings")["engine"] == "numpy"
    assert da == db
    assert a.summary() == b.summary()
    for name in ("streams", "devices", "steps", "gaps", "ops"):
        x, y = a.table(name), b.table(name)
        for f in x.dtype.names:
            np.testing.assert_array_equal(x[f], y[f])


def test_window_and_tables():
    tl = random_timeline(1, n=500, streams=2, steps=5)
    rep = ctl.analyze(tl, window=(1, 2))
    assert rep.steps["number"].tolist() == [1, 2]
    # a window of steps covers their device windows (their GPU work)
    b, e = int(rep.steps["begin_ns"][0]), int(rep.steps["end_ns"][-1])
    assert rep.window == (b, e)
    assert rep.steps["host_begin_ns"][0] == tl.step_bounds(1, 2)[0]
    assert (rep.streams["busy_ns"] + rep.streams["idle_ns"] == e - b).all()
    gaps = rep.gap_table()
    assert ((gaps["end_ns"] > b) & (gaps["begin_ns"] < e)).all()
    df = rep.table("steps", pandas=True)
    assert list(df["number"]) == [1, 2]
    assert rep.offenders(1, 2)["ops"] or rep.offenders(1, 2)["spans"]
    assert repr(rep).startswith("<Report ")


def test_misuse_is_reported_with_the_fix():
    tl = timeline([(0, 5, 10, 20)])
    with pytest.raises(CutimelineError, match="got a str: load it first with ctl.load"):
        ctl.analyze("run.ctl")
    unaligned = tl.replace(meta={**tl.meta, "aligned": False})
    with pytest.raises(CutimelineError, match=r"call cutimeline.alignment.align\(tl\) first"):
        ctl.analyze(unaligned)
    with pytest.raises(CutimelineError, match="engine='gpu'"):
        ctl.analyze(tl, engine="gpu")
    with pytest.raises(CutimelineError, match="gpu_bound_at=2"):
        ctl.analyze(tl, gpu_bound_at=2)
    rep = ctl.analyze(tl)
    with pytest.raises(CutimelineError, match="no table 'kernels'"):
        rep.table("kernels")
    with pytest.raises(CutimelineError, match="level='rank'"):
        rep.gap_table("rank")
    with pytest.raises(CutimelineError, match="no step 7"):
        rep.offenders(7)
    with pytest.raises(CutimelineError, match="no stream 9"):
        rep.queue_depth(stream=9)
    with pytest.raises(CutimelineError, match="no step 4"):
        ctl.analyze(tl, window=4)


# -- reports keep their numbers, column by column ---------------------------
#
# Six random Timelines analysed; one short hash per column of each table,
# of summary() and of to_dict(). Baselined on 2026-12-03 (commit 784bb77, the
# numbers of every earlier kernel since efd6d9a): the whole-table hashes
# that stood here before were all regenerated in one commit, which told no
# one which columns had moved. Now a change shows which column changed; the
# rule for changing an entry of tests/data/golden_reports.json is to add an
# entry to its "changes" saying which columns changed and why, in the same
# commit.

def _golden_cases():
    """(name, Timeline, window): multi-stream, two devices, unknown
    launches, a window of steps."""
    for seed in range(3):
        yield f"streams3-{seed}", random_timeline(seed, n=600, streams=3, steps=6), None
    tl = random_timeline(7, n=900, streams=4, steps=6)
    g = tl.gpu
    yield "devices2", tl.replace(gpu=g.replace(device=np.asarray(g.stream) % 2)), None
    launch = np.asarray(g.launch_ns).copy()
    launch[::17] = NONE
    yield "unknown-launch", tl.replace(gpu=g.replace(launch_ns=launch)), None
    yield "window", random_timeline(3, n=800, streams=2, steps=8), (2, 5)


def _digests(rep) -> dict:
    """{table: {column: hash}} for the five tables, and the hashes of
    summary() and of to_dict() without the settings."""
    out = {}
    for name in ("streams", "devices", "steps", "gaps", "ops"):
        t = rep.table(name)
        cols = {}
        for f in t.dtype.names:
            col = t[f]
            data = ("\n".join(map(repr, col.tolist())).encode() if col.dtype == object
                    else np.ascontiguousarray(col).tobytes())
            cols[f] = hashlib.sha256(data).hexdigest()[:12]
        out[name] = cols
    d = rep.to_dict()
    d.pop("settings")
    out["summary"] = hashlib.sha256(rep.summary().encode()).hexdigest()[:12]
    out["dict"] = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
    return out


GOLDEN = json.loads((pathlib.Path(DATA).parent / "golden_reports.json").read_text())


@pytest.mark.parametrize("engine", ["numba", "numpy"])
@pytest.mark.parametrize("case", range(6))
def test_reports_keep_their_numbers(case, engine):
    name, tl, window = list(_golden_cases())[case]
    got = _digests(ctl.analyze(tl, window=window, engine=engine))
    want = GOLDEN["reports"][name]
    changed = [f"{t}.{c}" for t in want if isinstance(want[t], dict)
               for c in sorted(set(want[t]) | set(got[t]))
               if want[t].get(c) != got[t].get(c)]
    changed += [k for k in ("summary", "dict") if got[k] != want[k]]
    assert not changed, f"{name} ({engine}): changed: {', '.join(changed)}"


@pytest.mark.parametrize("seed", range(3))
def test_extent_twins_agree(seed):
    from cutimeline.numeric.columns import extent as _extent
    tl = random_timeline(seed, n=200, streams=2)
    g = tl.gpu
    begin = np.asarray(g.begin_ns).copy()
    begin[seed * 7] = NONE
    for t in (tl, tl.replace(gpu=g.replace(begin_ns=begin)),
              tl.replace(meta={**tl.meta, "aligned": False}), timeline()):
        assert _extent(t, "numba") == _extent(t, "numpy")
    assert _extent(tl, "numba") == (tl.start_ns, tl.end_ns, False)
    assert _extent(tl.replace(gpu=g.replace(begin_ns=begin)), "numba")[2]


def test_an_empty_timeline_is_no_verdict():
    from cutimeline.timeline.timeline import Timeline
    with pytest.raises(CutimelineError, match="The Timeline is empty .* nothing to analyse"):
        ctl.analyze(Timeline())


def test_a_seconds_window_that_selects_nothing_names_the_span():
    tl = timeline([(0, 5, 10, 20), (0, 400_000_000, 400_000_010, 500_000_000)])
    with pytest.raises(CutimelineError, match=r"Window 9–10 s .* selects nothing: the "
                                              r"Timeline spans 0–0.5 s .* past its end"):
        ctl.analyze(tl, window="9s-10s")
    with pytest.raises(CutimelineError, match=r"where it holds no ops, gpu rows, syncs or "
                                              r"spans"):
        ctl.analyze(tl, window=(0.1, 0.2))
    assert ctl.analyze(tl, window=(0.3, 0.45)).window[1] > 0   # a window with work
