"""The model zoo of ``bench_zoo.py``: third-party model code on ``SimGPU``.

Each entry is real model code from Hugging Face ``transformers``,
``timm`` or ``torchvision`` (built from a config, without weights, on
``meta`` tensors), or a loop written in the structure of a
``pytorch/examples`` training script, as a function ``fn(seed, mode) ->
Timeline`` that records a few steps on ``ctl.SimGPU("h100", seed=seed)``
and marks one step per iteration (``rec.step()``). ``mode`` is the grad
mode the loop runs in:

* ``"train"``: the training loop as its script writes it;
* ``"no_grad"``: the script's evaluation loop (forward, loss, the reads
  its metrics make) under ``torch.no_grad()``;
* ``"inference"``: the same under ``torch.inference_mode()``.

Entries register with ``@zoo(needs=..., modes=...)``; ``zoo_hf.py``,
``zoo_vision.py`` and ``zoo_examples.py`` hold them. The libraries are a
benchmark extra (``pip install cutimeline[zoo]``), imported inside the
entries so that ``bench_verdicts.py`` loads without them: ``require``
raises ``Skip`` (which the verdict harness, ``verdicts/bench_verdicts.py``,
reports as a skip) where one is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl

torch.set_num_threads(1)  # the recorder's host side as a training process sees it
# 4 workers on this 2-core machine: DataLoader's "more workers than cores" warning is known
warnings.filterwarnings("ignore", "This DataLoader will create")
META = torch.device("meta")
MODES = ("train", "no_grad", "inference")


class Skip(Exception):
    """The entry or scenario cannot run here (a library is missing); its
    message says why."""


@dataclass(frozen=True)
class Entry:
    name: str
    run: Callable[[int, str], ctl.Timeline]  # (SimGPU seed, grad mode) -> Timeline
    needs: tuple[str, ...]                   # the third-party packages it imports
    modes: tuple[str, ...]                   # the grad modes it is meaningful in
    about: str                               # one line: the model and the loop


ZOO: dict[str, Entry] = {}


def zoo(about: str, *, needs: tuple[str, ...] = (), modes: tuple[str, ...] = MODES):
    """Register the decorated ``fn(seed, mode) -> Timeline`` in ``ZOO``."""
    def add(fn: Callable[[int, str], ctl.Timeline]) -> Callable[[int, str], ctl.Timeline]:
        if fn.__name__ in ZOO:
            raise ValueError(f"zoo entry {fn.__name__!r} is registered twice.")
        bad = set(modes) - set(MODES)
        if bad:
            raise ValueError(f"zoo entry {fn.__name__!r}: unknown modes {sorted(bad)}; "
                             f"use some of {MODES}.")
        ZOO[fn.__name__] = Entry(fn.__name__, fn, needs, modes, about)
        return fn
    return add


def require(*packages: str) -> None:
    """Raise ``Skip`` naming the missing packages (the ``zoo`` extra)."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise Skip(f"{', '.join(missing)} not installed (pip install cutimeline[zoo])")


def grad_mode(mode: str) -> contextlib.AbstractContextManager:
    """The context a loop runs in for ``mode``."""
    if mode == "train":
        return contextlib.nullcontext()
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference":
        return torch.inference_mode()
    raise ValueError(f"grad mode {mode!r} is none of {MODES}.")


def sim(seed: int, **options) -> ctl.SimGPU:
    """The simulated H100 every entry records on."""
    return ctl.SimGPU("h100", seed=seed, **options)


@contextlib.contextmanager
def recording(seed: int, **options) -> Iterator:
    """``ctl.record`` on ``sim(seed)`` with one step per ``rec.step()``."""
    with ctl.record(device=sim(seed, **options), steps="manual") as rec:
        yield rec


def on_device(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Each CPU tensor copied to the simulated device, as ``.to("cuda",
    non_blocking=True)`` would."""
    return [t.to(META, non_blocking=True) for t in tensors]


# -- synthetic data ----------------------------------------------------------

def pil_images(n: int, size: tuple[int, int], seed: int = 0, mode: str = "RGB") -> list:
    """``n`` PIL images of ``size`` (width, height) with noise pixels:
    decoded JPEGs as a dataset's ``__getitem__`` would hand them to its
    transforms (noise costs the transforms what photographs do)."""
    from PIL import Image  # Pillow comes with torchvision (the zoo extra)
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "L": 1}[mode]
    out = []
    for _ in range(n):
        a = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
        out.append(Image.fromarray(a[..., 0] if channels == 1 else a, mode))
    return out


class ImageSet(Dataset):
    """``length`` samples cycling over a few synthetic PIL images, each
    passed through ``transform`` (the dataset's own, as ImageFolder does),
    with a label in ``range(classes)``."""

    def __init__(self, length: int, transform, *, size=(320, 256), distinct: int = 8,
                 classes: int = 1000, mode: str = "RGB"):
        self.images = pil_images(distinct, size, mode=mode)
        self.length, self.transform, self.classes = length, transform, classes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        return self.transform(self.images[i % len(self.images)]), i % self.classes


def loader(dataset: Dataset, batch: int, workers: int, **kw) -> DataLoader:
    """A shuffled ``DataLoader`` of batches of ``batch``, as training
    scripts make one."""
    return DataLoader(dataset, batch_size=batch, num_workers=workers, shuffle=True,
                      generator=torch.Generator().manual_seed(0), **kw)
