"""Loading the CUDA kernels: finding ``kernels/*.cu``, importing CuPy, compiling.

The sources are looked for inside the package first (a built wheel installs
``kernels/`` as ``cutimeline._cuda``), then in the source tree. Each is
compiled once per process by ``cupy.RawModule`` (NVRTC; CuPy also caches the
binary on disk). CuPy is optional: importing this module needs neither CuPy
nor CUDA; the first function that needs them raises a
:class:`CutimelineError` saying what to install.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from ...errors import CutimelineError

__all__ = ["KERNELS", "source_dir", "source", "require_cuda", "import_cupy", "compiled"]

#: source file stem -> the ``extern "C"`` entry point it defines
KERNELS = {"stamp": "ctl_stamp", "spin": "ctl_spin", "probe": "ctl_probe"}

# Pinned rather than left to CuPy's default so CuPy's disk-cache key, and the
# dialect the sources are compiled in, do not change with the CuPy version.
_NVRTC_OPTIONS = ("-std=c++14",)

# Where the .cu files are looked for, in order: inside the package, as a built
# wheel installs them (pyproject maps kernels/ to the package cutimeline._cuda);
# then the source tree's kernels/, for a checkout or an editable install.
_SEARCH_PATH = (
    Path(__file__).resolve().parents[2] / "_cuda",
    Path(__file__).resolve().parents[3] / "kernels",
)


# --------------------------------------------------------------- sources --

def source_dir() -> Path:
    """The folder holding ``stamp.cu``, ``spin.cu`` and ``probe.cu``."""
    for folder in _SEARCH_PATH:
        if all((folder / f"{stem}.cu").is_file() for stem in KERNELS):
            return folder
    names = ", ".join(f"{stem}.cu" for stem in KERNELS)
    where = " nor ".join(str(folder) for folder in _SEARCH_PATH)
    raise CutimelineError(
        f"cutimeline's CUDA sources ({names}) are in neither {where}; "
        "reinstall cutimeline (pip install --force-reinstall cutimeline) or "
        "run it from a source checkout that has the kernels/ folder.")


def source(stem: str) -> str:
    """The CUDA C++ text of ``kernels/<stem>.cu``."""
    if stem not in KERNELS:
        raise CutimelineError(
            f"There is no CUDA kernel source {stem!r}; choose one of "
            f"{sorted(KERNELS)}.")
    return (source_dir() / f"{stem}.cu").read_text(encoding="utf-8")


# ------------------------------------------------------- CUDA and CuPy --

def _install_hint() -> str:
    """How to install the CuPy wheel that matches torch's CUDA."""
    import torch
    major = (torch.version.cuda or "").split(".")[0]
    wheel = {"12": "cupy-cuda12x", "13": "cupy-cuda13x"}.get(
        major, "cupy-cuda12x or cupy-cuda13x (matching your CUDA version)")
    hint = f"pip install {wheel}"
    if torch.version.cuda:
        hint += f" (the wheel for torch's CUDA {torch.version.cuda})"
    if wheel == "cupy-cuda12x":
        hint += ", or pip install 'cutimeline[gpu]'"
    return hint


def require_cuda() -> None:
    """Nothing, when torch has CUDA and sees a device; else a
    CutimelineError that says what is missing."""
    import torch
    if torch.version.cuda is None:
        raise CutimelineError(
            "This torch build has no CUDA support (torch.version.cuda is "
            "None), and cutimeline's CUDA kernels need it; install a CUDA "
            "build of torch (see pytorch.org) on a machine with an NVIDIA GPU.")
    if not torch.cuda.is_available():
        raise CutimelineError(
            "No CUDA device is visible to torch (torch.cuda.is_available() is "
            "False), and cutimeline's CUDA kernels need one; run on a machine "
            "with an NVIDIA GPU and driver, and check CUDA_VISIBLE_DEVICES.")


@functools.lru_cache(maxsize=None)
def import_cupy() -> Any:
    """CuPy, once CUDA and CuPy are both known to work; else a
    CutimelineError that says what to install."""
    require_cuda()
    try:
        import cupy
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "cupy":
            raise CutimelineError(
                "CuPy is not installed, and cutimeline's CUDA kernels "
                f"(globaltimer stamps, calibrated spin) need it: "
                f"{_install_hint()}.") from exc
        raise CutimelineError(
            f"CuPy is installed but could not be imported ({exc}); install "
            f"the wheel that matches your CUDA: {_install_hint()}.") from exc
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: driver too old, no device
        raise CutimelineError(
            f"CuPy is installed but cannot use the GPU ({exc}); install the "
            f"CuPy wheel that matches the CUDA driver: {_install_hint()}."
        ) from exc
    return cupy


_compile_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _module(stem: str) -> Any:
    """The RawModule for ``kernels/<stem>.cu`` (compiled lazily, per device)."""
    return import_cupy().RawModule(code=source(stem), options=_NVRTC_OPTIONS)


@functools.lru_cache(maxsize=None)
def compiled(stem: str, device: int) -> Any:
    """The entry point of ``<stem>.cu``, compiled and loaded on ``device``.

    Compile errors surface here, as a CutimelineError, rather than at the
    first launch inside a recording.
    """
    cupy = import_cupy()
    with _compile_lock, cupy.cuda.Device(device):
        try:
            # CuPy compiles (or loads its disk cache) for the current device
            # in get_function (CuPy >= 14) or on first use of .kernel
            fn = _module(stem).get_function(KERNELS[stem])
            fn.kernel
        except Exception as exc:  # CompileException, missing NVRTC library
            raise CutimelineError(
                f"Compiling {source_dir() / (stem + '.cu')} with CuPy failed "
                f"({type(exc).__name__}: {exc}); check that CuPy's CUDA "
                f"version matches the driver and that its NVRTC library is "
                f"installed: {_install_hint()}.") from exc
    return fn
