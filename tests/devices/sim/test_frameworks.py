"""The frameworks people train with, unmodified, on the simulated GPU: each
scenario script of benchmarks/frameworks/ run under ``SimGPU.as_cuda()`` and
``ctl.record`` as ``cutimeline record --device sim`` runs it — Lightning's
Trainer, Hugging Face's Trainer, accelerate, plain AMP — records its work
on the simulated GPU (never silently on the CPU), its optimizer steps as
steps, and its matmuls in the precision asked for. Then what they lean on:
module moves that keep Parameter objects (an optimizer made before
``.cuda()``, tied weights) and torch.cuda's classes as classes (a model
that leaves the GPU: test_cuda_mapping.py). The frameworks are not test dependencies: their tests
skip without them (``pip install '.[frameworks]'``)."""

import re
import runpy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import SpanKind

SCENARIOS = Path(__file__).resolve().parents[3] / "benchmarks" / "frameworks"

#: GPU rows of these ops are matmul-like: they run in the autocast dtype
MATMUL = re.compile(r"aten::(mm|addmm|bmm|baddbmm|linear|_scaled_dot_product_\w+attention)$")
OPTIMIZER = re.compile(r"aten::(_foreach_\w+|_fused_adamw?_)")


@pytest.fixture(autouse=True)
def fresh_accelerate():
    """accelerate keeps its state (mixed precision, device) for the process,
    as the HF Trainer's runs do through it: each run starts afresh."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


def run(script, *argv, monkeypatch):
    """Run scenario ``script`` with ``argv`` as a user's program on a
    simulated H100 mapped to CUDA; its Timeline and the warnings said."""
    monkeypatch.setattr(sys, "argv", [str(SCENARIOS / script), *argv])
    gpu = ctl.SimGPU("h100")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with gpu.as_cuda():
            with ctl.record(device=gpu) as rec:
                runpy.run_path(str(SCENARIOS / script), run_name="__main__")
    return rec.timeline, [str(w.message) for w in said if "cutimeline" in str(w.message)]


def gpu_ops(tl):
    """(op name, shapes) of each GPU row that an op launched."""
    op = tl.gpu.op[tl.gpu.op >= 0]
    return list(zip(tl.decode(tl.ops.name[op]), tl.decode(tl.ops.shapes[op])))


def check_trained_on_the_gpu(tl, steps, dtype):
    """The run's work reached the simulated GPU: GPU rows, its optimizer steps
    as STEP spans with optimizer kernels, matmuls in ``dtype`` ("bf16",
    "f32"), and a report that is not host-only."""
    rows = gpu_ops(tl)
    assert len(rows) > 20 * steps
    assert int((tl.spans.kind == SpanKind.STEP).sum()) == steps
    assert int((tl.spans.kind == SpanKind.OPTIMIZER).sum()) == steps
    optimizer = [n for n, _ in rows if OPTIMIZER.match(n)]
    assert len(optimizer) >= steps
    matmuls = [s for n, s in rows if MATMUL.match(n)]
    assert len(matmuls) >= 3 * steps
    # every tensor of a matmul in the precision asked for (an attention
    # kernel's statistics and seeds aside)
    heads = {s.split("[")[0] for shapes in matmuls for s in shapes.split(", ")[:2]}
    assert heads == {dtype}, heads
    verdict = ctl.analyze(tl).summary().splitlines()[0]
    assert verdict.startswith("Verdict:") and "host-only" not in verdict


# -- the frameworks -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[], ["--accelerator", "gpu"]],
                         ids=["default-trainer", "accelerator-gpu"])
def test_lightning_trains_on_the_simulated_gpu(argv, monkeypatch, capsys, caplog):
    pytest.importorskip("lightning")
    tl, said = run("lightning_train.py", "--steps", "4", *argv, monkeypatch=monkeypatch)
    # the default Trainer() picks the GPU: torch.cuda.is_available() is True
    assert "GPU available: True (cuda), used: True" in caplog.text
    assert "trained 4 steps on cuda:0" in capsys.readouterr().out
    check_trained_on_the_gpu(tl, 4, "f32")
    # Lightning moves the model to the CPU at teardown; nothing trains after it
    assert not said, said


def test_lightning_bf16_mixed(monkeypatch):
    pytest.importorskip("lightning")
    tl, said = run("lightning_train.py", "--steps", "3", "--precision", "bf16-mixed",
                   monkeypatch=monkeypatch)
    check_trained_on_the_gpu(tl, 3, "bf16")


@pytest.mark.parametrize("argv, dtype", [([], "bf16"), (["--fp32"], "f32")],
                         ids=["bf16", "fp32"])
def test_hf_trainer_trains_on_the_simulated_gpu(argv, dtype, monkeypatch, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the HF Trainer needs it
    tl, said = run("hf_trainer_train.py", "--steps", "3", *argv, monkeypatch=monkeypatch)
    assert "trained 3 steps on cuda:0" in capsys.readouterr().out
    check_trained_on_the_gpu(tl, 3, dtype)
    assert not said, said


def test_accelerate_bf16_with_gradient_accumulation(monkeypatch, capsys):
    pytest.importorskip("accelerate")
    tl, said = run("accelerate_train.py", "--steps", "3", "--accumulate", "2",
                   monkeypatch=monkeypatch)
    assert "3 optimizer steps on cuda in bf16" in capsys.readouterr().out
    # six batches forward and backward, three optimizer steps
    assert int((tl.spans.kind == SpanKind.FORWARD).sum()) == 6
    check_trained_on_the_gpu(tl, 3, "bf16")
    assert not said, said


def test_accelerate_fp16_steps_through_its_grad_scaler(monkeypatch):
    pytest.importorskip("accelerate")
    tl, said = run("accelerate_train.py", "--steps", "2", "--precision", "fp16",
                   monkeypatch=monkeypatch)
    check_trained_on_the_gpu(tl, 2, "f16")
    names = {n for n, _ in gpu_ops(tl)}
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in names


def test_amp_example_prices_its_matmuls_in_bf16(monkeypatch):
    tl, said = run("amp_train.py", monkeypatch=monkeypatch)
    check_trained_on_the_gpu(tl, 16, "bf16")
    # the big layer's matmuls take the profile's bf16 time, not fp32's
    model = ctl.SimGPU("h100").ops.model
    op = tl.gpu.op >= 0
    names, shapes = tl.decode(tl.ops.name[tl.gpu.op[op]]), tl.decode(tl.ops.shapes[tl.gpu.op[op]])
    ns = (tl.gpu.end_ns - tl.gpu.begin_ns)[op]
    big = "bf16[4096], bf16[256,1024], bf16[1024,4096]"
    took = np.median([t for n, s, t in zip(names, shapes, ns) if n == "aten::addmm" and s == big])
    addmm = torch.ops.aten.addmm.default

    def price(dtype):
        args = tuple(torch.empty(s, dtype=dtype, device="meta")
                     for s in ((4096,), (256, 1024), (1024, 4096)))
        return model.cost_ns(addmm, args, {}, addmm(*args))
    assert price(torch.float32) > 3 * price(torch.bfloat16)
    assert 0.8 * price(torch.bfloat16) < took < 1.5 * price(torch.bfloat16)


# -- what they lean on ----------------------------------------------------------------

def test_an_optimizer_made_before_the_move_steps_the_simulated_parameters():
    # accelerate's prepare() moves the model after the optimizer was made
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 4))
        before = list(model.parameters())
        opt = torch.optim.AdamW(model.parameters())
        model.cuda()
        assert all(p is q for p, q in zip(before, model.parameters()))
        assert all(p.is_meta and p.device == torch.device("cuda", 0) for p in before)
        with ctl.record(device=gpu) as rec:
            for _ in range(2):
                model(torch.randn(8, 64, device="cuda")).sum().backward()
                opt.step()
                opt.zero_grad()
    assert all(len(opt.state[p]) for p in before)  # the optimizer saw gradients
    assert any(OPTIMIZER.match(n) for n, _ in gpu_ops(rec.timeline))


def test_a_module_move_keeps_tied_weights_attributes_and_grads():
    with ctl.SimGPU("h100").as_cuda():
        emb, head = nn.Embedding(100, 16), nn.Linear(16, 100, bias=False)
        head.weight = emb.weight  # tied, as a language model's
        emb.weight.marked = "by a library"
        head(emb(torch.tensor([1, 2]))).sum().backward()
        loss = head.weight.sum()  # a graph still alive through the move
        emb.cuda()
        head.cuda()
        assert head.weight is emb.weight and emb.weight.is_meta
        assert emb.weight.marked == "by a library"
        assert emb.weight.grad is not None and emb.weight.grad.is_meta
        head.half()  # a cast on the simulated GPU: torch's usual path
        assert head.weight is emb.weight and emb.weight.dtype == torch.float16
        del loss


def test_cuda_classes_stay_classes():
    with ctl.SimGPU("h100").as_cuda():
        # libraries name them in annotations at import and in isinstance checks
        assert (torch.cuda.Stream | None) and (torch.cuda.CUDAGraph | None)
        s = torch.cuda.Stream()
        assert isinstance(s, torch.cuda.Stream) and s != torch.cuda.current_stream()
        assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
        assert torch.cuda.Stream(priority=-1).stream_id > s.stream_id
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream() == s
        for make in (torch.cuda.CUDAGraph, lambda: torch.cuda.graph(None),
                     lambda: torch.cuda.make_graphed_callables(nn.Linear(2, 2), ())):
            with pytest.raises(CutimelineError, match="CUDA graphs"):
                make()
