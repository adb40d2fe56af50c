"""The few torch.cuda (and, for stamps, CuPy) calls ``CudaDevice`` makes.

They sit behind one object so that CPU tests stand a fake in
(``gpu._cuda_api``) and drive ``CudaDevice`` without a GPU. Nothing here
is public. torch is imported where it is used: ``import
cutimeline.devices.cuda`` loads neither torch nor CuPy.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .kernels import Stamper
from .loader import compiled

__all__: list[str] = []


class TorchCuda:
    """torch.cuda as CudaDevice uses it: events, streams, synchronize; and
    globaltimer stamps through ``kernels.Stamper`` (CuPy)."""

    def __init__(self) -> None:
        import torch
        self.torch = torch
        self.now = time.perf_counter_ns
        self._capturing = torch._C._cuda_isCurrentStreamCapturing
        self._get_device = torch._C._cuda_getDevice
        self._get_stream = torch._C._cuda_getCurrentStream
        self._record = torch._C._CudaEventBase.record  # skips Event.record's lookups
        # the C method: the recorder's hooks wrap torch.cuda.Event.query to
        # note a user's query that returns True, and ours are no user's
        self._query = torch._C._CudaEventBase.query
        self._streams: dict[tuple[int, int], Any] = {}
        self._handles: dict[tuple[int, int], int] = {}
        self._side: dict[int, Any] = {}

    def current_device(self) -> int:
        return self.torch.cuda.current_device()

    def capturing(self, index: int) -> bool:
        """Whether device ``index``'s current stream is capturing a graph
        (the check looks at the current device's stream: switch if needed)."""
        if self._get_device() == index:
            return self._capturing()
        with self.torch.cuda.device(index):
            return self._capturing()

    def device_name(self, index: int) -> str:
        return self.torch.cuda.get_device_name(index)

    def current_stream(self, index: int) -> int:
        return self._get_stream(index)[0]

    def new_event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def _stream(self, stream: int, index: int) -> Any:
        # keyed by device too: stream ids repeat across devices
        s = self._streams.get((stream, index))
        if s is None:
            s = self._streams[stream, index] = self.torch.cuda.Stream(
                stream_id=stream, device_index=index, device_type=1)
        return s

    def record(self, event: Any, stream: int, index: int) -> None:
        self._record(event, self._stream(stream, index))

    def stream_id(self, stream: Any, index: int) -> int:
        return self.current_stream(index) if stream is None else stream.stream_id

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b)

    def query(self, event: Any) -> bool:
        return self._query(event)

    def hold(self, index: int, ns: int) -> None:
        """Keep device ``index``'s current stream busy for at least about
        ``ns`` (torch's spin kernel; 2 cycles per ns is a 2 GHz clock, so
        slower clocks hold longer), so that what is queued next runs back
        to back."""
        with self.torch.cuda.device(index):
            self.torch.cuda._sleep(2 * int(ns))

    def synchronize(self, index: int) -> None:
        with self.torch.cuda.device(index):
            self.torch._C._cuda_synchronize()

    def memory_counters(self, index: int) -> tuple[int, int, int]:
        """The caching allocator's bytes allocated, freed (both cumulative)
        and in use on device ``index``."""
        a = self.torch._C._cuda_memoryStats(index)["allocated_bytes"]["all"]
        return a["allocated"], a["freed"], a["current"]

    # -- globaltimer stamps -------------------------------------------------------
    def check_stamps(self, index: int) -> None:
        """Compile the stamp kernel now; a CutimelineError saying what to
        install when CuPy (or its NVRTC) is missing."""
        compiled("stamp", index)

    def new_stamper(self, slots: int, index: int) -> Any:
        """A ``Stamper`` of ``slots`` slots, allocated and filled on a side
        stream of our own, so that making one while recording (the buffer
        grows) waits for that stream only, never for the program's work.
        No dispatch mode sees its fill (ours would record it, re-entering)."""
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            side = self._side.get(index)
            if side is None:
                side = self._side[index] = self.torch.cuda.Stream(index)
            return Stamper(slots, index, stream=side)

    def stamp(self, stamper: Any, slot: int, stream: int, index: int) -> None:
        """Enqueue a stamp into ``slot`` on the stream with torch id ``stream``."""
        handle = self._handles.get((stream, index))
        if handle is None:
            handle = self._handles[stream, index] = self._stream(stream, index).cuda_stream
        stamper._put(slot, handle)

    def read_stamps(self, stamper: Any) -> np.ndarray:
        """Globaltimer ns of every slot (-1 unwritten); waits for the device."""
        return stamper.read().globaltimer_ns
