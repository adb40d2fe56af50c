"""Device specs: the ``Device`` a ``record(device=..., timing=...)`` names.

"auto" is CUDA when available, else none (host rows only); "cpu" is none;
"cuda" and "cuda:N" need CUDA and that GPU; a ``Device`` is taken as given.
A spec that names none of these, or a ``timing`` the device cannot take,
is a ``CutimelineError`` that says what to give instead.
"""

from __future__ import annotations

from typing import Any

import torch

from ..devices.device import Device
from ..errors import CutimelineError


def _device(device: Any, *, resolve: bool, timing: str = "events") -> Device | None:
    if timing != "events" and (device == "cpu" or isinstance(device, Device)
                               and getattr(device, "timing", "events") != timing):
        raise CutimelineError(
            f"record(timing={timing!r}) applies to the CUDA device record() makes, "
            f"not to device={device!r}; give device='cuda' (or 'auto'), or a "
            f"CudaDevice(timing={timing!r}).")
    if isinstance(device, Device):
        return device
    import re
    m = re.fullmatch(r"cuda(?::(\d+))?", device) if isinstance(device, str) else None
    if not (m or device in ("auto", "cpu")):
        raise CutimelineError(
            f"record(device={device!r}) is not understood; give 'auto', 'cpu', "
            f"'cuda', 'cuda:N' or a Device such as ctl.SimGPU().")
    if not resolve or device == "cpu":
        return None
    from ..devices.cuda import CudaDevice
    if device == "auto":
        return CudaDevice(timing=timing) if torch.cuda.is_available() else None
    if not torch.cuda.is_available():
        raise CutimelineError(
            f"record(device={device!r}) needs CUDA, but torch.cuda.is_available() "
            f"is False here; use device='auto', 'cpu' or a ctl.SimGPU().")
    index = int(m.group(1)) if m.group(1) else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise CutimelineError(
            f"record(device={device!r}) names a GPU this machine lacks; it has "
            f"{torch.cuda.device_count()} (cuda:0..cuda:{torch.cuda.device_count() - 1}).")
    return CudaDevice(index, timing=timing)
