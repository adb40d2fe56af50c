"""FLOPs per op: matmuls, convolutions and attention by torch's formulas,
on the host and on a device; none for ops without a formula."""

import warnings

import pytest
import torch

import cutimeline as ctl
from cutimeline.recording.measures.flops import FlopCounter


def flops_by_name(tl):
    names = tl.decode(tl.ops["name"])
    return [(names[o], float(f)) for o, f in zip(tl.flops.op, tl.flops.flops)]


def matmul_loop(device):
    a, b = torch.randn(8, 16, device=device), torch.randn(16, 32, device=device)
    c = torch.randn(32, device=device)
    p, q = torch.randn(3, 8, 16, device=device), torch.randn(3, 16, 5, device=device)
    for _ in range(2):
        torch.mm(a, b)
        torch.addmm(c, a, b)
        torch.bmm(p, q)
        torch.relu(a)  # no formula: no row
        a.t()          # a view: no row


EXPECTED = [("aten::mm", 2 * 8 * 32 * 16), ("aten::addmm", 2 * 8 * 32 * 16),
            ("aten::bmm", 2 * 3 * 8 * 5 * 16)] * 2


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_matmul_loop_has_exactly_its_flops(device):
    dev, tensors = ("cpu", "cpu") if device == "cpu" else (ctl.SimGPU(seed=0), "meta")
    with ctl.record(device=dev, measure=False) as rec:
        matmul_loop(tensors)
    tl = rec.timeline
    assert flops_by_name(tl) == EXPECTED
    assert list(tl.flops.op) == sorted(tl.flops.op)
    if device == "sim":  # counted on the device's launches
        from cutimeline.timeline.schema import OpFlag
        assert (tl.ops.flags[tl.flops.op] & OpFlag.LAUNCH).all()


def conv_flops(n, c_in, c_out, k, out_hw):
    # torch's conv_flop_count: 2 · batch · c_out · c_in · kernel area · output area
    return 2 * n * c_out * c_in * k * k * out_hw * out_hw


def test_convolutions_by_the_formula_with_their_stride():
    x = torch.randn(2, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3)
    with ctl.record(device="cpu", measure=False) as rec:
        torch.nn.functional.conv2d(x, w, padding=1)
        torch.nn.functional.conv2d(x, w, padding=1, stride=2)  # same shapes, other stride
        torch.nn.functional.conv2d(x, w, padding=1)
    got = flops_by_name(rec.timeline)
    assert [n for n, _ in got] == ["aten::convolution"] * 3
    assert [f for _, f in got] == [conv_flops(2, 3, 4, 3, 8), conv_flops(2, 3, 4, 3, 4),
                                   conv_flops(2, 3, 4, 3, 8)]


def test_a_linear_layer_and_its_backward():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    with ctl.record(device="cpu", measure=False) as rec:
        lin(x).sum().backward()
    got = flops_by_name(rec.timeline)
    # forward addmm 4x16 @ 16x8; backward: grad input (4x8 @ 8x16), grad weight (8x4 @ 4x16)
    assert sorted(got) == sorted([("aten::addmm", 2 * 4 * 8 * 16), ("aten::mm", 2 * 4 * 16 * 8),
                                  ("aten::mm", 2 * 8 * 16 * 4)])


def test_the_device_counts_what_its_roofline_prices():
    from cutimeline.devices.sim.roofline import PROFILES, OpModel
    q = torch.randn(2, 4, 16, 32, device="meta", dtype=torch.float16)
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False) as rec:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    tl = rec.timeline
    got = flops_by_name(tl)
    assert len(got) == 1 and got[0][0] == "aten::_scaled_dot_product_flash_attention"
    model = OpModel(PROFILES["h100"])
    op = torch.ops.aten._scaled_dot_product_flash_attention.default
    out = op(q, q, q)
    assert got[0][1] == model.flops(op, (q, q, q), {}, out) == 4 * 2 * 4 * 16 * 16 * 32


def test_counts_are_cached_per_call_summary():
    counter = FlopCounter()
    mm = torch.ops.aten.mm.default
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    out = mm(a, b)
    assert counter.count(mm, (a, b), {}, out) == 48
    assert len(counter._counts) == 1
    assert counter.count(mm, (a, b), {}, out) == 48 and len(counter._counts) == 1
    c = torch.randn(3, 5)
    assert counter.count(mm, (a, c), {}, mm(a, c)) == 60 and len(counter._counts) == 2
    assert counter.count(torch.ops.aten.relu.default, (a,), {}, a) == 0


def test_a_formula_that_fails_warns_once_and_the_program_goes_on(monkeypatch):
    from cutimeline.recording.measures import flops

    def broken(*args, **kwargs):
        raise ValueError("no such shape")
    monkeypatch.setattr(flops, "formula_flops", broken)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="could not count the FLOPs of aten::mm"):
        with ctl.record(device="cpu", measure=False) as rec:
            outs = [torch.mm(a, b) for _ in range(3)]
    assert all(torch.equal(o, a @ b) for o in outs)
    assert len(rec.timeline.flops) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FlopCounter().count(torch.ops.aten.relu.default, (a,), {}, a)


def test_flops_survive_save_load_and_slicing(tmp_path):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with ctl.record(device="cpu", measure=False, steps="manual") as rec:
        for i in range(3):
            torch.mm(a, b[:, : i + 2])
            rec.step()
    tl = rec.timeline
    assert [f for _, f in flops_by_name(tl)] == [2 * 4 * 4 * (i + 2) for i in range(3)]
    tl.save(tmp_path / "run.ctl")
    assert flops_by_name(ctl.load(tmp_path / "run.ctl")) == flops_by_name(tl)
    one = tl.slice_steps(2, 2)
    assert flops_by_name(one) == [("aten::mm", 2 * 4 * 4 * 4)]  # its op row renumbered
    assert len(one.ops) < len(tl.ops) and one.flops.op[0] < len(one.ops)


def test_an_op_that_raises_propagates_unchanged_with_every_option():
    a = torch.ones(2, 3, device="meta")
    with pytest.raises(RuntimeError) as plain:
        torch.mm(a, a)
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False, stack=True,
                    memory=True) as rec:
        with pytest.raises(RuntimeError) as recorded:
            torch.mm(a, a)
    assert type(recorded.value) is type(plain.value)
    assert str(recorded.value) == str(plain.value)
    tl = rec.timeline
    assert list(tl.decode(tl.ops["name"])) == ["aten::mm"]
    assert len(tl.flops) == 0 and len(tl.memory) == 0 and len(tl.sources) == 1


def test_meta_says_whether_fp32_matmuls_may_use_tf32():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with ctl.record(device="cpu", measure=False) as rec:
            torch.ones(2) + 1
    finally:
        torch.set_float32_matmul_precision(before)
    assert rec.timeline.meta["float32_matmul_precision"] == "high"


def test_scalars_key_every_argument_but_the_tensors_lists_as_tuples():
    from cutimeline.recording.measures.flops import _scalars
    x = torch.zeros(2)
    assert _scalars((x, [1, 2], 0.5, None), {"alpha": 2, "out": x, "dims": [0]}) == (
        (1, 2), 0.5, None, ("alpha", 2), ("dims", (0,)))
    assert _scalars((x, x), {}) == ()
    hash(_scalars((x, [1], (2, 3)), {"k": [4]}))  # hashable: the FLOPs cache's key
