"""A Hugging Face ``accelerate`` training loop as its users write it:
``Accelerator(mixed_precision="bf16")``, ``prepare`` on the model, optimizer
and DataLoader, gradient accumulation with ``accumulate(model)`` and
``accelerator.backward(loss)``.

On a GPU: ``python benchmarks/frameworks/accelerate_train.py``. Without one,
on a simulated H100: ``cutimeline record --device sim
benchmarks/frameworks/accelerate_train.py``.
"""

import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="bf16", help="no, fp16 or bf16")
    p.add_argument("--accumulate", type=int, default=2, help="batches per optimizer step")
    p.add_argument("--steps", type=int, default=6, help="optimizer steps")
    args = p.parse_args(argv)

    accelerator = Accelerator(mixed_precision=args.precision,
                              gradient_accumulation_steps=args.accumulate)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                          nn.Linear(2048, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    n = 64 * args.accumulate * args.steps
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    model.train()
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    accelerator.print(f"trained {n // 64} batches, {args.steps} optimizer steps on "
                      f"{accelerator.device} in {accelerator.mixed_precision}, "
                      f"loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
