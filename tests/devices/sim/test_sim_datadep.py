"""SimGPU runs ops whose output size depends on the data (``datadep.py``):
each op runs on meta tensors with a modelled count, syncs the host for
the stream's earlier work and the count kernel, and reads as a sync at
the user's source line."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.sim import FakeClock, SimGPU
from cutimeline.devices.sim.datadep import count_ns, modelled

aten = torch.ops.aten
META = torch.device("meta")


def _x(n=1000):
    return torch.randn(n, device=META)


# each: (name, program on meta tensors, expected shapes at the default 0.5)
OPS = [
    ("mask", lambda x: x[x > 0], [(500,)], "index"),
    ("mask_2d_rows", lambda x: x.view(100, 10)[x.view(100, 10)[:, 0] > 0], [(50, 10)], "index"),
    ("nonzero", lambda x: torch.nonzero(x), [(500, 1)], "nonzero"),
    ("nonzero_2d", lambda x: torch.nonzero(x.view(50, 20)), [(500, 2)], "nonzero"),
    ("where", lambda x: torch.where(x.view(50, 20) > 0), [(500,), (500,)], "nonzero"),
    ("argwhere", lambda x: torch.argwhere(x), [(500, 1)], "nonzero"),
    ("masked_select", lambda x: torch.masked_select(x, x > 0), [(500,)], "masked_select"),
    ("masked_select_broadcast",
     lambda x: torch.masked_select(x.view(100, 10), x[:10] > 0), [(500,)], "masked_select"),
    ("unique", lambda x: torch.unique(x), [(500,)], "_unique2"),
    ("unique_all", lambda x: torch.unique(x, return_inverse=True, return_counts=True),
     [(500,), (1000,), (500,)], "_unique2"),
    ("unique_consecutive", lambda x: torch.unique_consecutive(x, return_counts=True),
     [(500,), (500,)], "unique_consecutive"),
    ("unique_dim", lambda x: torch.unique(x.view(100, 10), dim=0), [(50, 10)], "unique_dim"),
    ("unique_consecutive_dim",
     lambda x: torch.unique_consecutive(x.view(100, 10), dim=1), [(100, 5)],
     "unique_consecutive"),
    ("repeat_interleave",
     lambda x: torch.repeat_interleave(torch.ones(10, dtype=torch.long, device=META)), [(10,)],
     "repeat_interleave"),
    ("repeat_interleave_self",
     lambda x: x.repeat_interleave(torch.ones(1000, dtype=torch.long, device=META)), [(1000,)],
     "repeat_interleave"),
    ("bincount",
     lambda x: torch.bincount(torch.ones(10, dtype=torch.long, device=META), minlength=7),
     [(7,)], "bincount"),
]


def _shapes(out):
    return [tuple(t.shape) for t in (out if isinstance(out, (tuple, list)) else (out,))]


@pytest.mark.parametrize("name,program,shapes,op", OPS, ids=[o[0] for o in OPS])
def test_each_data_dependent_op_runs_and_syncs(name, program, shapes, op):
    gpu = SimGPU("h100", seed=0)
    x = _x()
    with ctl.record(device=gpu) as rec:
        out = program(x)
    assert _shapes(out) == shapes
    tl = rec.timeline
    synced = {str(n) for n in tl.decode(tl.ops["name"][tl.syncs["op"][tl.syncs["op"] >= 0]])}
    assert synced, f"{name}: no sync recorded"
    assert any(s.split(".")[0] == f"aten::{op}" for s in synced), synced


def test_outside_recording_meta_still_refuses():
    # the substitutes act only inside SimGPU's run: torch's own behaviour elsewhere
    with pytest.raises(NotImplementedError):
        torch.nonzero(_x())


def test_fractions_set_the_modelled_counts():
    gpu = SimGPU("h100", seed=0, nonzero_fraction=0.25, unique_fraction=0.1)
    x = _x()
    with ctl.record(device=gpu):
        assert x[x > 0].shape == (250,)
        assert torch.masked_select(x, x > 0).shape == (250,)
        assert torch.unique(x).shape == (100,)
    gpu = SimGPU("h100", seed=0, nonzero_fraction=0.0, unique_fraction=0.0)
    with ctl.record(device=gpu):
        assert torch.nonzero(x).shape == (0, 1)
        assert torch.unique(x).shape == (1,)        # a non-empty input has one value
        assert torch.unique(x[:0]).shape == (0,)
    assert modelled(3, 0.5) == 2 and modelled(5, 0.1) == 1 and modelled(0, 1.0, 1) == 0


@pytest.mark.parametrize("option", ["nonzero_fraction", "unique_fraction"])
@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, "half", True, None])
def test_bad_fractions_are_refused_with_the_fix(option, bad):
    with pytest.raises(CutimelineError, match=rf"{option}=.*from 0 to 1"):
        SimGPU("h100", **{option: bad})


def test_masks_of_one_size_select_alike_and_train():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(512, 64, device=META)
    y = torch.randint(0, 10, (512,), device=META)
    with ctl.record(device=SimGPU("h100", seed=0)) as rec:
        for _ in range(2):
            logits = model(x)
            mask = y != 3
            loss = F.cross_entropy(logits[mask], y[mask])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    assert loss.shape == ()
    assert model[0].weight.grad.shape == (256, 64)
    tl = rec.timeline
    names = [str(n) for n in tl.decode(tl.ops["name"][tl.syncs["op"][tl.syncs["op"] >= 0]])]
    # per step: logits[mask], y[mask] and the mask's write in backward (index_put)
    assert sum(n.startswith("aten::index.") for n in names) == 4
    assert sum(n.startswith(("aten::index_put", "aten::_index_put_impl_")) for n in names) == 2


def test_the_host_waits_for_queued_work_and_the_count_kernel():
    # 5 ms per op on the stream; the count kernel is priced by the roofline
    gpu = SimGPU("h100", seed=0, cost=lambda *_: 5_000_000)
    x = torch.randn(1 << 24, device=META)  # 64 MB: a count pass of ≈ 24 µs
    mask = torch.ones(1 << 24, dtype=torch.bool, device=META)
    # the count kernel, by hand: the H100's least kernel time and one pass
    # over x (64 MiB) and the mask (16 MiB) at its 3.35 TB/s
    count = 2_000 + round((4 + 1) * 2 ** 24 / 3.35e12 * 1e9)
    assert count_ns(gpu, (x, [mask])) == count == 27_041
    with ctl.record(device=gpu) as rec:
        z = x * 2
        queued = gpu.drained_at(0)
        line = inspect.currentframe().f_lineno + 1
        y = z[mask]
    assert y.shape == (1 << 23,)
    tl = rec.timeline
    names = [str(n) for n in tl.decode(tl.ops["name"])]
    i = next(i for i, n in enumerate(names) if n.startswith("aten::index"))
    assert tl.ops.host_begin_ns[i] < queued                  # work was still queued
    assert tl.ops.host_end_ns[i] >= queued + count           # and its count was awaited
    rep = ctl.analyze(tl)
    src = rep.source_table()
    rows = [r for r in src if r["kind"] == "sync" and r["line"] == line]
    assert rows and rows[0]["file"].endswith("test_sim_datadep.py")
    assert rows[0]["wait_ns"] >= queued + count - tl.ops.host_begin_ns[i] - 10_000
    assert f"test_sim_datadep.py:{line}" in rep.summary()


def test_by_hand_the_wait_ends_after_the_count_kernel_exactly():
    clock = FakeClock()
    gpu = SimGPU(offset_ns=7_000_000_000, drift_ppm=0.0, launch_latency_ns=4_000,
                 event_latency_ns=2_000, pings=1, clock=clock, host_cost="measured",
                 cost=lambda *_: 1_000_000)
    x = torch.randn(1 << 20, device=META)
    gpu.start()
    gpu.begin(0, 0)
    clock.advance(1_000)
    gpu.end(0, 0, "aten::mul.Tensor", (), {}, None)    # 1 ms of queued work
    busy = gpu.drained_at(0)
    gpu.begin(0, 1)
    clock.advance(1_000)
    out = gpu.run(aten.nonzero.default, (x,), {})
    gpu.wait(0)
    assert out.shape == (1 << 19, 1)
    # the count kernel, by hand: the H100's least kernel time and one pass
    # over x (4 MiB) at its 3.35 TB/s
    count = 2_000 + round(4 * 2 ** 20 / 3.35e12 * 1e9)
    assert count == 3_252
    assert gpu.drained_at(0) == busy + count
    assert clock.now() >= busy + count
    gpu.end(0, 1, aten.nonzero.default, (x,), {}, out)
    assert gpu.drained_at(0) >= busy + count + 1_000_000  # the rest follows
    gpu.harvest()


def test_a_stale_count_note_is_dropped():
    clock = FakeClock()
    gpu = SimGPU(pings=1, clock=clock, host_cost="measured", cost=lambda *_: 1_000)
    x = torch.randn(1 << 20, device=META)
    gpu.start()
    gpu.run(aten.nonzero.default, (x,), {})          # noted, but no wait followed
    gpu.begin(0, 0)
    gpu.run(aten._local_scalar_dense.default, (x[:1],), {})
    before = gpu.drained_at(0)
    gpu.wait(0)                                      # .item(): no count kernel
    assert gpu.drained_at(0) == before
    gpu.harvest()


def test_cpu_tensors_are_untouched_while_simulating():
    torch.manual_seed(0)
    a = torch.randn(1000)
    want = (a[a > 0].clone(), torch.nonzero(a), torch.unique(a.round()),
            torch.masked_select(a, a < 0))
    with ctl.record(device=SimGPU("h100", seed=0)):
        got = (a[a > 0], torch.nonzero(a), torch.unique(a.round()),
               torch.masked_select(a, a < 0))
    for w, g in zip(want, got):
        assert torch.equal(w, g)


def test_bracket_kernel_and_equal_and_is_nonzero():
    x = _x()
    with ctl.record(device=SimGPU("h100", seed=0, bracket="kernel")) as rec:
        assert torch.equal(x, x) is True        # zeros alike
        assert torch.equal(x, x[:10]) is False
        assert bool(x[:1]) is True              # a value drawn in (0, 1) (values.py)
        assert x[x > 0].shape == (500,)
    assert len(rec.timeline.syncs) >= 4
