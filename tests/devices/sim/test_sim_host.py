"""SimGPU's host side: the virtual host clock that charges a modelled CUDA
dispatch cost, the values meta tensors read back, and the op stream torch
dispatches for CUDA (foreach optimizers, fused attention)."""

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.sim import FakeClock, SimGPU
from cutimeline.devices.sim.host import DISPATCH_NS, dispatch_ns, fixed_dispatch_ns
from cutimeline.devices.sim.local import SimLocal
from cutimeline.timeline.ranks import piecewise

aten = torch.ops.aten


# -- the map between the real and the virtual host clock ----------------------

def test_piecewise_maps_knots_interpolates_and_shifts_beyond_the_ends():
    x = np.array([100, 200, 1_200, 1_300], np.int64)   # 1000 ns compressed to 10
    y = np.array([100, 200, 210, 310], np.int64)
    t = np.array([0, 100, 150, 200, 700, 1_200, 1_250, 1_300, 5_000], np.int64)
    assert piecewise(t, x, y).tolist() == [0, 100, 150, 200, 205, 210, 260, 310, 4_010]
    back = piecewise(piecewise(t, x, y), y, x)
    keep = (t <= 200) | (t >= 1_200)  # outside the compressed stretch: exact
    assert (back[keep] == t[keep]).all()
    assert piecewise(t, x[:0], y[:0]).tolist() == t.tolist()


def test_dispatch_cost_by_kind_of_op():
    m = torch.ones(4, 4, device="meta")
    d = DISPATCH_NS
    assert dispatch_ns("aten::add.Tensor", (m, m), {}) == d["kernel"]
    assert dispatch_ns("aten::mm", (m, m), {}) == d["library"]
    assert dispatch_ns("aten::_foreach_add_.Scalar", ([m] * 10, 1.0), {}) == \
        d["kernel"] + 10 * d["per_tensor"]
    host = torch.ones(1 << 20)  # 4 MiB pageable: staged by the host
    assert dispatch_ns("aten::_to_copy", (host,), {"device": torch.device("meta")}) == \
        d["copy"] + int(host.nbytes / d["pageable_Bps"] * 1e9)
    assert dispatch_ns("aten::_local_scalar_dense", (m,), {}) == d["copy"]


@pytest.mark.parametrize("name", ["aten::add.Tensor", "aten::mm", "aten::addmm",
                                  "aten::convolution", "aten::_local_scalar_dense",
                                  "aten::item", "aten::gelu", "aten::sum.dim_IntList"])
def test_a_dispatch_cost_fixed_by_the_name_is_the_one_dispatch_ns_gives(name):
    # SimGPU prices these once per op (SimOps.info), not at each call
    m = torch.ones(4, 4, device="meta")
    assert fixed_dispatch_ns(name) == dispatch_ns(name, (m, m), {})


@pytest.mark.parametrize("name", ["aten::_foreach_add_.Scalar", "aten::_fused_adam_",
                                  "aten::_to_copy", "aten::copy_"])
def test_a_dispatch_cost_that_depends_on_the_arguments_is_not_fixed(name):
    assert fixed_dispatch_ns(name) is None


def test_per_thread_state_starts_at_its_defaults_on_every_thread():
    import threading
    loc = SimLocal()
    loc.stream, loc.host = 3, 1
    seen = []
    t = threading.Thread(target=lambda: seen.append((loc.stream, loc.host, loc.mark)))
    t.start()
    t.join()
    assert seen == [(0, 0, None)] and (loc.stream, loc.host) == (3, 1)


def test_an_op_dispatch_lasts_its_modelled_cost_on_the_virtual_clock():
    clock = FakeClock()
    gpu = SimGPU(clock=clock, pings=1, launch_latency_ns=4_000, event_latency_ns=2_000,
                 drift_ppm=0.0, cost=lambda *_: 10_000, host_cost=3_000)
    gpu.start()
    h0 = clock.now()
    gpu.begin(0, 0)
    clock.advance(1_000_000)             # the op took 1 ms here, on meta
    gpu.end(0, 0, "k", (), {}, None)
    # on CUDA its dispatch would have taken 3 µs: the work starts the launch
    # latency (4 µs) after the dispatch began, the launch having returned by then
    assert gpu.drained_at(0) == h0 + 4_000 + 10_000
    clock.advance(50_000)                # the user's Python: real time stays
    gpu.begin(0, 1)
    gpu.end(0, 1, "k", (), {}, None)     # took no time here: still 3 µs
    real, virtual = gpu.host_map()
    assert (np.diff(real) >= 0).all() and (np.diff(virtual) >= 0).all()
    h = gpu.harvest()
    # truth comes back on the real clock; mapped, it is the virtual schedule
    assert (piecewise(h.truth["host_ns"], real, virtual) >= 0).all()
    # the map handed over begins with the knots read above (harvest's pings add more)
    r2, v2 = h.host_map
    assert r2[:len(real)].tolist() == real.tolist() and v2[:len(virtual)].tolist() == \
        virtual.tolist()
    assert virtual[-1] < real[-1] and h.meta["sim"]["host_cost"] == 3_000


def test_host_cost_option_is_checked():
    for bad in (-1, "fast", float("nan"), True):
        with pytest.raises(CutimelineError, match="host_cost"):
            SimGPU(host_cost=bad)
    gpu = SimGPU(host_cost=lambda *_: -5, pings=1)
    with pytest.raises(CutimelineError, match="host_cost function returned -5"):
        with ctl.record(device=gpu, measure=False):
            torch.ones(3, device="meta") + 1


def test_a_view_of_a_simulated_tensor_costs_the_modelled_metadata_op():
    view, args = torch.ops.aten.view.default, (torch.zeros(4, device="meta"), [2, 2])
    meta, cpu = torch.device("meta"), torch.device("cpu")
    gpu = SimGPU()
    assert gpu.metadata_ns(meta, view, args, {}) == DISPATCH_NS["metadata"] == 1_000
    assert gpu.metadata_ns(cpu, view, args, {}) is None  # the host's own tensor
    with gpu.host():  # host work by the program's word
        assert gpu.metadata_ns(meta, view, args, {}) is None
    assert SimGPU(host_cost="measured").metadata_ns(meta, view, args, {}) is None
    assert SimGPU(host_cost=2_500).metadata_ns(meta, view, args, {}) == 2_500
    asked = []
    priced = SimGPU(host_cost=lambda name, a, k: asked.append(name) or 700)
    assert priced.metadata_ns(meta, view, args, {}) == 700 and asked == ["aten::view"]


@torch.library.custom_op("cutimeline_test::slow_meta", mutates_args=())
def _slow(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_slow.register_fake
def _(x):
    time.sleep(0.003)  # a meta kernel that takes 3 ms of this CPU
    return torch.empty_like(x)


@pytest.mark.parametrize("host_cost", [None, "measured"])
def test_the_host_pays_the_modelled_dispatch_not_the_meta_kernels_time(host_cost):
    x = torch.ones(8, device="meta")
    _slow(x)  # warm
    with ctl.record(device=SimGPU(host_cost=host_cost, pings=1), measure=False) as rec:
        for _ in range(5):
            x = _slow(x)
    tl = rec.timeline
    slow = np.array(["slow_meta" in n for n in tl.decode(tl.ops["name"])])
    took = (tl.ops.host_end_ns - tl.ops.host_begin_ns)[slow]
    assert len(took) == 5
    if host_cost is None:  # 4 µs modelled + the recorder's own few µs, not 3 ms
        assert np.median(took) < 1_000_000
    else:
        assert took.min() >= 3_000_000


# -- values a meta tensor reads back; the op stream CUDA would see ------------

def test_read_backs_of_meta_tensors_wait_for_the_device_and_read_values():
    gpu = SimGPU(pings=1, cost=lambda *_: 2_000_000)
    x = torch.ones(3, device="meta")  # made before the recording: no values
    with ctl.record(device=gpu, measure=False) as rec:
        z = torch.ones(3, device="meta") * 2  # the host decided these: exact
        assert z.sum().item() == 6.0
        assert (z > 0).all().item() is True
        assert z.tolist() == [2.0, 2.0, 2.0]
        c = z.cpu()
        assert c.device.type == "cpu" and c.dtype == z.dtype and c.tolist() == [2.0] * 3
        assert torch.arange(3, device="meta").sum().item() == 3
        y = x * 2  # x's values drawn in [0, 1) (values.py), then kept
        vals = y.tolist()
        assert all(0 <= v < 2 for v in vals) and y.tolist() == vals
    tl = rec.timeline
    assert (tl.syncs.op >= 0).sum() >= 5
    with pytest.raises(RuntimeError, match="meta tensors"):  # outside the recording meta
        y.sum().item()                                        # has no values, as ever


def _mlp():
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).to("meta")


def test_optimizers_take_their_foreach_path_on_meta_while_recording():
    import torch.optim.optimizer as optim
    before = optim._get_foreach_kernels_supported_devices
    m = _mlp()
    opt = torch.optim.AdamW(m.parameters())
    with ctl.record(device=SimGPU(pings=1), measure=False) as rec:
        m(torch.ones(2, 16, device="meta")).sum().backward()
        opt.step()
    names = set(rec.timeline.decode(rec.timeline.ops["name"]))
    assert any(n.startswith("aten::_foreach_") for n in names)
    assert optim._get_foreach_kernels_supported_devices is before
    assert "meta" not in optim._get_foreach_kernels_supported_devices()


def test_attention_is_one_fused_op_and_the_patch_goes_away_after_an_error():
    sdpa = F.scaled_dot_product_attention
    q = torch.ones(2, 4, 32, 16, device="meta", requires_grad=True)
    with pytest.raises(ZeroDivisionError):
        with ctl.record(device=SimGPU(pings=1), measure=False) as rec:
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
            F.scaled_dot_product_attention(q.half(), q.half(), q.half())
            1 / 0
    assert F.scaled_dot_product_attention is sdpa
    names = list(rec.timeline.decode(rec.timeline.ops["name"]))
    assert "aten::_scaled_dot_product_efficient_attention" in names
    assert "aten::_scaled_dot_product_efficient_attention_backward" in names
    assert "aten::_scaled_dot_product_flash_attention" in names  # fp16, no mask
    assert "aten::bmm" not in names and "aten::_safe_softmax" not in names


def test_cpu_tensors_stay_host_work_next_to_meta_ones():
    with ctl.record(device=SimGPU(pings=1), measure=False) as rec:
        torch.ones(64, 64) @ torch.ones(64, 64)       # host work
        torch.ones(64, 64, device="meta") @ torch.ones(64, 64, device="meta")
    tl = rec.timeline
    names = tl.decode(tl.ops["name"][tl.gpu.op])
    assert list(names).count("aten::mm") == 1


def test_synchronize_between_recordings_uses_the_real_clock():
    gpu = SimGPU(pings=1)
    gpu.synchronize()  # before any recording
    with ctl.record(device=gpu, measure=False) as rec:
        torch.ones(8, device="meta") * 2
    # after it: the map went with the Timeline, and the host clock is the real one
    assert gpu.virtual_host.kr is None and gpu.virtual_host.real_only()
    gpu.synchronize()
    assert gpu.drained_at() <= gpu._clock.now()
    assert len(rec.timeline.gpu) >= 1 and rec.timeline.meta["simulated"]


def test_a_tensor_pinned_for_the_simulation_is_copied_without_staging():
    gpu = SimGPU()
    host = torch.ones(1 << 20)
    meta = torch.device("meta")
    d = DISPATCH_NS
    staged = d["copy"] + int(host.nbytes / d["pageable_Bps"] * 1e9)
    assert dispatch_ns("aten::_to_copy", (host,), {"device": meta, "non_blocking": True}) == staged
    assert gpu.pin_memory(host) is host
    assert dispatch_ns("aten::_to_copy", (host,), {"device": meta, "non_blocking": True}) == \
        d["copy"]
    with pytest.raises(CutimelineError, match="needs a CPU tensor"):
        gpu.pin_memory(torch.ones(2, device="meta"))
