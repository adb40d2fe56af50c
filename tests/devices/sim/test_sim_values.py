"""SimGPU's reads of simulated tensors (``devices/sim/values.py``): every
path a program reads a device value by, in every grad mode, is a sync at
the user's line and then a value; values the host decided read exactly,
the others as the value model draws them; a loop steered by modelled
values ends."""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cutimeline as ctl
from cutimeline.devices.sim import SimGPU

META = torch.device("meta")
MODES = {"plain": contextlib.nullcontext, "no_grad": torch.no_grad,
         "inference": torch.inference_mode}


def _if(t):
    if t > 0.5:
        return "big"
    return "small"


def _while(t):
    n = 0
    while t < 2.0 and n < 3:  # each test is a read
        n += 1
    return n


# every way a program reads a simulated value: (name, read, check of what it gave)
READS = {
    "item": (lambda t: t.item(), lambda v: isinstance(v, float)),
    "tolist": (lambda t: t.reshape(1).tolist(), lambda v: isinstance(v, list)
               and isinstance(v[0], float)),
    "cpu": (lambda t: t.cpu(), lambda v: v.device.type == "cpu"),
    "numpy_after_cpu": (lambda t: t.cpu().numpy(), lambda v: isinstance(v, np.ndarray)),
    "to_cpu": (lambda t: t.to("cpu"), lambda v: v.device.type == "cpu"),
    "to_cpu_dtype": (lambda t: t.to("cpu", torch.float64),
                     lambda v: v.dtype == torch.float64 and v.device.type == "cpu"),
    "to_dtype_layout": (lambda t: t.to(device="cpu", dtype=torch.float16, copy=True),
                        lambda v: v.dtype == torch.float16),
    "bool": (lambda t: bool(t), lambda v: isinstance(v, bool)),
    "int": (lambda t: int(t), lambda v: isinstance(v, int)),
    "float": (lambda t: float(t), lambda v: isinstance(v, float)),
    "math": (lambda t: math.exp(t), lambda v: isinstance(v, float)),
    "format_spec": (lambda t: "{:6.2f}".format(t), lambda v: len(v) == 6),
    "fstring": (lambda t: f"{t:.3f}", lambda v: "." in v),
    "str": (lambda t: str(t), lambda v: v.startswith("tensor(") and "..." not in v),
    "print": (lambda t: print(t), lambda v: v is None),
    "if": (_if, lambda v: v in ("big", "small")),
    "while": (_while, lambda v: v == 3),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("read", list(READS))
def test_every_read_is_a_sync_then_a_value(read, mode, capsys):
    how, ok = READS[read]
    gpu = SimGPU("h100", seed=1)
    with ctl.record(device=gpu) as rec, MODES[mode]():
        x = torch.randn(64, 64, device=META)
        loss = (x @ x).mean()  # 0-dim, computed from data: a modelled value
        got = how(loss)
    assert ok(got), f"{read} under {mode} gave {got!r}"
    tl = rec.timeline
    sync = _sync_rows(tl)
    assert len(sync), f"{read} under {mode} recorded no sync"
    # the host waited for the device's queued work (the matmul) ...
    mm = np.flatnonzero(tl.decode(tl.ops["name"]) == "aten::mm")
    done = tl.gpu.end_ns[np.isin(tl.gpu.op, mm)].max()
    assert tl.ops.host_end_ns[sync[0]] >= done
    # ... at the user's line: this file
    src = tl.sources
    files = set(tl.decode(src["file"])) if len(src) else set()
    assert any(f.endswith("test_sim_values.py") for f in files), files


def _sync_rows(tl):
    from cutimeline.timeline.schema import OpFlag
    return np.flatnonzero((tl.ops.flags & OpFlag.SYNC) != 0)


@pytest.mark.parametrize("mode", list(MODES))
def test_composite_ops_are_priced_by_their_parts_in_every_mode(mode):
    """Under inference_mode ``linear`` reaches the mode whole: it is run by
    its decomposition, so its matmul's FLOPs price it as in no_grad."""
    with ctl.record(device=SimGPU("h100")) as rec, MODES[mode]():
        a = torch.randn(2048, 2048, device=META)
        F.linear(a, torch.randn(2048, 2048, device=META))
        F.dropout(a, 0.1, training=False)
        F.layer_norm(a, (2048,))
    names = set(rec.timeline.decode(rec.timeline.ops["name"]))
    assert "aten::mm" in names and "aten::linear" not in names
    assert not {"aten::dropout", "aten::layer_norm"} & names
    assert "aten::native_layer_norm" in names


def test_host_decided_values_read_exactly():
    """A stopping flag the host put on the device reads as on CUDA:
    ``generate()``'s test of its length criterion."""
    with ctl.record(device=SimGPU("h100")), torch.no_grad():
        unfinished = torch.ones(2, dtype=torch.long, device=META)
        for n in range(1, 100):
            done = torch.full((2,), n >= 32, dtype=torch.bool, device=META)
            unfinished = unfinished & ~done
            if bool(unfinished.max() == 0):
                break
        steps = torch.arange(5, device=META) * 2
        assert steps.tolist() == [0, 2, 4, 6, 8]
        assert torch.tensor([1.5, 2.5]).to(META).sum().item() == 4.0
        assert int(torch.zeros(3, device=META).add_(2).sum()) == 6
        view = steps[1:3]
        steps.add_(1)
        assert view.tolist() == [3, 5]  # a view reads its storage's values
    assert n == 32


def test_modelled_values_are_healthy_data():
    """Values computed from data read as healthy data would: finite, no
    NaN, indices within their dimension, a rare token rarely."""
    with ctl.record(device=SimGPU("h100", seed=3)), torch.no_grad():
        logits = torch.randn(4, 50257, device=META)
        loss = logits.logsumexp(-1).mean()
        assert 0 <= loss.item() < 1
        assert not bool(torch.isnan(loss)) and bool(torch.isfinite(loss))
        assert not bool(torch.isnan(logits).any()) and bool(torch.isfinite(logits).all())
        tok = logits.argmax(-1)
        assert all(0 <= t < 50257 for t in tok.tolist())
        ids = torch.tensor([[1, 2, 3]] * 4).to(META)
        ids = torch.cat([ids, tok[:, None]], -1)  # prompt (exact) + sampled token
        assert ids[:, :3].tolist() == [[1, 2, 3]] * 4
        eos = torch.tensor([50256]).to(META)
        assert not bool(torch.isin(ids[:, -1], eos).all())


def test_a_loop_steered_by_modelled_values_ends_with_a_warning():
    gpu = SimGPU("h100", read_limit=50)
    n = 0
    with ctl.record(device=gpu), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        x = torch.randn(16, device=META)
        while (x.norm() > 1e-9).item():  # never true of data drawn in [0, 1)
            n += 1
            assert n < 1000
        resid = 1.0
        m = 0
        while resid > 1e-12:
            resid = x.norm().item()
            m += 1
            assert m < 1000
    assert n == 50 and m == 51
    assert sum("modelled values" in str(w.message) for w in seen) == 2


def test_the_read_bound_counts_from_each_step():
    gpu = SimGPU("h100", read_limit=5)
    with ctl.record(device=gpu) as rec, warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: each step reads 3 times
        x = torch.randn(16, device=META)
        for _ in range(4):
            for _ in range(3):
                assert not bool(torch.isnan(x.sum()))
            rec.step()


def test_a_values_hook_answers_modelled_reads():
    seen = []

    def values(site, shape, dtype):
        seen.append((site.rsplit(":", 1)[0].endswith("test_sim_values.py"), shape))
        return 7.0

    with ctl.record(device=SimGPU("h100", values=values)):
        assert torch.randn(3, device=META).sum().item() == 7.0
        assert torch.ones(3, device=META).sum().item() == 3.0  # exact: no hook
    assert seen == [(True, ())]


def test_bad_read_options_are_named():
    with pytest.raises(ctl.CutimelineError, match="read_limit"):
        SimGPU("h100", read_limit=0)
    with pytest.raises(ctl.CutimelineError, match="values"):
        SimGPU("h100", values=3)


def test_values_leave_torch_as_it_was():
    """The read patches (format, repr) are gone after the recording."""
    fmt, rep = torch.Tensor.__format__, torch.Tensor.__repr__
    with ctl.record(device=SimGPU("h100")):
        assert torch.Tensor.__format__ is not fmt
    assert torch.Tensor.__format__ is fmt and torch.Tensor.__repr__ is rep
    with pytest.raises(TypeError):
        "{:6.2f}".format(torch.ones((), device=META))


def test_autocast_on_simulated_tensors_is_said_to_run_at_fp32():
    with ctl.record(device=SimGPU("h100")) as rec, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = torch.randn(64, 64, device=META) @ torch.randn(64, 64, device=META)
    assert y.dtype == torch.float32  # what autocast does to meta tensors: nothing
    said = [str(w.message) for w in seen if "autocast" in str(w.message)
            and "cutimeline" in str(w.message)]
    assert len(said) == 1 and "fp32" in said[0]
    assert any("autocast" in w for w in rec.timeline.meta["warnings"])
