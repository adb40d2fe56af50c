"""A PyTorch Lightning training run as its users write it: a LightningModule,
a DataLoader and the default ``Trainer()``, which picks the GPU when there is
one (``--accelerator gpu`` asks for it by name).

On a GPU: ``python benchmarks/frameworks/lightning_train.py``. Without one,
on a simulated H100: ``cutimeline record --device sim
benchmarks/frameworks/lightning_train.py`` (or ``SimGPU.as_cuda()`` around
``runpy.run_path``, as tests/devices/sim/test_frameworks.py does).
"""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, width: int = 512, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, classes))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accelerator", default=None, help="e.g. gpu; default: Trainer()'s own choice")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--precision", default=None, help="e.g. bf16-mixed")
    args = p.parse_args(argv)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64 * args.steps, 512), torch.randint(0, 10, (64 * args.steps,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    options = dict(max_steps=args.steps, enable_checkpointing=False, logger=False,
                   enable_progress_bar=False, enable_model_summary=False)
    if args.accelerator:
        options.update(accelerator=args.accelerator, devices=1)
    if args.precision:
        options.update(precision=args.precision)
    trainer = L.Trainer(**options)
    model = Classifier()
    trainer.fit(model, loader)
    print(f"trained {trainer.global_step} steps on {trainer.strategy.root_device}, "
          f"loss {trainer.callback_metrics['train_loss'].item():.3f}")


if __name__ == "__main__":
    main()
