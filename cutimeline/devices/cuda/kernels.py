"""The globaltimer kernels of ``kernels/*.cu`` as Python calls: Stamper, spin, probe.

Three one-thread kernels read ``%globaltimer``, the device-wide nanosecond
clock that CUDA events sample too:

- ``stamp.cu`` — :class:`Stamper` writes (globaltimer, clock64, SM id) into
  slot i of a device buffer, in stream order: a timestamp of the point a
  stream has reached, without an event and without a sync.
- ``spin.cu`` — :func:`spin` busy-waits a given number of globaltimer
  nanoseconds: GPU work of known duration, for ground-truth checks.
- ``probe.cu`` — :func:`probe_granularity` measures how often globaltimer
  updates, which bounds how precisely stamps and spins place time.

Each kernel is compiled by ``loader.py`` and launched here through CuPy on
a device named by None (torch's current one), an index, "cuda:N" or a
torch.device, and on torch's current stream or a stream given as a
``torch.cuda.Stream``, a ``cupy`` stream or a raw ``cudaStream_t`` handle.
Buffers are torch tensors; :meth:`Stamper.as_cupy` hands out a CuPy view of
the same memory (DLPack).

CuPy is optional: importing this module needs neither CuPy nor CUDA. The
first function that needs them raises a :class:`CutimelineError` saying what
to install.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CutimelineError
from .loader import compiled, import_cupy, require_cuda

__all__ = ["MAX_SPIN_NS", "Stamper", "Stamps", "Granularity", "spin", "probe_granularity"]

#: longest spin accepted, in ns: the GPU cannot be interrupted while a spin
#: runs, so a typo in the duration must not hang it for hours
MAX_SPIN_NS = 60 * 10**9

# columns of a stamp buffer (int64, shape [slots, 3])
_GLOBALTIMER, _CLOCK, _SM = 0, 1, 2
_INT32_MAX = int(np.iinfo(np.int32).max)


def _check_int(name: str, value: Any, low: int, high: int,
               why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not low <= value <= high:
        raise CutimelineError(
            f"{name}={value!r} is not an integer in {low}..{high}{why}.")


def _check_slot(name: str, slot: int, slots: int, allow_none: bool) -> None:
    if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)):
        raise CutimelineError(f"{name}={slot!r} is not an integer slot index.")
    if allow_none and slot == -1:
        return
    if not 0 <= slot < slots:
        also = " or -1 for none" if allow_none else ""
        raise CutimelineError(
            f"{name}={slot} is outside the stamp buffer; use 0..{slots - 1}"
            f"{also}, or make a Stamper with more slots.")


# ------------------------------------------------------------- launching --

def _device_index(device: Any) -> int:
    """A CUDA device index from None (torch's current device), an int, a
    string such as "cuda:1" or a torch.device."""
    import torch
    require_cuda()
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
        self._cupy = import_cupy()
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


# ---------------------------------------------------------------- stamps --

@dataclass(frozen=True, eq=False)  # eq on arrays would be ambiguous
class Stamps:
    """What a :class:`Stamper`'s slots hold; -1 where a slot was not written.

    ``globaltimer_ns`` is device-wide nanoseconds (comparable across streams
    and SMs); ``clock`` is the SM's cycle counter, comparable only between
    slots with the same ``sm``.
    """
    globaltimer_ns: np.ndarray
    clock: np.ndarray
    sm: np.ndarray

    @property
    def written(self) -> np.ndarray:
        """Mask of slots a stamp (or spin) wrote."""
        return self.sm >= 0


class Stamper:
    """A device buffer of ``slots`` stamp slots on one CUDA device.

    ``stamp(i)`` enqueues a one-thread kernel on torch's current stream (or
    ``stream``) that writes (globaltimer ns, clock64, SM id) into slot i when
    the stream reaches it; nothing is read back until :meth:`read`. Keep the
    Stamper alive until ``read()``: its buffer is torch memory, which pending
    stamps on other streams would otherwise write into after it is reused.
    Making one synchronizes the device, or with ``stream`` (a
    ``torch.cuda.Stream`` kept for the purpose) only that stream.
    """

    def __init__(self, slots: int, device: Any = None, *,
                 stream: Any = None) -> None:
        import torch
        _check_int("slots", slots, 1, _INT32_MAX, " (the kernel's slot index "
                   "is an int32)")
        self.device = _device_index(device)
        self.slots = int(slots)
        self._kernel = compiled("stamp", self.device)
        self._launch = _launcher(self.device)
        # Stamps may go to any stream, so the fill must be done before the
        # first of them can run: by default the whole device is synchronized.
        # With ``stream`` (a torch.cuda.Stream the caller keeps for this) the
        # buffer is allocated and filled there and only that stream is
        # waited for, so work queued on other streams is not drained; the
        # caching allocator hands that stream only memory it used itself.
        on = f"cuda:{self.device}"
        if stream is None:
            self.buffer = torch.full((self.slots, 3), -1, dtype=torch.int64, device=on)
            torch.cuda.synchronize(self.device)
        else:
            if not isinstance(stream, torch.cuda.Stream) or \
                    stream.device_index != self.device:
                raise CutimelineError(
                    f"Stamper(stream={stream!r}) must be a torch.cuda.Stream "
                    f"on cuda:{self.device}, the stamper's device.")
            with torch.cuda.stream(stream):
                self.buffer = torch.full((self.slots, 3), -1, dtype=torch.int64,
                                         device=on)
            # the C method: a recorder's hook on Stream.synchronize must not
            # take this wait for one of the program's
            torch._C._CudaStreamBase.synchronize(stream)
        # Kernel arguments are packed once: a pointer as a 64-bit integer
        # (CuPy passes NumPy scalars by value) and the slot count as int32.
        self._args = (np.uint64(self.buffer.data_ptr()),
                      np.int32(self.slots))

    def stamp(self, slot: int, stream: Any = None) -> None:
        """Enqueue a stamp into ``slot`` on ``stream`` (None: torch's
        current stream)."""
        _check_slot("slot", slot, self.slots, allow_none=False)
        self._launch(self._kernel, (*self._args, np.int32(slot)), stream)

    def _put(self, slot: int, handle: int) -> None:
        """``stamp`` without the checks, on a raw cudaStream_t: the recorder's
        per-op path, which knows its slots are in range."""
        self._launch(self._kernel, (*self._args, np.int32(slot)), handle)

    def read(self) -> Stamps:
        """Wait for the device, then copy every slot to the host."""
        import torch
        torch.cuda.synchronize(self.device)  # stamps may be on any stream
        host = self.buffer.cpu().numpy()
        return Stamps(globaltimer_ns=host[:, _GLOBALTIMER].copy(),
                      clock=host[:, _CLOCK].copy(), sm=host[:, _SM].copy())

    def reset(self) -> None:
        """Mark every slot unwritten (-1) again; waits for the device."""
        import torch
        torch.cuda.synchronize(self.device)
        self.buffer.fill_(-1)
        torch.cuda.synchronize(self.device)

    def as_cupy(self) -> Any:
        """A CuPy view of the buffer (same memory, shape [slots, 3] int64)."""
        return import_cupy().from_dlpack(self.buffer)


# ------------------------------------------------------------------ spin --

def spin(duration_ns: int, *, stamper: Stamper | None = None,
         begin_slot: int = -1, end_slot: int = -1, device: Any = None,
         stream: Any = None) -> None:
    """Enqueue a kernel that busy-waits ``duration_ns`` ns of globaltimer.

    By globaltimer it lasts at least ``duration_ns`` and at most one timer
    update step more; by CUDA events add the launch's own few microseconds.
    With a ``stamper``, its ``begin_slot`` and ``end_slot`` (-1: none) get
    the spin's first and last timer readings. Runs on ``stream`` (None:
    torch's current stream) of ``device`` (None: the stamper's, else torch's
    current device).
    """
    _check_int("duration_ns", duration_ns, 0, MAX_SPIN_NS,
               " (at most 60 s: a spin cannot be interrupted once it runs, "
               "so split longer waits)")
    if stamper is None:
        if begin_slot != -1 or end_slot != -1:
            raise CutimelineError(
                "begin_slot/end_slot were given without a stamper; pass "
                "stamper=Stamper(...) to receive the spin's timer readings.")
        index = _device_index(device)
        args = (np.int64(duration_ns), np.uint64(0), np.int32(0),
                np.int32(-1), np.int32(-1))
    else:
        _check_slot("begin_slot", begin_slot, stamper.slots, allow_none=True)
        _check_slot("end_slot", end_slot, stamper.slots, allow_none=True)
        index = stamper.device
        if device is not None and _device_index(device) != index:
            raise CutimelineError(
                f"device={device!r} differs from the stamper's device "
                f"cuda:{index}; omit device or use a Stamper on that device.")
        args = (np.int64(duration_ns), *stamper._args,
                np.int32(begin_slot), np.int32(end_slot))
    _launcher(index)(compiled("spin", index), args, stream)


# ----------------------------------------------------------------- probe --

@dataclass(frozen=True, eq=False)
class Granularity:
    """How %globaltimer advanced while one thread read it in a loop.

    Steps are in ns. ``typical_step_ns`` is the median step. If
    ``reads_per_step`` is about 1 the loop could not keep up, and the steps
    measure the cost of a read, an upper bound on the update step.
    """
    min_step_ns: int
    typical_step_ns: int
    max_step_ns: int
    reads_per_step: float
    total_reads: int
    steps_ns: np.ndarray

    @property
    def read_limited(self) -> bool:
        """Whether the steps are bounded by read cost, not timer updates."""
        return self.reads_per_step < 2


def probe_granularity(steps: int = 1000, *, max_reads: int = 1 << 24,
                      device: Any = None) -> Granularity:
    """Measure globaltimer's update step on ``device`` (None: current).

    Reads the timer on one GPU thread until it has changed ``steps`` times
    or ``max_reads`` reads were made (so a frozen timer cannot hang the GPU),
    then waits for the result. Takes about ``steps`` update steps (1 ms for
    1000 steps of 1 µs).
    """
    import torch
    _check_int("steps", steps, 1, _INT32_MAX)
    _check_int("max_reads", max_reads, 1, np.iinfo(np.int64).max)
    index = _device_index(device)
    kernel = compiled("probe", index)
    on = f"cuda:{index}"
    step_buf = torch.zeros(steps, dtype=torch.int64, device=on)
    read_buf = torch.zeros(steps, dtype=torch.int64, device=on)
    summary = torch.zeros(3, dtype=torch.int64, device=on)
    args = (np.uint64(step_buf.data_ptr()), np.uint64(read_buf.data_ptr()),
            np.int32(steps), np.int64(max_reads),
            np.uint64(summary.data_ptr()))
    _launcher(index)(kernel, args, None)
    # .cpu() copies on the current stream, after the probe: no device sync
    n, min_step, total = (int(v) for v in summary.cpu().tolist())
    if n == 0:
        raise CutimelineError(
            f"globaltimer did not advance in {total} reads on cuda:{index}; "
            "the GPU's timer looks frozen, so stamp timing cannot be used "
            "there (use timing='events').")
    got = step_buf[:n].cpu().numpy()
    reads = read_buf[:n].cpu().numpy()
    # reads[0] started mid-step, so it says nothing about the step length
    per_step = float(np.median(reads[1:])) if n > 1 else float(reads[0])
    return Granularity(
        min_step_ns=min_step, typical_step_ns=int(np.median(got)),
        max_step_ns=int(got.max()), reads_per_step=per_step,
        total_reads=total, steps_ns=got)
