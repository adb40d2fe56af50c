"""timing="stamps" and "both" on a real GPU: globaltimer stamps time the
recording, agree with the events, bracket work of known duration, and the
stamp buffer grows without draining the program's queue. Skipped without
CUDA (tests/conftest.py) or CuPy."""

import time

import numpy as np
import pytest
import torch

pytest.importorskip("cupy")

import cutimeline as ctl  # noqa: E402
import cutimeline.devices.cuda.kernels as K
from cutimeline.devices.cuda import CudaDevice
from cutimeline.timeline.schema import EventKind, OpFlag

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
SPIN_NS = 2_000_000


def steps(n=3):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                              torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(32, 64, device=CUDA)
    losses = []
    for _ in range(n):
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_stamps_time_a_training_loop_without_changing_it():
    ref = steps()
    with ctl.record(device="cuda", timing="stamps") as rec:
        got = steps()
    assert got == ref
    tl = rec.timeline
    assert tl.meta["timing"] == "stamps" and tl.aligned and len(tl.clocks) == 1
    assert tl.clocks.bound_max_ns[0] < 200_000
    ev = tl.events
    assert not (ev.kind == EventKind.ANCHOR).any()
    assert (ev.raw_ns > 0).all()  # globaltimer: ns since some epoch
    launched = (tl.ops.flags & OpFlag.LAUNCH) != 0
    assert launched.sum() == len(tl.gpu) > 20
    g = tl.gpu
    assert (g.begin_ns <= g.end_ns).all()
    assert (g.begin_ns >= g.launch_ns - tl.clocks.bound_max_ns[0] - 1_000).all()
    # a stamp launch costs host time, and the recorder says how much
    assert tl.meta["overhead_ns_per_launch"] > 0


def test_both_timings_agree_op_by_op_within_their_bounds():
    with ctl.record(device="cuda", timing="both") as rec:
        steps(5)
    ev, st = rec.timelines["events"], rec.timelines["stamps"]
    assert rec.timeline is ev and ev.meta["options"]["timing"] == "both"
    assert len(ev.gpu) == len(st.gpu) > 50
    # the event and the stamp of one point are neighbours on the stream, a
    # few µs apart at most; the fits each claim their bound
    slack = ev.clocks.bound_max_ns[0] + st.clocks.bound_max_ns[0] + 20_000
    d = ev.gpu.begin_ns - st.gpu.begin_ns
    assert np.abs(d).max() <= slack, np.percentile(np.abs(d), [50, 99, 100])
    assert np.median(np.abs(d)) < 10_000


def test_stamps_bracket_a_spin_of_known_duration_between_two_ops():
    x = torch.zeros(1, device=CUDA)
    K.spin(0)  # load the module outside the recording
    with ctl.record(device="cuda", timing="both") as rec:
        x.add_(1)
        K.spin(SPIN_NS)  # no aten op: the recorder does not see it
        x.add_(2)
        torch.cuda.synchronize()
    assert x.item() == 3
    for name, tl in rec.timelines.items():
        g = tl.gpu
        assert len(g) == 2, name
        gap = g.begin_ns[1] - g.end_ns[0]
        # the spin sits between the first op's END and the second's BEGIN
        assert SPIN_NS - 2 * tl.clocks.bound_max_ns[0] - 1_000 <= gap, (name, gap)
        assert gap < SPIN_NS + 500_000, (name, gap)


def test_the_stamp_buffer_grows_without_draining_the_queue():
    x = torch.zeros(1, device=CUDA)
    dev = CudaDevice(timing="stamps", stamp_slots=64, pings=1)
    with ctl.record(device=dev, timing="stamps") as rec:
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued first
        for _ in range(100):  # 200 points: three more chunks while it runs
            x.add_(1)
        still_queued = not torch.cuda.current_stream().query()
        torch.cuda.synchronize()
    assert still_queued  # no chunk waited for the program's stream
    assert x.item() == 100
    tl = rec.timeline
    assert tl.meta["cuda"]["stamp_chunks"] >= 4 and tl.aligned
    one = tl.events.stream == tl.events.stream[tl.events.kind == EventKind.BEGIN][0]
    assert (np.diff(tl.events.raw_ns[one]) >= 0).all()  # stream order kept


def test_a_stamper_on_a_side_stream_does_not_wait_for_other_streams():
    torch.cuda._sleep(200_000_000)
    t0 = time.perf_counter()
    stamper = K.Stamper(8, stream=torch.cuda.Stream())
    made_s = time.perf_counter() - t0
    assert not torch.cuda.current_stream().query() and made_s < 0.05
    stamper.stamp(0)
    assert stamper.read().written.tolist() == [True] + [False] * 7
    with pytest.raises(ctl.CutimelineError, match="torch.cuda.Stream"):
        K.Stamper(8, stream=0)
