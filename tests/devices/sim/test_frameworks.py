"""The frameworks people train with, unmodified, on the simulated GPU: a
training program for each, written as its users write it for a GPU, run
under ``SimGPU.as_cuda()`` and ``ctl.record`` as ``cutimeline record
--device sim`` runs a script — Lightning's Trainer, Hugging Face's Trainer,
accelerate, plain AMP — records its work on the simulated GPU (never
silently on the CPU), its optimizer steps as steps, and its matmuls in the
precision asked for. (The same programs, as scripts to run by hand, are in
the repository's frameworks benchmarks; tests run their own copies.) Then
what they lean on: module moves that keep Parameter objects (an optimizer
made before ``.cuda()``, tied weights) and torch.cuda's classes as classes
(a model that leaves the GPU: test_cuda_mapping.py). The frameworks are
not test dependencies: their tests skip without them (``pip install
'.[frameworks]'``)."""

import re
import sys
import tempfile
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import SpanKind

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


def simulated(program, *args, **kwargs):
    """Run ``program`` as a user's CUDA program on a simulated H100 mapped to
    CUDA, recorded; (its Timeline, what it returned, cutimeline's warnings)."""
    gpu = ctl.SimGPU("h100")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with gpu.as_cuda():
            with ctl.record(device=gpu) as rec:
                out = program(*args, **kwargs)
    return rec.timeline, out, [str(w.message) for w in said if "cutimeline" in str(w.message)]


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


# -- the programs, as their users write them --------------------------------------------

def lightning_fit(steps, **options):
    """A LightningModule fitted by a Trainer of ``options``; the device it
    trained on."""
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    data = TensorDataset(torch.randn(32 * steps, 256), torch.randint(0, 10, (32 * steps,)))
    trainer = L.Trainer(max_steps=steps, enable_checkpointing=False, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, **options)
    trainer.fit(Classifier(), DataLoader(data, batch_size=32, shuffle=True))
    return trainer.strategy.root_device


def hf_train(steps, bf16):
    """transformers.Trainer on a 2-layer GPT-2 made from its config (no
    download) over random tokens; the device TrainingArguments chose."""
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(Dataset):
        def __init__(self):
            self.ids = torch.randint(0, 512, (4 * steps, 64))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=4,
                                 max_steps=steps, bf16=bf16, report_to=[],
                                 save_strategy="no", disable_tqdm=True)
        Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens()).train()
    return args.device


def accelerate_train(steps, precision, accumulate=2):
    """A loop through accelerate: prepare, accumulate, backward."""
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=precision,
                              gradient_accumulation_steps=accumulate)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # before prepare moves it
    n = 32 * accumulate * steps
    loader = DataLoader(TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,))),
                        batch_size=32)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return accelerator.device


def amp_train(steps):
    """Plain PyTorch: autocast to bf16, a GradScaler, a pinned DataLoader."""
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    data = TensorDataset(torch.randn(256 * steps, 1024), torch.randint(0, 10, (256 * steps,)))
    for x, y in DataLoader(data, batch_size=256, pin_memory=True):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss.item()


# -- the frameworks -------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"accelerator": "gpu", "devices": 1}],
                         ids=["default-trainer", "accelerator-gpu"])
def test_lightning_trains_on_the_simulated_gpu(options, caplog):
    pytest.importorskip("lightning")
    tl, device, said = simulated(lightning_fit, 4, **options)
    # the default Trainer() picks the GPU: torch.cuda.is_available() is True
    assert "GPU available: True (cuda), used: True" in caplog.text
    assert device == torch.device("cuda", 0)
    check_trained_on_the_gpu(tl, 4, "f32")
    # Lightning moves the model to the CPU at teardown; nothing trains after it
    assert not said, said


def test_lightning_bf16_mixed():
    pytest.importorskip("lightning")
    tl, _, said = simulated(lightning_fit, 3, precision="bf16-mixed")
    check_trained_on_the_gpu(tl, 3, "bf16")


@pytest.mark.parametrize("bf16, dtype", [(True, "bf16"), (False, "f32")], ids=["bf16", "fp32"])
def test_hf_trainer_trains_on_the_simulated_gpu(bf16, dtype):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the HF Trainer needs it
    tl, device, said = simulated(hf_train, 3, bf16)
    assert device.type == "cuda"
    check_trained_on_the_gpu(tl, 3, dtype)
    assert not said, said


def test_accelerate_bf16_with_gradient_accumulation():
    pytest.importorskip("accelerate")
    tl, device, said = simulated(accelerate_train, 3, "bf16")
    assert device.type == "cuda"
    # six batches forward and backward, three optimizer steps
    assert int((tl.spans.kind == SpanKind.FORWARD).sum()) == 6
    check_trained_on_the_gpu(tl, 3, "bf16")
    assert not said, said


def test_accelerate_fp16_steps_through_its_grad_scaler():
    pytest.importorskip("accelerate")
    tl, _, said = simulated(accelerate_train, 2, "fp16")
    check_trained_on_the_gpu(tl, 2, "f16")
    names = {n for n, _ in gpu_ops(tl)}
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in names


def test_amp_prices_its_matmuls_in_bf16():
    tl, _, said = simulated(amp_train, 6)
    check_trained_on_the_gpu(tl, 6, "bf16")
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
