"""Verdict scenarios written with the training frameworks, as their users write
them for a GPU, run on a simulated H100 with CUDA mapped to it
(``SimGPU.as_cuda()``, what ``cutimeline record --device sim`` does): PyTorch
Lightning's default ``Trainer()``, the Hugging Face ``Trainer``, and
``accelerate`` with bf16 mixed precision and gradient accumulation.

Each is sized so that its verdict follows from the H100's roofline by a wide
margin (fp32 matmuls at 85 % of 67 TFLOP/s without TF32, bf16 at 35 % of
989.5 TFLOP/s, 3.35 TB/s): GPU-bound, the GPU's work a step several times
the host's (a framework's Python a step, tens of ms on a slow 2-core
machine, is far below it). The GPU-bound verdict then names the GPU-side fix
that gains most (``analysis/replay/gpuside.py``). A framework that is not
installed skips its scenario (``pip install -e '.[frameworks]'``).
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from scenarios import Skip, scenario  # first: it puts benchmarks/zoo/ on the path
from zoo_hf import TokenBlocks

import cutimeline as ctl


def _needs(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        raise Skip(f"{name} is not installed (pip install -e '.[frameworks]')")


class _Batches(Dataset):
    """Whole batches, made ahead (``DataLoader(batch_size=None)``): the
    scenarios are about the GPU side; collating thousands of samples in the
    loop's own thread is another scenario's (input-bound) question."""

    def __init__(self, n: int, batch: int, features: int, classes: int = 16):
        g = torch.Generator().manual_seed(0)
        self.x = [torch.randn(batch, features, generator=g) for _ in range(n)]
        self.y = [torch.randint(0, classes, (batch,), generator=g) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i], self.y[i]


def _mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                         nn.GELU(), nn.Linear(width, 16))


@scenario("GPU-bound", "Lightning, default Trainer(): a 4096-wide MLP (168M parameters) at "
          "batch 2048 in fp32: 6 × 168M × 2048 ≈ 2.1 TFLOP a step ≈ 36 ms at 57 TFLOP/s, "
          "the Trainer's Python a step a few ms: GPU-bound; fp32 matmuls, so the fix is "
          "bf16 autocast or TF32 (several times the fp32 rate)")
def lightning_trainer_fp32(seed: int) -> ctl.Timeline:
    """Lightning's default ``Trainer()`` on a 4096-wide MLP (4 linears,
    168 M parameters) at batch 2048 in fp32: 6 · 168 M · 2048 ≈ 2.1 TFLOP
    a step, ≈ 36 ms at the 57 TFLOP/s SimGPU's fp32 matmuls reach, against
    a few ms of the Trainer's Python and ≈ 60 ops of launches: GPU-bound,
    the matmuls at fp32, so bf16 autocast or TF32 is the fix."""
    _needs("lightning")
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _mlp(4096)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    torch.manual_seed(0)
    steps = 5
    data = _Batches(steps, 2048, 4096)
    gpu = ctl.SimGPU("h100", seed=seed)
    with gpu.as_cuda(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(max_steps=steps, enable_checkpointing=False, logger=False,
                            enable_progress_bar=False, enable_model_summary=False)
        with ctl.record(device=gpu) as rec:
            trainer.fit(Model(), DataLoader(data, batch_size=None))
    return rec.timeline


@scenario("GPU-bound", "Hugging Face Trainer, fp32: GPT-2 with 4 layers of width 1024 "
          "(50M in the blocks, a 51M tied embedding and head) on 8 × 1024 tokens: "
          "≈ 6 × 101M × 8192 ≈ 5 TFLOP a step ≈ 90 ms at 57 TFLOP/s plus attention, "
          "the Trainer's Python a step tens of ms at most: GPU-bound; the fix bf16")
def hf_trainer_fp32(seed: int) -> ctl.Timeline:
    """The Hugging Face ``Trainer`` in fp32 on a 4-layer GPT-2 1024 wide
    (50 M parameters in the blocks, a 51 M tied embedding and head), 8 ×
    1024 tokens: 6 · 101 M · 8192 ≈ 5 TFLOP a step, ≈ 90 ms at 57 TFLOP/s
    plus attention, against tens of ms at most of the Trainer's Python:
    GPU-bound, the fix bf16."""
    _needs("transformers")
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    steps = 5
    gpu = ctl.SimGPU("h100", seed=seed)
    with gpu.as_cuda(), warnings.catch_warnings(), tempfile.TemporaryDirectory() as out:
        warnings.simplefilter("ignore")
        model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=1024, n_head=16,
                                           n_positions=1024))
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                 report_to=[], save_strategy="no", logging_strategy="no",
                                 disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args,
                          train_dataset=TokenBlocks(8 * steps, 1024, 50257))
        with ctl.record(device=gpu) as rec:
            trainer.train()
    return rec.timeline


@scenario("GPU-bound", "accelerate, mixed_precision='bf16', two micro-batches per "
          "optimizer step (accumulate): an 8192-wide MLP (537M parameters) at batch 4096: "
          "6 × 537M × 4096 ≈ 13 TFLOP a micro-batch ≈ 38 ms at 346 TFLOP/s (35 % of the "
          "bf16 peak), 76 ms a step, the host's a few ms: GPU-bound, with matmuls already "
          "bf16; the fix what is left (the fused optimizer's one pass over 537M parameters)")
def accelerate_bf16_accumulate(seed: int) -> ctl.Timeline:
    """accelerate with ``mixed_precision="bf16"`` and two micro-batches
    per optimizer step (``accumulate``): an 8192-wide MLP (537 M
    parameters) at batch 4096, 6 · 537 M · 4096 ≈ 13 TFLOP a micro-batch,
    ≈ 38 ms at 346 TFLOP/s (35 % of the bf16 peak), 76 ms a step against
    a few ms of host: GPU-bound with the matmuls bf16 already; what is
    left is the optimizer's pass over 537 M parameters (fused_optimizer)."""
    _needs("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    torch.manual_seed(0)
    steps, micro = 4, 2
    gpu = ctl.SimGPU("h100", seed=seed)
    data = _Batches(steps * micro, 4096, 64)
    with gpu.as_cuda(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # each repeat as a fresh process finds accelerate: its state is process-wide
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        acc = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=micro)
        model = nn.Sequential(nn.Linear(64, 8192), _mlp(8192))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, opt, loader = acc.prepare(model, opt, DataLoader(data, batch_size=None))
        with ctl.record(device=gpu) as rec:
            for x, y in loader:
                with acc.accumulate(model):
                    loss = nn.functional.cross_entropy(model(x), y)
                    acc.backward(loss)
                    opt.step()
                    opt.zero_grad()
    return rec.timeline
