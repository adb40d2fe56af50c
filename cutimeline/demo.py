"""The demo workload: a training loop with the habits that starve a GPU.

Every gap cause shows in one loop: a DataLoader with ``num_workers=0`` over
a dataset that takes host time per batch (the GPU waits for data), the loss
read back every step for logging and printed (the queue drains, and the GPU
waits while the host refills it), ops dispatched one by one (the GPU waits
for dispatch where the queue is empty), and the input preprocessed on a side
stream that the compute stream waits for (dependency).

On CUDA the loop runs as written. Without a GPU it runs on a simulated H100
(``SimGPU``), and the model and batches live on ``meta`` tensors: the host
then pays for dispatch alone, as it would with CUDA tensors, while the
simulator charges each op its H100 roofline cost. (CPU tensors would make
the host compute every matmul inside its dispatch, ten thousand times
slower than the GPU it stands for, and the demo would say "launch-bound"
about a CPU.) A meta tensor has no value: there the per-step
``loss.item()`` waits for the simulated GPU as on CUDA and reads zero.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl

from .errors import CutimelineError

__all__ = ["DemoResult", "run_demo", "SlowBatches", "make_model"]


class SlowBatches(Dataset):
    """Whole batches that each take ``load_s`` of busy host time to build
    (decoding, augmenting), served by the DataLoader one per step."""

    def __init__(self, n: int, batch: int, dim: int, classes: int, load_s: float):
        g = torch.Generator().manual_seed(0)
        self.n, self.load_s = n, load_s
        self.x = torch.randn(batch, dim, generator=g)
        self.y = torch.randint(0, classes, (batch,), generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        _busy(self.load_s)
        return self.x, self.y


def _busy(seconds: float) -> None:
    """Keep the host busy (not asleep) for ``seconds`` of this thread's CPU
    time: work that takes that long on a CPU of its own, and longer where
    other processes share the CPU (which SimGPU discounts)."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def make_model(dim: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.LayerNorm(hidden),
                         nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, classes))


@dataclass
class DemoResult:
    timeline: Any
    device: str          # "NVIDIA H200" or "SimGPU h100 (simulated)"
    simulated: bool
    losses: list[float] = field(default_factory=list)  # empty when simulated


class _Cuda:
    """The loop's device side on a real GPU."""

    simulated = False

    def __init__(self):
        self.where = torch.device("cuda")
        self.side_stream = torch.cuda.Stream()
        self.recorder_device = "cuda"
        self.name = torch.cuda.get_device_name()

    def side(self):
        return torch.cuda.stream(self.side_stream)

    def join(self, *made: torch.Tensor) -> None:
        torch.cuda.current_stream().wait_stream(self.side_stream)
        for t in made:  # made on the side stream, used on the current one
            t.record_stream(torch.cuda.current_stream())

    def read(self, loss: torch.Tensor) -> float | None:
        return loss.item()


class _Sim:
    """The loop's device side on a SimGPU over meta tensors."""

    simulated = True

    def __init__(self):
        self.where = torch.device("meta")
        self.gpu = ctl.SimGPU("h100", seed=0)
        self.recorder_device = self.gpu
        self.name = f"SimGPU {self.gpu.profile.name} (simulated)"

    def side(self):
        return self.gpu.stream(1)

    def join(self, *made: torch.Tensor) -> None:
        self.gpu.wait_stream(0, 1)

    def read(self, loss: torch.Tensor) -> float | None:
        loss.item()  # waits for the simulated GPU; a meta tensor reads zero
        return None


def run_demo(*, steps: int = 8, device: str = "auto", batch: int = 4096,
             dim: int = 4096, hidden: int = 8192, load_s: float = 12e-3,
             log_s: float = 3e-3, num_workers: int = 0,
             log_every: int = 1) -> DemoResult:
    """Record ``steps`` training steps; ``device``: "auto", "cuda" or "sim".

    ``load_s``: host time the dataset spends building each batch; ``log_s``:
    host time spent printing the loss after reading it back, which the
    loop does every ``log_every`` steps (0: never). ``num_workers`` and
    ``log_every`` are the loop's two fixes, so its what-if predictions
    can be checked against the loop run with them.
    """
    if device not in ("auto", "cuda", "sim"):
        raise CutimelineError(f"demo device {device!r} is not understood; give "
                              f"'auto', 'cuda' or 'sim'.")
    for name, v, least in (("steps", steps, 1), ("batch", batch, 1), ("dim", dim, 1),
                           ("hidden", hidden, 1), ("num_workers", num_workers, 0),
                           ("log_every", log_every, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise CutimelineError(f"demo {name}={v!r} must be a whole number ≥ {least}.")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise CutimelineError("demo --device cuda needs a GPU, but "
                              "torch.cuda.is_available() is False here; use "
                              "--device sim.")
    torch.manual_seed(0)
    side = _Cuda() if use_cuda else _Sim()
    classes = 10
    loader = DataLoader(SlowBatches(steps + 1, batch, dim, classes, load_s),
                        batch_size=None, num_workers=num_workers,
                        pin_memory=use_cuda)
    model = make_model(dim, hidden, classes).to(side.where)
    mix = torch.randn(dim, dim, device=side.where) / dim ** 0.5  # preprocessing
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    losses: list[float] = []
    with ctl.record(device=side.recorder_device) as rec:
        for i, (x, y) in enumerate(loader):
            if i == steps:
                break
            with side.side(), ctl.span("preprocess"):  # on a side stream
                x = x.to(side.where, non_blocking=True)
                y = y.to(side.where, non_blocking=True)
                for _ in range(4):                 # a GPU-heavy input transform
                    x = torch.tanh(x @ mix)
            side.join(x, y)                        # compute waits for its input
            with ctl.span("forward+loss"):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if log_every and i % log_every == 0:
                value = side.read(loss)            # logging every step: a sync
                with ctl.span("log"):              # ... and printing it
                    _busy(log_s)
                if value is not None:
                    losses.append(value)
    return DemoResult(rec.timeline, side.name, side.simulated, losses)
