"""The demo loop: on the simulator it records every gap cause it is built to show."""

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.demo import run_demo


@pytest.fixture(scope="module")
def demo():
    return run_demo(steps=3, device="sim")


def test_sim_demo_records_both_streams_and_every_step(demo):
    tl = demo.timeline
    assert demo.simulated and demo.device.startswith("SimGPU h100")
    assert demo.losses == []                     # meta tensors have no value
    assert list(tl.step_numbers()) == [0, 1, 2]
    assert set(np.unique(tl.gpu.stream)) == {0, 1}
    assert tl.meta["simulated"]


def test_sim_demo_shows_data_sync_and_dependency_gaps(demo):
    # per step after the warm-up, whatever the host's speed: the queue drains
    # at the loss read-back, the host prints it (3 ms, after a sync) and
    # builds the next batch (12 ms of busy host, a DataLoader fetch)
    rep = ctl.analyze(demo.timeline)
    # the last step ends at its opt.step(): its read-back and printing come
    # after the last step boundary
    later = rep.steps[1:-1]
    assert (later["data_ns"] + later["sync_ns"] >= 0.8 * 15e6).all()
    assert (later["data_ns"] >= 0.6 * 12e6).all()
    # (SimGPU takes the time the host waited for a CPU out of the stretch
    # between two launches evenly, so on a loaded machine some of the
    # fetch's share of it lands on the printing and back: the split moves)
    # (at load 5, 1.4-1.8 ms of the 3 ms of printing read as the sync's)
    assert (later["sync_ns"] >= 0.3 * 3e6).all()
    st = rep.streams
    s0 = st[st["stream"] == 0][0]
    # compute waits for the side stream: idle while it runs, so no cause
    assert s0["overlapped_ns"] > 0
    assert 0.2 < rep.devices[0]["busy_frac"] < 0.95  # neither starved nor saturated


def test_sim_demo_quotes_the_source_lines_of_its_read_back_and_its_fetches(demo):
    import cutimeline.demo
    lines = open(cutimeline.demo.__file__).read().splitlines()
    read = 1 + next(i for i, t in enumerate(lines) if t.strip().startswith("loss.item()"))
    fetch = 1 + next(i for i, t in enumerate(lines) if "enumerate(loader)" in t)
    text = ctl.analyze(demo.timeline).summary()
    assert "syncs by source line:" in text and f"demo.py:{read} `loss.item()" in text
    # the headline names the read-back and the fetch it exposes, each at its line
    first = text.splitlines()[0]
    assert first.startswith("Verdict: sync-bound — no host reads of GPU values")
    assert f"demo.py:{read} `loss.item()" in first
    assert "the syncs expose the DataLoader fetches" in first
    assert f"demo.py:{fetch} `for i, (x, y) in enumerate(loader):`" in first
    assert "<frozen" not in text


@pytest.mark.parametrize("kw, words", [
    (dict(device="gpu"), "'gpu' is not understood"),
    (dict(steps=0), "steps=0"),
    (dict(batch=True), "batch=True"),
    (dict(num_workers=-1), "num_workers=-1 must be a whole number ≥ 0"),
    (dict(log_every="2"), "log_every='2'"),
])
def test_bad_demo_options_name_the_value(kw, words):
    with pytest.raises(CutimelineError, match=words):
        run_demo(**kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_demo_without_a_gpu_says_to_use_the_simulator():
    with pytest.raises(CutimelineError, match="--device sim"):
        run_demo(device="cuda")
