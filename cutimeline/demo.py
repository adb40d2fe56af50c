"""The demo workload: a small training loop with the habits that starve a GPU.

A DataLoader with ``num_workers=0`` over a dataset that takes time to build
each sample (the GPU waits while the host loads the next batch), and a
``loss.item()`` every step for logging (the host waits for the queue to
drain). Recorded on CUDA when there is a GPU, else on a simulated H100
(``SimGPU``), which the output says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .errors import CutimelineError

__all__ = ["DemoResult", "run_demo", "SlowDataset", "make_model"]


class SlowDataset(Dataset):
    """Random samples that each cost ``load_s`` of host time, like decoding."""

    def __init__(self, n: int, dim: int, classes: int, load_s: float):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.load_s = load_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        deadline = time.perf_counter() + self.load_s
        while time.perf_counter() < deadline:  # a busy host, not a sleeping one
            pass
        return self.x[i], self.y[i]


def make_model(dim: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.LayerNorm(hidden),
                         nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, classes))


@dataclass
class DemoResult:
    timeline: Any
    device: str          # "cuda:0" or "SimGPU h100 (simulated)"
    simulated: bool
    losses: list[float]


def run_demo(*, steps: int = 8, device: str = "auto", batch: int = 64,
             load_s: float = 60e-6, num_workers: int = 0) -> DemoResult:
    """Record ``steps`` training steps; ``device``: "auto", "cuda" or "sim"."""
    import cutimeline as ctl

    if device not in ("auto", "cuda", "sim"):
        raise CutimelineError(f"demo device {device!r} is not understood; give "
                              f"'auto', 'cuda' or 'sim'.")
    if not isinstance(steps, int) or steps < 1:
        raise CutimelineError(f"demo steps={steps!r} must be a whole number ≥ 1.")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise CutimelineError("demo --device cuda needs a GPU, but "
                              "torch.cuda.is_available() is False here; use "
                              "--device sim.")
    torch.manual_seed(0)
    dim, hidden, classes = 256, 1024, 10
    data = SlowDataset(batch * (steps + 1), dim, classes, load_s)
    loader = DataLoader(data, batch_size=batch, num_workers=num_workers,
                        pin_memory=use_cuda)
    where = torch.device("cuda") if use_cuda else torch.device("cpu")
    model = make_model(dim, hidden, classes).to(where)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gpu = None if use_cuda else ctl.SimGPU("h100", seed=0)
    losses: list[float] = []
    with ctl.record(device="cuda" if use_cuda else gpu) as rec:
        for i, (x, y) in enumerate(loader):
            if i == steps:
                break
            x, y = x.to(where, non_blocking=True), y.to(where, non_blocking=True)
            with ctl.span("forward+loss"):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # logging every step: a sync
    name = (torch.cuda.get_device_name() if use_cuda
            else f"SimGPU {gpu.profile.name} (simulated)")
    return DemoResult(rec.timeline, name, not use_cuda, losses)
