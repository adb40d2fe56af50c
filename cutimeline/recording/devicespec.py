"""Device spellings: the one vocabulary of ``record(device=)``,
``compare(device=)`` and the command line's ``--device``, and the
``Device`` a ``record(device=..., timing=...)`` names.

"auto" is CUDA when available, else none (host rows only); "cpu" is none;
"cuda" and "cuda:N" need CUDA and that GPU (while CUDA is mapped to a
SimGPU, ``SimGPU.as_cuda()``, "auto", "cuda" and "cuda:0" are that SimGPU
and other GPUs an error); "sim" is ``SimGPU("h100")``
and "sim:PROFILE" ``SimGPU(PROFILE)`` ("sim:a100"); a ``torch.device``
is read as its string and a ``Device`` is taken as given. A spelling
outside these, or a ``timing`` the device cannot take, is a
``CutimelineError`` that lists what to give instead.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from ..devices.cuda import CudaDevice
from ..devices.device import Device
from ..devices.sim import SimGPU
from ..devices.sim.cuda import mapped_gpu
from ..devices.sim.roofline import PROFILES
from ..errors import CutimelineError

__all__ = ["DEVICE_FORMS", "device_spelling", "cuda_index", "simulated",
           "recording_device"]

#: the accepted spellings, in words, for error messages
DEVICE_FORMS = ("'auto', 'cpu', 'cuda', 'cuda:N', 'sim' (a simulated H100), "
                "'sim:PROFILE' (" + ", ".join(map(repr, PROFILES)) + ") or a Device "
                "such as ctl.SimGPU('a100')")


def device_spelling(device: Any, where: str) -> str | Device:
    """``device`` in its canonical spelling ("auto", "cpu", "cuda",
    "cuda:N", "sim", "sim:PROFILE"), or the ``Device`` itself. ``where``
    names the option in the error, as the user wrote it:
    "record(device=...)", "--device ..."."""
    if isinstance(device, Device):
        return device
    text = str(device) if isinstance(device, torch.device) else device
    if isinstance(text, str):
        text = text.strip().lower()
        if text in ("auto", "cpu", "cuda", "sim") or re.fullmatch(r"cuda:\d+", text):
            return text
        if text.startswith("sim:"):
            if text[4:].strip() in PROFILES:
                return "sim:" + text[4:].strip()
            names = [repr("sim:" + p) for p in PROFILES]
            raise CutimelineError(
                f"{where.replace('...', repr(device))} names no simulated GPU; give "
                f"{', '.join(names[:-1])} or {names[-1]} ('sim' is 'sim:h100').")
    raise CutimelineError(f"{where.replace('...', repr(device))} is not understood; "
                          f"give {DEVICE_FORMS}.")


def cuda_index(spelling: str, where: str) -> int:
    """The GPU index "cuda" (the current one) or "cuda:N" names, after
    checking that CUDA and that GPU are here."""
    if not torch.cuda.is_available():
        raise CutimelineError(
            f"{where.replace('...', repr(spelling))} needs CUDA, but "
            f"torch.cuda.is_available() is False here; use 'auto' or 'sim' (a "
            f"simulated GPU).")
    index = int(spelling[5:]) if ":" in spelling else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise CutimelineError(
            f"{where.replace('...', repr(spelling))} names a GPU this machine lacks; "
            f"it has {n} (cuda:0..cuda:{n - 1}).")
    return index


def simulated(spelling: str | Device) -> SimGPU | None:
    """The SimGPU a spelling "sim" or "sim:PROFILE" names (a new one), else None."""
    if isinstance(spelling, str) and (spelling == "sim" or spelling.startswith("sim:")):
        return SimGPU(spelling[4:] or "h100")
    return None


def recording_device(device: Any, *, resolve: bool, timing: str = "events",
                     where: str = "record(device=...)") -> Device | None:
    """The Device ``record(device=device, timing=timing)`` records with
    (None: no device); with ``resolve`` False only the checks run. ``where``
    names the option in errors."""
    spec = device_spelling(device, where)
    sim = isinstance(spec, str) and spec.startswith("sim")
    if timing != "events" and (spec == "cpu" or sim or isinstance(spec, Device)
                               and getattr(spec, "timing", "events") != timing):
        raise CutimelineError(
            f"record(timing={timing!r}) applies to the CUDA device record() makes, "
            f"not to device={device!r}; give device='cuda' (or 'auto'), or a "
            f"CudaDevice(timing={timing!r}).")
    if isinstance(spec, Device):
        return spec
    if not resolve or spec == "cpu":
        return None
    if sim:
        return simulated(spec)
    mapped = mapped_gpu()
    if mapped is not None:  # CUDA is a SimGPU's now (as_cuda): its only GPU, cuda:0
        if spec not in ("auto", "cuda", "cuda:0"):
            raise CutimelineError(
                f"{where.replace('...', repr(device))}: CUDA is mapped to a simulated "
                f"GPU here (SimGPU.as_cuda()), which is cuda:0; give 'auto', 'cuda' or "
                f"'cuda:0', or the SimGPU itself.")
        return mapped
    if spec == "auto":
        return CudaDevice(timing=timing) if torch.cuda.is_available() else None
    return CudaDevice(cuda_index(spec, where), timing=timing)
