"""roofline.py: SimGPU's cost model — FLOP- or bandwidth-bound per GPU
profile at the fractions of peak real kernels reach, TF32, bytes of
expanded inputs, extra memory passes, free views, convolution FLOPs."""

import pytest
import torch

from cutimeline.devices.opwork import op_name
from cutimeline.devices.sim.roofline import PROFILES, OpModel

aten = torch.ops.aten


def _bw(name):
    """The memory rate a streaming kernel reaches on profile ``name``."""
    return PROFILES[name].bandwidth * PROFILES[name].memory_efficiency


def test_matmul_is_flops_bound_h100_vs_a100():
    a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    out = aten.mm.default(a, a)
    flops = 2 * 4096**3
    for name, peak, eff, base in (("h100", 989.5e12, 0.35, 2_000), ("a100", 312e12, 0.8, 2_500)):
        model = OpModel(PROFILES[name])
        assert PROFILES[name].achieved("matmul", "bf16") == eff
        assert model.flops(aten.mm.default, (a, a), {}, out) == flops
        assert model.bytes(aten.mm.default, (a, a), {}, out) == 3 * 4096**2 * 2
        assert model.cost_ns(aten.mm.default, (a, a), {}, out) == \
            base + round(flops / (peak * eff) * 1e9)
    # 396.9 µs on an H100 (346 TFLOP/s), 550.7 µs on an A100 (250 TFLOP/s)
    assert OpModel(PROFILES["h100"]).cost_ns(aten.mm.default, (a, a), {}, out) == 2_000 + 396_850


def test_fp32_matmul_uses_tf32_only_when_allowed():
    a = torch.empty(2048, 2048, device="meta")
    out = aten.mm.default(a, a)
    flops = 2 * 2048**3
    off = OpModel(PROFILES["h100"], tf32=False)
    on = OpModel(PROFILES["h100"], tf32=True)
    follow = OpModel(PROFILES["h100"])
    assert off.cost_ns(aten.mm.default, (a, a), {}, out) == \
        2_000 + round(flops / (67e12 * 0.85) * 1e9)      # CUDA cores: the default fraction
    assert on.cost_ns(aten.mm.default, (a, a), {}, out) == \
        2_000 + round(flops / (494.5e12 * 0.35) * 1e9)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert follow.peak(aten.mm.default, (a, a)) == 67e12
        torch.backends.cuda.matmul.allow_tf32 = True
        assert follow.peak(aten.mm.default, (a, a)) == 494.5e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_elementwise_is_bandwidth_bound():
    n = 1 << 24
    x = torch.empty(n, device="meta")
    out = aten.add.Tensor(x, x)
    for name, base in (("h100", 2_000), ("a100", 2_500)):
        model = OpModel(PROFILES[name])
        assert model.flops(aten.add.Tensor, (x, x), {}, out) == 0
        assert model.cost_ns(aten.add.Tensor, (x, x), {}, out) == \
            base + round(3 * 4 * n / _bw(name) * 1e9)   # 68.3 µs on an H100 (2.95 TB/s)


def test_bytes_count_storage_of_expanded_inputs_and_skip_out_arguments():
    model = OpModel(PROFILES["h100"])
    x = torch.empty(1000, 1000, device="meta")
    bias = torch.empty(1000, device="meta").expand(1000, 1000)
    out = aten.add.Tensor(x, bias)
    assert model.bytes(aten.add.Tensor, (x, bias), {}, out) == 4_000_000 + 4_000 + 4_000_000
    o = torch.empty(1000, 1000, device="meta")
    assert model.bytes(aten.add.out, (x, x), {"out": o}, o) == 3 * 4_000_000


def test_views_and_allocations_cost_nothing():
    model = OpModel(PROFILES["h100"])
    x = torch.empty(64, 64, device="meta")
    assert model.cost_ns(aten.t.default, (x,), {}, x.t()) == 0
    assert model.cost_ns(aten.view.default, (x, [4096]), {}, x.view(4096)) == 0
    assert model.cost_ns(aten.empty.memory_format, ([64],), {}, x) == 0
    assert model.cost_ns(aten.relu.default, (x,), {}, x) == \
        2_000 + round(2 * 64 * 64 * 4 / _bw("h100") * 1e9)


def test_convolution_flops_come_from_torch_formula():
    x = torch.empty(8, 64, 56, 56, dtype=torch.float16, device="meta")
    w = torch.empty(128, 64, 3, 3, dtype=torch.float16, device="meta")
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    out = aten.convolution.default(*args)
    flops = 2 * 8 * 128 * 56 * 56 * 64 * 9
    model = OpModel(PROFILES["h100"])
    assert model.flops(aten.convolution.default, args, {}, out) == flops
    assert model.cost_ns(aten.convolution.default, args, {}, out) == \
        2_000 + round(flops / (989.5e12 * 0.10) * 1e9)   # cuDNN's share on an H100


def test_cached_work_tells_apart_shapes_and_conv_arguments():
    model = OpModel(PROFILES["h100"])
    x = torch.empty(1, 8, 32, 32, device="meta")
    w = torch.empty(8, 8, 3, 3, device="meta")
    flops = []
    for stride in ([1, 1], [2, 2], [1, 1]):
        args = (x, w, None, stride, [1, 1], [1, 1], False, [0, 0], 1)
        flops.append(model.flops(aten.convolution.default, args, {},
                                 aten.convolution.default(*args)))
    assert flops[0] == flops[2] == 4 * flops[1]
    a, b = torch.empty(64, 32, device="meta"), torch.empty(32, 16, device="meta")
    assert model.flops(aten.mm.default, (a, b), {}, aten.mm.default(a, b)) == 2 * 64 * 32 * 16
    assert model.flops(aten.mm.default, (b.t(), a.t()), {},
                       aten.mm.default(b.t(), a.t())) == 2 * 16 * 32 * 64


def test_op_name_of_ops_and_other_callables():
    assert op_name(aten.add.Tensor) == "aten::add.Tensor"
    assert op_name(aten.mm.default) == "aten::mm"

    class Wants:  # its name() takes an argument: not an op's name()
        __name__ = "wants"

        def name(self, style):
            return style

    class Broken:  # an op-like name() that fails: the error is not swallowed
        def name(self):
            raise RuntimeError("no schema")
    assert op_name(Wants()) == "wants"
    assert op_name(len) == "len"
    with pytest.raises(RuntimeError, match="no schema"):
        op_name(Broken())


def _memory_cases():
    x = torch.ones(64, 32)
    col = torch.ones(64, 1).expand(64, 32)       # broadcast: its column counted once
    sp = torch.eye(8).to_sparse()                # values and indices
    out = torch.empty(64, 32)
    return [(aten.add.Tensor, (x, x), {}, x + x),
            (aten.add.Tensor, (x, col), {}, x + col),
            (aten.mul.Tensor, (x.t(), 2.0), {}, x.t() * 2),
            (aten.add.out, (x, x), {"out": out}, out),   # out= is written, not read
            (aten.neg.default, (sp,), {}, -sp),
            (aten.cat.default, ([x, x],), {}, torch.cat([x, x])),
            (aten.view.default, (x, [32, 64]), {}, x.view(32, 64))]  # no kernel


@pytest.mark.parametrize("case", range(7))
def test_the_memory_bound_fast_path_prices_as_the_bytes_do(case):
    # cost_ns prices an op without a FLOP formula in line; it must equal
    # the roofline of work()'s bytes
    func, args, kwargs, out = _memory_cases()[case]
    model = OpModel(PROFILES["h100"])
    n, flops = model.work(func, args, kwargs, out)
    assert flops == 0
    want = 0 if model._describe(func)[0] else \
        PROFILES["h100"].min_kernel_ns + round(n / _bw("h100") * 1e9)
    assert model.cost_ns(func, args, kwargs, out) == want
    assert OpModel(PROFILES["h100"]).cost_ns(func, args, kwargs, out) == want  # first call too


def test_copies_between_host_and_device_run_at_the_host_links_rate():
    """A batch of 64 MiB copied to the device takes PCIe's time (about 1.2 ms
    on an H100's Gen5 link), not HBM's (20 µs); a copy within one memory
    stays a memory-bound kernel; the A100's Gen4 link is slower."""
    host = torch.empty(16 << 20, dtype=torch.float32)            # 64 MiB
    dev = torch.empty(16 << 20, dtype=torch.float32, device="meta")
    h100, a100 = OpModel(PROFILES["h100"]), OpModel(PROFILES["a100"])
    link = PROFILES["h100"].link_bandwidth
    h2d = h100.cost_ns(aten._to_copy.default, (host,), {"device": torch.device("meta")}, dev)
    assert h2d == PROFILES["h100"].min_kernel_ns + round(host.nbytes / link * 1e9)
    assert 1.1e6 < h2d < 1.4e6
    d2h = h100.cost_ns(aten.copy_.default, (host, dev), {}, host)   # host.copy_(dev)
    assert d2h == h2d
    local = h100.cost_ns(aten.copy_.default, (dev, dev), {}, dev)
    assert local == h100.cost_ns(aten.clone.default, (dev,), {}, dev)  # HBM's rate
    assert a100.cost_ns(aten._to_copy.default, (host,), {"device": "meta"}, dev) > 2 * h2d


def test_an_in_place_copy_within_one_memory_reads_its_source_and_writes_its_destination_once():
    """``dst.copy_(src)`` moves 2·n bytes, not 3·n: its output is its
    destination, written and not read (an in-place add does read it)."""
    h100 = OpModel(PROFILES["h100"])
    p = PROFILES["h100"]
    dst = torch.empty(16 << 20, dtype=torch.float32, device="meta")      # 64 MiB
    src = torch.empty(16 << 20, dtype=torch.bfloat16, device="meta")     # 32 MiB
    got = h100.cost_ns(aten.copy_.default, (dst, src), {}, dst)
    assert got == p.min_kernel_ns + round((dst.nbytes + src.nbytes) / _bw("h100") * 1e9)
    add_ = h100.cost_ns(aten.add_.Tensor, (dst, dst), {}, dst)         # reads dst twice, writes it
    assert add_ == p.min_kernel_ns + round(3 * dst.nbytes / _bw("h100") * 1e9)
    assert h100.cost_ns(aten._to_copy.default, (src,), {"dtype": torch.float32}, dst) == got


def test_a_profile_without_a_host_link_rate_is_refused():
    import dataclasses

    from cutimeline.devices.sim.roofline import profile_named
    from cutimeline.errors import CutimelineError
    bad = dataclasses.replace(PROFILES["h100"], link_bandwidth=0.0)
    with pytest.raises(CutimelineError, match="link_bandwidth"):
        profile_named(bad)


def test_batch_norm_in_training_and_long_softmax_rows_read_their_input_again():
    """A training-mode batch norm reads its input for the statistics, then
    to normalise (1.5× its bytes); in eval mode once; its backward 5/3×; a
    softmax over rows longer than a block reads them three times."""
    model = OpModel(PROFILES["h100"])
    x = torch.empty(64, 256, 28, 28, device="meta")
    w = torch.empty(256, device="meta")

    def bn(training):
        args = (x, w, w, w, w, training, 0.1, 1e-5)
        out = aten.native_batch_norm.default(*args)
        n = model.bytes(aten.native_batch_norm.default, args, {}, out)
        return model.cost_ns(aten.native_batch_norm.default, args, {}, out) - 2_000, n
    (train, n), (evaluate, _) = bn(True), bn(False)
    assert evaluate == round(n / _bw("h100") * 1e9)
    assert train == round(1.5 * n / _bw("h100") * 1e9)
    for cols, passes in ((1024, 1.0), (50257, 2.0)):
        y = torch.empty(8, cols, device="meta")
        out = aten._log_softmax.default(y, -1, False)
        n = model.bytes(aten._log_softmax.default, (y, -1, False), {}, out)
        assert model.cost_ns(aten._log_softmax.default, (y, -1, False), {}, out) == \
            2_000 + round(passes * n / _bw("h100") * 1e9)


def test_a_profile_names_what_its_kernels_reach_and_is_checked():
    import dataclasses

    from cutimeline.devices.sim.roofline import DEFAULT_EFFICIENCY, profile_named
    from cutimeline.errors import CutimelineError
    h100 = PROFILES["h100"]
    assert h100.achieved("conv", "tf32") == 0.15 and h100.achieved("attention", "bf16") == 0.35
    assert h100.achieved("matmul", "fp32") == DEFAULT_EFFICIENCY["matmul"]["fp32"]
    mine = dataclasses.replace(h100, efficiency={"matmul": {"bf16": 1.0}})
    assert profile_named(mine).achieved("matmul", "bf16") == 1.0
    for bad in (dataclasses.replace(h100, memory_efficiency=1.5),
                dataclasses.replace(h100, efficiency={"conv": {"bf16": 0.0}})):
        with pytest.raises(CutimelineError, match="fraction of the peak"):
            profile_named(bad)
