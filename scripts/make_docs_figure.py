"""Regenerate docs/timeline.png: a small training loop recorded on a
simulated H100 (``ctl.SimGPU``), drawn by ``ctl.plot``.

The loop has the habits that starve a GPU, so every gap cause shows: a
DataLoader with ``num_workers=0`` over a dataset that takes host time per
sample (the GPU waits for data), a host sync every step for logging (the
queue drains, the GPU waits while the host refills it), ops dispatched one
by one (the GPU waits for dispatch at the start of a step), and the input
copied on a side stream that the compute stream waits for (dependency).

The model and batches live on ``meta`` tensors: the host pays only for
dispatch, as it would with CUDA tensors, while the SimGPU charges each op
its H100 roofline cost. A meta tensor has no value, so the per-step
``loss.item()`` of a real loop is ``gpu.synchronize()`` here — the same
host-blocking drain of the queue.

    python scripts/make_docs_figure.py [--out docs/timeline.png] [--steps 6] [--window 1-4]
"""

from __future__ import annotations

import argparse
import os
import sys

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl
from cutimeline.demo import make_model
from cutimeline.figure import plot


class SlowBatches(Dataset):
    """Whole batches that each take ``load_s`` of busy host time to build
    (decoding, augmenting), served by the DataLoader one per step."""

    def __init__(self, n: int, batch: int, dim: int, classes: int, load_s: float):
        self.n, self.load_s = n, load_s
        self.x = torch.randn(batch, dim)
        self.y = torch.randint(0, classes, (batch,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        _busy(self.load_s)
        return self.x, self.y


def record_loop(steps: int, *, batch: int = 4096, dim: int = 4096,
                hidden: int = 8192, classes: int = 10, load_s: float = 12e-3,
                log_s: float = 3e-3):
    """Record ``steps`` training steps on a SimGPU h100; the Timeline."""
    torch.manual_seed(0)
    loader = DataLoader(SlowBatches(steps + 1, batch, dim, classes, load_s),
                        batch_size=None, num_workers=0)
    model = make_model(dim, hidden, classes).to("meta")
    mix = torch.randn(dim, dim, device="meta")   # input preprocessing weights
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gpu = ctl.SimGPU("h100", seed=0)
    with ctl.record(device=gpu) as rec:
        for i, (x, y) in enumerate(loader):
            if i == steps:
                break
            with gpu.stream(1), ctl.span("preprocess"):  # on a side stream
                x, y = x.to("meta"), y.to("meta")
                for _ in range(4):                # GPU-heavy input transform
                    x = torch.tanh(x @ mix)
            gpu.wait_stream(0, 1)                # compute waits for its input
            with ctl.span("forward+loss"):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            gpu.synchronize()                    # loss.item() for logging ...
            with ctl.span("log"):                # ... and printing it
                _busy(log_s)
    return rec.timeline


def _busy(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join("docs", "timeline.png"))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--window", default="1-4",
                   help="steps first-last to draw (default 1-4: past the "
                        "warm-up step 0), or 'all'")
    a = p.parse_args(argv)
    tl = record_loop(a.steps)
    window = None
    if a.window and a.window != "all":
        first, last = (int(v) for v in a.window.split("-"))
        window = (first, last)
    plot(tl, a.out, window=window)
    print(tl)
    print(ctl.analyze(tl).summary())
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
