"""Scheduled recording: torch.profiler's schedule arithmetic, windows with
absolute step numbers and only active steps, nothing installed outside
them, the ready writer, errors and the user's exceptions."""

import os
import warnings

import numpy as np
import pytest
import torch
import torch.optim.optimizer as optim
from torch.profiler import schedule as torch_schedule

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.recording import recorder as recorder_module
from cutimeline.recording.control.schedule import Schedule, ready_writer
from cutimeline.timeline.schema import SpanKind


def train(steps, rec=None, modes=None, manual=False):
    """Seeded SGD steps on a tiny model; the losses. ``modes``: the dispatch
    mode stack's depth at the start of each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(3, 4)
    losses = []
    for _ in range(steps):
        if modes is not None:
            modes.append(torch._C._len_torch_dispatch_stack())
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
        if manual:
            rec.step()
    return losses, [p.detach().clone() for p in model.parameters()]


def step_numbers(tl):
    s = tl.spans
    return sorted(s.number[s.kind == SpanKind.STEP].tolist())


# -- the phase arithmetic -------------------------------------------------------------

ARGS = [dict(wait=1, warmup=1, active=3), dict(wait=0, warmup=0, active=1),
        dict(skip_first=3, wait=2, warmup=1, active=2, repeat=2),
        dict(wait=1, warmup=2, active=1, repeat=1),
        dict(skip_first=2, wait=3, warmup=1, active=2, skip_first_wait=1),
        dict(skip_first=5, wait=0, warmup=0, active=4, repeat=3)]


@pytest.mark.parametrize("args", ARGS, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_phases_match_torch_profiler(args):
    with warnings.catch_warnings():  # torch warns about warmup=0
        warnings.simplefilter("ignore")
        theirs = torch_schedule(**{"warmup": 1, **args})
    ours = ctl.schedule(**{"warmup": 1, **args})
    assert [ours(k) for k in range(60)] == [theirs(k).name.lower() for k in range(60)]


@pytest.mark.parametrize("bad", [dict(active=0), dict(wait=-1), dict(warmup=1.5),
                                 dict(repeat=True), dict(skip_first="2"),
                                 dict(skip_first_wait=-1)])
def test_bad_schedule_arguments_are_sentences(bad):
    name, value = next(iter(bad.items()))
    with pytest.raises(CutimelineError, match=rf"schedule\({name}={value!r}\) must be"):
        ctl.schedule(**bad)


def test_bad_record_options():
    with pytest.raises(CutimelineError, match="not a schedule"):
        ctl.record(schedule=3)
    with pytest.raises(CutimelineError, match="give schedule="):
        ctl.record(on_trace_ready=print)
    with pytest.raises(CutimelineError, match="must be a function"):
        ctl.record(schedule=ctl.schedule(), on_trace_ready="x")
    with pytest.raises(CutimelineError, match="ready_writer"):
        ctl.record(schedule=ctl.schedule(), out_dir="x")
    with pytest.raises(CutimelineError, match="answered 'soon' for step 0"):
        ctl.record(device="cpu", schedule=lambda k: "soon").start()


# -- windows ----------------------------------------------------------------------------

def test_windows_hold_only_active_steps_with_absolute_numbers():
    got, modes = [], []
    rec = ctl.record(device="cpu", measure=False,
                     schedule=ctl.schedule(skip_first=1, wait=1, warmup=1, active=2),
                     on_trace_ready=got.append)
    with rec:
        train(10, modes=modes)
    # steps 0 skip, 1 wait, 2 warmup, 3-4 active, 5 wait, 6 warmup, 7-8 active, 9 wait
    assert [tl.meta["steps"] for tl in got] == [[3, 4], [7, 8]]
    assert [step_numbers(tl) for tl in got] == [[3, 4], [7, 8]]
    assert rec.timelines_ready == got and rec.timeline is got[-1]
    # no dispatch mode at the start of a skipped or wait step, one in windows
    assert [modes[k] for k in (0, 1, 5, 9)] == [0, 0, 0, 0]
    assert [modes[k] for k in (3, 4, 7, 8)] == [1, 1, 1, 1]
    assert torch._C._len_torch_dispatch_stack() == 0
    for tl in got:
        first, last = tl.meta["steps"]
        begin, end = tl.step_bounds(first, last)
        o = tl.ops
        assert len(o) and (o.host_begin_ns >= begin).all() and (o.host_end_ns <= end).all()
        assert tl.meta["schedule"]["active"] == 2 and not tl.meta["partial_step"]
        names = set(tl.decode(o["name"]).tolist())
        assert "aten::addmm" in names and "aten::mse_loss" not in names


def test_results_unchanged_and_ops_per_step_alike():
    plain = train(5)
    got = []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=1, active=2)):
        scheduled = train(5)
    for a, b in zip(plain[0] + plain[1], scheduled[0] + scheduled[1]):
        assert torch.equal(a, b)
    (tl,) = got
    counts = [int(((tl.ops.host_begin_ns >= b) & (tl.ops.host_end_ns <= e)).sum())
              for b, e in (tl.step_bounds(k) for k in (2, 3))]
    assert counts[0] == counts[1] > 10


def test_back_to_back_windows_and_repeat():
    got, modes = [], []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=0, warmup=0, active=1, repeat=3)):
        train(6, modes=modes)
    assert [tl.meta["steps"] for tl in got] == [[0, 0], [1, 1], [2, 2]]
    assert [step_numbers(tl) for tl in got] == [[0], [1], [2]]
    assert modes == [1, 1, 1, 0, 0, 0]  # after the last cycle nothing is installed


def test_manual_steps_and_auto_switch():
    got = []
    with ctl.record(device="cpu", measure=False, steps="manual", on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=0, active=2)) as rec:
        train(3, rec=rec, manual=True)
    assert [tl.meta["steps"] for tl in got] == [[1, 2]]
    assert step_numbers(got[0]) == [1, 2]
    got = []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=2, warmup=1, active=1)) as rec:
        train(1)      # optimizer steps count until rec.step() is called
        rec.step()    # ends step 1; from now on only rec.step() counts
        train(1)      # step 2 (warmup): its optimizer.step() ends no step
        rec.step()
        train(1)      # step 3: active
        rec.step()
    assert [tl.meta["steps"] for tl in got] == [[3, 3]]
    assert step_numbers(got[0]) == [3]


def test_stop_mid_window_delivers_it_and_warmup_is_dropped():
    got = []
    rec = ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                     schedule=ctl.schedule(wait=1, warmup=1, active=3))
    with rec:
        train(3)               # 0 wait, 1 warmup, 2 active
        torch.ones(3).add(1)   # part of step 3
    assert [tl.meta["steps"] for tl in got] == [[2, 3]] and got[0].meta["partial_step"]
    got = []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=2, active=1)) as rec:
        train(2)               # ends in warmup
    assert got == [] and torch._C._len_torch_dispatch_stack() == 0
    with pytest.raises(CutimelineError, match="recorded no window"):
        rec.timeline


def test_exception_propagates_unchanged_and_window_is_delivered():
    got = []
    boom = ValueError("boom")
    with pytest.raises(ValueError) as caught:
        with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                        schedule=ctl.schedule(wait=0, warmup=1, active=4)):
            train(3)
            raise boom
    assert caught.value is boom
    # the loop clones the loss after optimizer.step(): step 3 has begun
    assert [tl.meta["steps"] for tl in got] == [[1, 3]] and got[0].meta["partial_step"]
    assert torch._C._len_torch_dispatch_stack() == 0


def test_ready_writer_names_files_by_steps(tmp_path):
    out = tmp_path / "traces"
    with ctl.record(device="cpu", measure=False, on_trace_ready=ready_writer(out),
                    schedule=ctl.schedule(wait=1, warmup=1, active=2, repeat=2)):
        train(9)
    assert sorted(os.listdir(out)) == ["step-2-3.ctl", "step-6-7.ctl"]
    tl = ctl.load(out / "step-6-7.ctl")
    assert tl.meta["steps"] == [6, 7] and step_numbers(tl) == [6, 7]
    with pytest.raises(CutimelineError, match="no meta 'steps'"):
        ready_writer(out)(ctl.Timeline())
    with pytest.raises(CutimelineError, match="needs a folder"):
        ready_writer("")


def test_self_cost_measured_once(monkeypatch):
    calls = []
    real = recorder_module.measure
    monkeypatch.setattr(recorder_module, "measure", lambda m: calls.append(m) or real(m))
    got = []
    with ctl.record(device="cpu", on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=0, active=1, repeat=3)):
        train(6)
    assert len(calls) == 1 and len(got) == 3
    assert all(tl.meta["overhead_model"]["op_ns"] > 0 for tl in got)
    assert got[0].meta["overhead_model"] is not got[1].meta["overhead_model"]


def test_torch_profiler_schedule_and_simgpu():
    got = []
    gpu = ctl.SimGPU("h100", cost=lambda *a: 500, pings=1, owns=("cpu", "meta"))
    with ctl.record(device=gpu, measure=False, on_trace_ready=got.append,
                    schedule=torch_schedule(wait=1, warmup=1, active=2)):
        train(7)
    # step 7 has begun at stop (the loop clones the loss after optimizer.step())
    assert [tl.meta["steps"] for tl in got] == [[2, 3], [6, 7]]
    assert [step_numbers(tl) for tl in got] == [[2, 3], [6]]
    for tl in got:  # the device started and harvested again for each window
        assert tl.aligned and len(tl.gpu) > 0
        # every row is an op of the window's, but work the warm-up launched
        # that the GPU still ran when the window opened (a loaded machine
        # stretches the host between the last warm-up op and the window's
        # start): the GPU was busy with it, no op of the window's made it
        g = tl.gpu
        assert ((g.op >= 0) | (g.launch_ns < tl.start_ns)).all()
        assert (g.op >= 0).sum() >= len(g) - 1


def test_a_later_global_optimizer_hook_is_safe():
    """The user adds a global post hook after the recorder started: windows
    still open and close inside optimizer.step() without upsetting torch."""
    got, seen = [], []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=1, active=1)):
        handle = optim.register_optimizer_step_post_hook(lambda *a: seen.append(1))
        try:
            train(6)
        finally:
            handle.remove()
    assert len(seen) == 6 and [tl.meta["steps"] for tl in got] == [[2, 2], [5, 5]]


def test_window_skipped_while_another_recording_runs():
    got = []
    with ctl.record(device="cpu", measure=False, on_trace_ready=got.append,
                    schedule=ctl.schedule(wait=1, warmup=0, active=1)):
        with ctl.record(device="cpu", measure=False):
            with pytest.warns(RuntimeWarning, match="skips the scheduled window from step 1"):
                train(2)
        train(2)  # step 2 wait, step 3 active
    assert [tl.meta["steps"] for tl in got] == [[3, 3]]


def test_misuse_and_disabled(monkeypatch):
    rec = ctl.record(device="cpu", schedule=ctl.schedule())
    with pytest.raises(CutimelineError, match="not recording"):
        rec.step()
    with pytest.raises(CutimelineError, match="ready after stop"):
        rec.timeline
    assert isinstance(rec.schedule, Schedule)
    monkeypatch.setenv("CUTIMELINE_DISABLE", "1")
    with ctl.record(schedule=ctl.schedule(wait=0, warmup=0, active=1)) as rec:
        modes = []
        train(2, modes=modes)
    assert modes == [0, 0] and rec.timelines_ready == []
    assert rec.timeline.meta.get("disabled") and len(rec.timeline.ops) == 0
    assert np.array_equal(rec.timeline.ops.seq, [])
