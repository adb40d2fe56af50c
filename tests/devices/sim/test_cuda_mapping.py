"""SimGPU.as_cuda(): CUDA code unmodified on the simulated GPU — every mapped
torch.cuda call, device spellings, autocast and GradScaler, values outside
recordings, streams and events, memory, and what is restored after."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.sim.cuda.autocast import FP32, LOWER


def gpu_rows(tl):
    """(op name, its shapes signature, GPU duration ns) per GPU row."""
    ops, gpu = tl.to_pandas("ops"), tl.to_pandas("gpu")
    return [(ops["name"][i], ops["shapes"][i], int(e - b))
            for i, b, e in zip(gpu["op"], gpu["begin_ns"], gpu["end_ns"]) if i >= 0]


@pytest.fixture
def gpu():
    return ctl.SimGPU("h100")


# -- the device --------------------------------------------------------------------

def test_torch_cuda_answers_for_the_simulated_gpu(gpu):
    before = torch.cuda.is_available
    with gpu.as_cuda():
        assert torch.cuda.is_available() and torch.cuda.is_initialized()
        assert torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        torch.cuda.set_device(0)
        torch.cuda.set_device("cuda:0")
        torch.cuda.init()
        assert torch.cuda.is_bf16_supported()
        assert "h100" in torch.cuda.get_device_name(0).lower()
        assert "simulated" in torch.cuda.get_device_name()
        assert torch.cuda.get_device_capability() == (9, 0)
        props = torch.cuda.get_device_properties(0)
        assert props.total_memory == 80 * 2**30 and props.major == 9
        torch.cuda.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        torch.manual_seed(0)  # calls torch.cuda.manual_seed_all
        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        if hasattr(torch, "accelerator"):
            assert torch.accelerator.is_available()
            assert torch.accelerator.current_accelerator().type == "cuda"
        with pytest.raises(CutimelineError, match="one device"):
            torch.cuda.set_device(1)
        with pytest.raises(CutimelineError, match="CUDA graphs"):
            torch.cuda.CUDAGraph()
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch.cuda.is_available is before and not torch.cuda.is_available()


def test_a100_profile_capability():
    with ctl.SimGPU("a100").as_cuda():
        assert torch.cuda.get_device_capability() == (8, 0)
        assert "a100" in torch.cuda.get_device_name().lower()


@pytest.mark.parametrize("spelling", ["cuda", "cuda:0", torch.device("cuda"),
                                      torch.device("cuda", 0), 0])
def test_cuda_devices_in_factories_are_the_simulated_gpu(gpu, spelling):
    with gpu.as_cuda():
        for t in (torch.zeros(3, device=spelling), torch.ones(2, 2, device=spelling),
                  torch.randn(4, device=spelling), torch.tensor([1.0, 2.0], device=spelling),
                  torch.arange(5, device=spelling), torch.empty(3, device=spelling)):
            assert t.is_meta and t.device == torch.device("cuda", 0) and t.is_cuda
            assert t.get_device() == 0


def test_copies_to_the_device(gpu):
    x = torch.randn(8, 4)
    with gpu.as_cuda():
        for y in (x.to("cuda"), x.cuda(), x.cuda(0), x.to(torch.device("cuda:0")),
                  x.to("cuda", non_blocking=True), x.to(0), x.to("cuda", torch.float16)):
            assert y.is_meta and y.device.type == "cuda"
        assert x.to("cuda", torch.float16).dtype == torch.float16
        m = nn.Linear(4, 3).cuda()
        assert all(p.is_meta for p in m.parameters())
        m2 = nn.Linear(4, 3).to(torch.device("cuda"))
        assert next(m2.parameters()).device == torch.device("cuda", 0)
        y = x.cuda()
        assert y.cuda() is y  # already on the device
    assert not x.is_meta and x.device.type == "cpu"


def test_pinned_memory_and_the_dataloader(gpu):
    ds = TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
    with gpu.as_cuda():
        t = torch.randn(3).pin_memory()
        assert t.is_pinned()
        batches = list(DataLoader(ds, batch_size=4, pin_memory=True))
        assert len(batches) == 4 and all(b[0].is_pinned() for b in batches)
        with ctl.record(device=gpu) as rec:
            for x, y in batches:
                x.to("cuda", non_blocking=True)
    names = [r[0] for r in gpu_rows(rec.timeline)]
    assert names.count("aten::_to_copy") + names.count("aten::copy_") >= 4


# -- values and reads anywhere ---------------------------------------------------------

def test_reads_outside_a_recording(gpu):
    with gpu.as_cuda():
        step = torch.zeros((), device="cuda")
        step += 3
        assert step.item() == 3.0  # exact: the host decided it
        loss = (torch.randn(4, 4, device="cuda") ** 2).mean()
        v = loss.item()
        assert np.isfinite(v)
        assert "device='cuda:0'" in repr(loss)
        assert f"{loss:.3f}"
        assert loss.cpu().device.type == "cpu"
        with ctl.record(device=gpu) as rec:
            step += 1
            assert step.item() == 4.0  # values carried into the recording
        step += 1
        assert int(step) == 5
    assert len(rec.timeline.to_pandas("gpu")) >= 1


def test_a_model_that_leaves_the_gpu_and_trains_on_is_said_once(gpu):
    with gpu.as_cuda():
        model = nn.Linear(32, 32).cuda()
        model(torch.randn(4, 32, device="cuda"))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            torch.ones(2, device="cuda").cpu()  # a value read back, not a model moving
            model.cpu()  # after training (Lightning's teardown): no news
            assert not said
            assert model.weight.device.type == "cpu"
            model(torch.randn(4, 32))  # training goes on there
            model(torch.randn(4, 32))
        lines = [str(w.message) for w in said]
        assert len(lines) == 1
        assert "moved off the simulated GPU at" in lines[0] and "test_cuda_mapping.py" in lines[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model.cuda()  # back: unmarked
            model(torch.randn(4, 32, device="cuda"))
        assert model.weight.is_meta


# -- time: synchronize, events, streams ------------------------------------------------

def test_events_time_the_simulated_work(gpu):
    a = torch.randn(4096, 4096)
    with gpu.as_cuda():
        a = a.cuda()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with ctl.record(device=gpu):
            start.record()
            for _ in range(4):
                a @ a
            end.record()
            end.synchronize()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        # four 4096³ fp32 matmuls on an H100: 4 · 137 GFLOP at tens of TFLOP/s
        assert 5 < ms < 200
        assert start.query() and end.query()
        start.record()
        end.record()
        with pytest.warns(RuntimeWarning, match="keeps no time"):
            assert start.elapsed_time(end) == 0.0
        with pytest.raises(RuntimeError, match="enable_timing"):
            torch.cuda.Event().elapsed_time(torch.cuda.Event())


def test_synchronize_is_a_sync(gpu):
    with gpu.as_cuda():
        a = torch.randn(2048, 2048, device="cuda")
        with ctl.record(device=gpu) as rec:
            a @ a
            torch.cuda.synchronize()
    syncs = rec.timeline.to_pandas("syncs")
    assert len(syncs) >= 1


def test_streams(gpu):
    with gpu.as_cuda():
        a = torch.randn(1024, 1024, device="cuda")
        side = torch.cuda.Stream()
        assert side != torch.cuda.current_stream() and not side.is_capturing()
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        with ctl.record(device=gpu) as rec:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                assert torch.cuda.current_stream() == side
                b = a @ a
            torch.cuda.current_stream().wait_stream(side)
            ev = side.record_event()
            torch.cuda.current_stream().wait_event(ev)
            b.record_stream(torch.cuda.current_stream())
            side.synchronize()
            (b + 1).sum()
    gpu_table = rec.timeline.to_pandas("gpu")
    assert set(gpu_table["stream"]) == {0, side.stream_id}


# -- memory -------------------------------------------------------------------------------

def test_memory_counts_the_simulated_tensors(gpu):
    with gpu.as_cuda():
        base = torch.cuda.memory_allocated()
        x = torch.empty(1024, 1024, device="cuda")  # 4 MiB
        assert torch.cuda.memory_allocated() - base == 4 * 2**20
        peak = torch.cuda.max_memory_allocated()
        assert peak >= base + 4 * 2**20
        del x
        assert torch.cuda.memory_allocated() == base
        assert torch.cuda.max_memory_allocated() == peak
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == base
        free, total = torch.cuda.mem_get_info()
        assert total == 80 * 2**30 and free == total - base


# -- autocast and GradScaler --------------------------------------------------------------

def _matmul_rows(precision):
    gpu = ctl.SimGPU("h100", jitter=0.0)
    with gpu.as_cuda():
        m = nn.Linear(2048, 2048).cuda()
        x = torch.randn(4096, 2048, device="cuda")
        with ctl.record(device=gpu) as rec:
            if precision is None:
                y = m(x)
            else:
                with torch.autocast("cuda", dtype=precision):
                    y = m(x)
                    assert y.dtype == precision
    return [r for r in gpu_rows(rec.timeline) if r[0] in ("aten::addmm", "aten::mm")]


def test_autocast_prices_matmuls_in_reduced_precision():
    fp32, = _matmul_rows(None)
    bf16, = _matmul_rows(torch.bfloat16)
    fp16, = _matmul_rows(torch.float16)
    assert "bf16" in bf16[1] and "f16" in fp16[1] and "f32" in fp32[1]
    # the profile's dense bf16 peak is several times its fp32 (non-TF32) one
    assert bf16[2] * 3 < fp32[2]
    assert abs(fp16[2] - bf16[2]) <= 0.2 * bf16[2]


def test_autocast_follows_its_lists_and_nesting(gpu):
    with gpu.as_cuda():
        x = torch.randn(8, 16, device="cuda")
        w = torch.randn(16, 16, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = x @ w
            assert h.dtype == torch.bfloat16
            assert torch.softmax(h, -1).dtype == torch.float32  # FP32 list
            assert torch.relu(h).dtype == torch.bfloat16  # no list: input's dtype
            assert nn.functional.layer_norm(h, (16,)).dtype == torch.float32
            with torch.autocast("cuda", enabled=False):
                assert (x @ w).dtype == torch.float32
            assert torch.mm(x, w).dtype == torch.bfloat16
            assert torch.addcmul(h, h.float(), h).dtype == torch.float32  # promoted
        assert (x @ w).dtype == torch.float32
        h.float().sum().backward()
        assert w.grad.dtype == torch.float32
    assert "linear" in LOWER and "softmax" in FP32


def test_autocast_casts_a_weight_once_per_region(gpu):
    with gpu.as_cuda():
        m = nn.Linear(64, 64).cuda()
        x = torch.randn(8, 64, device="cuda")
        with ctl.record(device=gpu) as rec:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                m(x), m(x), m(x)
    casts = [r for r in gpu_rows(rec.timeline) if r[0] == "aten::_to_copy"]
    # the weight and the bias once, the input once per call
    assert len(casts) == 2 + 3


def test_grad_scaler_steps_the_optimizer(gpu):
    with gpu.as_cuda():
        m = nn.Linear(32, 4).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        assert scaler.is_enabled()
        with ctl.record(device=gpu) as rec:
            for _ in range(3):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = m(torch.randn(16, 32, device="cuda")).float().pow(2).mean()
                opt.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
        assert scaler.get_scale() == 65536.0  # no inf found: the scale holds
    steps = rec.timeline.to_pandas("spans")
    assert (steps["kind"] == "step").sum() == 3 or len(rec.timeline.step_numbers()) == 3


# -- the mapping's life -------------------------------------------------------------------

def test_restored_after_an_exception(gpu):
    saved = {n: getattr(torch.cuda, n) for n in ("is_available", "synchronize", "Event",
                                                 "Stream", "memory_allocated")}
    with pytest.raises(ValueError, match="boom"):
        with gpu.as_cuda():
            torch.zeros(1, device="cuda")
            raise ValueError("boom")
    assert all(getattr(torch.cuda, n) is f for n, f in saved.items())
    with pytest.raises((RuntimeError, AssertionError)):
        torch.zeros(1, device="cuda")  # a CPU-only torch again
    assert torch.randn(2).device.type == "cpu"


def test_mappings_do_not_nest(gpu):
    with gpu.as_cuda():
        with pytest.raises(CutimelineError, match="do not nest"):
            with ctl.SimGPU().as_cuda():
                pass
        assert torch.cuda.is_available()
    assert not torch.cuda.is_available()


def test_the_recorded_training_loop(gpu):
    """The usual CUDA loop: the is_available idiom, AdamW, a read each step."""
    with gpu.as_cuda():
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 4)).to(device)
        opt = torch.optim.AdamW(model.parameters())
        with ctl.record(device=gpu) as rec:
            for _ in range(3):
                x = torch.randn(32, 64).to(device)
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss.item()
        print(loss)
    tl = rec.timeline
    names = {r[0] for r in gpu_rows(tl)}
    assert "aten::addmm" in names and any("foreach" in n or "adam" in n for n in names)
    assert "SIMULATED" in ctl.analyze(tl).summary()
    said = tl.meta["cuda_mapped"]  # what was mapped, kept with the recording
    assert "torch.cuda.is_available" in said["answered"] and "cuda:0" in said["devices"]


def test_what_cannot_be_simulated_is_said_at_its_line(gpu):
    import torch.distributed as dist
    lib = torch.library.Library("ctltest", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")  # a CPU kernel only: no meta one
    with gpu.as_cuda():
        assert torch.ops.ctltest.twice(torch.ones(2)).tolist() == [2.0, 2.0]
        with pytest.raises(CutimelineError, match=r"test_cuda_mapping\.py:\d+ is a custom "
                                                  r"op with no meta kernel"):
            torch.ops.ctltest.twice(torch.ones(2, device="cuda"))
        with pytest.raises(CutimelineError, match="NCCL across processes"):
            dist.init_process_group("nccl", rank=0, world_size=2)
    assert not dist.is_initialized()
