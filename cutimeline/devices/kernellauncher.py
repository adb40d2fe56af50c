"""Launching one-thread kernels through CuPy on a given CUDA device and stream.

A device is named by None (torch's current one), an index, "cuda:N" or a
torch.device; a stream by None (torch's current one), a
``torch.cuda.Stream``, a ``cupy`` stream or a raw ``cudaStream_t`` handle.
Nothing here is public: ``kernels.py`` launches through it.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import CutimelineError
from .kernelloader import _cupy, _require_cuda

__all__: list[str] = []


def _device_index(device: Any) -> int:
    """A CUDA device index from None (torch's current device), an int, a
    string such as "cuda:1" or a torch.device."""
    import torch
    _require_cuda()
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, bool) or not isinstance(
            device, (int, str, torch.device)):
        raise CutimelineError(
            f"device={device!r} is not a CUDA device; pass an index, "
            "'cuda:N' or a torch.device.")
    dev = torch.device("cuda", device) if isinstance(device, int) \
        else torch.device(device)
    if dev.type != "cuda":
        raise CutimelineError(
            f"device={device!r} is not a CUDA device; the globaltimer kernels "
            "run only on CUDA, so pass 'cuda' or 'cuda:N'.")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < torch.cuda.device_count():
        raise CutimelineError(
            f"device={device!r} does not exist: torch sees "
            f"{torch.cuda.device_count()} CUDA device(s).")
    return index


def _stream_handle(stream: Any, device: int) -> int:
    """The raw cudaStream_t of ``stream``; None means torch's current stream
    on ``device``."""
    import torch
    if stream is None:
        return torch.cuda.current_stream(device).cuda_stream
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy Stream
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise CutimelineError(
        f"stream={stream!r} is not a CUDA stream; pass a torch.cuda.Stream, "
        "a cupy stream, a raw cudaStream_t handle (int) or None for torch's "
        "current stream.")


class _ProtocolStream:
    """A raw cudaStream_t in the CUDA stream protocol, which CuPy >= 14 takes
    (Stream.from_external) in place of the deprecated ExternalStream."""
    __slots__ = ("handle",)

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


class _Launcher:
    """Launches one-thread kernels on one device. Wrapping a stream handle
    for CuPy costs an object, so wrappers are kept per handle."""

    def __init__(self, device: int) -> None:
        self._cupy = _cupy()
        self.device = device
        self._streams: dict[int, Any] = {}

    def _wrap(self, handle: int) -> Any:
        stream_type = self._cupy.cuda.Stream
        if hasattr(stream_type, "from_external"):
            return stream_type.from_external(_ProtocolStream(handle))
        return self._cupy.cuda.ExternalStream(handle, self.device)

    def __call__(self, kernel: Any, args: tuple, stream: Any) -> None:
        handle = _stream_handle(stream, self.device)
        # CuPy launches on its current device and stream: make them the
        # caller's for the duration of this launch only. A Device object
        # keeps its stack of previous devices on itself, so one shared by
        # threads could restore another thread's device: a fresh one each
        # time the device must change.
        if self._cupy.cuda.runtime.getDevice() == self.device:
            self._launch(kernel, args, handle)
        else:
            with self._cupy.cuda.Device(self.device):
                self._launch(kernel, args, handle)

    def _launch(self, kernel: Any, args: tuple, handle: int) -> None:
        wrapped = self._streams.get(handle)
        if wrapped is None:
            wrapped = self._streams[handle] = self._wrap(handle)
        with wrapped:  # CuPy's current stream is per thread
            kernel((1,), (1,), args)


@functools.lru_cache(maxsize=None)
def _launcher(device: int) -> _Launcher:
    return _Launcher(device)
