"""A trainer's steps recorded from its own hooks: what Lightning's
``CutimelineProfiler`` and Hugging Face's ``CutimelineCallback`` share.

As ``record_script`` does (``recording/control/firststeps.py``): a
recording from the trainer's first step; at the end of step ``skip``
it is dropped (its self-cost model kept) and a fresh one records the
next ``steps`` steps. A step is one of the trainer's optimizer steps
(its ``global_step`` advancing), ended where the trainer's hook says
it ended, not at each ``optimizer.step()``: gradient accumulation's
micro-batches and a step's second optimizer stay inside one step. The
recording ends there, at the end of training, or when the training
raises; its Timeline is written to ``out_dir`` as
``cutimeline-step-<a>-<b>.ctl`` (``.rank-<r>`` added under
torch.distributed).

``device``: as ``record(device=)`` takes it; "auto" (the default) is the
simulated GPU CUDA is mapped to (the trainer made and run inside
``with gpu.as_cuda():``), else CUDA when there is one, else host rows
only; "sim" and a ``SimGPU`` need CUDA mapped to that simulated GPU.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..devices.device import Device
from ..devices.sim import SimGPU
from ..devices.sim.cuda import mapped_gpu
from ..errors import CutimelineError
from ..recording.control.firststeps import FirstSteps
from ..recording.devicespec import device_spelling, recording_device
from ..recording.ranks import rank_meta
from ..recording.recorder import record
from ..timeline.timeline import Timeline

__all__ = ["TrainingRecording", "whole_number"]


def whole_number(where: str, name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise CutimelineError(f"{where}({name}={value!r}) must be a whole number of "
                              f"steps ≥ {least}.")
    return value


class TrainingRecording:
    """The recording of one training run's steps (see the module doc):
    ``begin(global_step)`` at its first step, ``step_ended(global_step)``
    after each step's hook, ``end(error)`` when training ends. ``where``
    names the class in errors."""

    def __init__(self, skip: int, steps: int, out_dir: Any, device: Any, where: str):
        self.where = where
        self.skip = whole_number(where, "skip", skip, 0)
        self.steps = whole_number(where, "steps", steps, 1)
        if out_dir is not None and (not isinstance(out_dir, (str, os.PathLike))
                                    or not os.fspath(out_dir)):
            raise CutimelineError(f"{where}(out_dir={out_dir!r}) must be a folder (a str "
                                  f"or path), or None for the trainer's own.")
        self.out_dir = None if out_dir is None else os.fspath(out_dir)
        self.device = device_spelling(device, f"{where}(device=...)")
        self.run: FirstSteps | None = None
        self.base = 0  # the trainer's global step at our step 0
        self.last = 0  # the global step when our last step ended
        self.ended = 0  # our steps ended
        self.timeline: Timeline | None = None  # once the recording has ended
        self.saved: str | None = None

    @property
    def recording(self) -> bool:
        return self.run is not None and self.timeline is None

    def begin(self, global_step: int) -> None:
        """The trainer's first step begins (global step ``global_step``)."""
        if self.run is not None:
            return
        dev = self.resolved()
        self.base = self.last = int(global_step)
        self.run = FirstSteps(lambda: record(device="cpu" if dev is None else dev,
                                             steps="manual"), self.skip, self.steps, None)
        self.run.open()

    def step_ended(self, global_step: int) -> bool:
        """A step's hook ran with the trainer at ``global_step``; whether the
        recording ended here (then ``timeline`` holds it)."""
        if not self.recording or int(global_step) <= self.last:
            return False  # not recording, or a micro-batch: no optimizer step yet
        self.last = int(global_step)
        self.ended += 1
        self.run.mark()
        if self.run.step(self.ended):
            self.timeline = self.run.timeline
            return True
        return False

    def end(self, error: BaseException | None = None) -> bool:
        """Training ended (``error``: what it raised); whether a recording
        ended here (``timeline``; None when it ended before the first
        recorded step, with a warning that says so)."""
        if not self.recording:
            return False
        tl = self.run.finish(error)
        if tl is None:
            warnings.warn(f"cutimeline recorded no step: training ended after "
                          f"{self.ended} step{'s' * (self.ended != 1)}, and "
                          f"{self.where}(skip={self.skip}) leaves the first {self.skip} "
                          f"unrecorded. Give a smaller skip, or train longer.",
                          RuntimeWarning, stacklevel=3)
            self.run = None
            return False
        self.timeline = tl
        return True

    def save(self, folder: str) -> str | None:
        """Write the recording to ``out_dir`` (or ``folder``, the trainer's);
        its path (None for a disabled recording)."""
        tl = self.timeline
        if tl is None or tl.meta.get("disabled"):
            return None
        folder = self.out_dir or folder
        os.makedirs(folder, exist_ok=True)
        steps = tl.meta.get("steps") or [0, 0]
        rank = rank_meta()
        suffix = f".rank-{rank['rank']}" if rank["world_size"] > 1 else ""
        path = os.path.join(folder, f"cutimeline-step-{steps[0]}-{steps[1]}{suffix}.ctl")
        tl.save(path)
        self.saved = path
        return path

    def resolved(self) -> Device | None:
        """The device to record, read now (``device`` in the module doc)."""
        spec, mapped = self.device, mapped_gpu()
        sim = isinstance(spec, str) and spec.startswith("sim") or isinstance(spec, SimGPU)
        if mapped is not None and (spec == "auto" or isinstance(spec, str) and sim):
            return mapped
        if mapped is not None and isinstance(spec, SimGPU) and spec is not mapped:
            raise CutimelineError(f"{self.where}(device=...) was given another SimGPU than "
                                  f"the one CUDA is mapped to; pass the gpu of "
                                  f"`with gpu.as_cuda():`, or device='auto'.")
        if mapped is None and sim:
            raise CutimelineError(
                f"{self.where}(device={spec!r}) records the simulated GPU CUDA is mapped "
                f"to, and CUDA is not mapped here: make and run the trainer inside "
                f"`with gpu.as_cuda():` (gpu = ctl.SimGPU()), with device=gpu or 'auto'.")
        return recording_device(spec, resolve=True, where=f"{self.where}(device=...)")
