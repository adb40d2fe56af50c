"""Device memory per op: the device's memory meter read after each op that
may change it, for the Timeline's ``memory`` table (``record(memory=True)``).

A reading follows every op that launched device work (``Session.launch``)
and every allocation on the device that launches none (``empty`` and its
kin, the rule ``RULE_ALLOC``): bytes the op allocated, bytes freed since the
previous reading (a tensor the program drops is freed between ops, so its
bytes go to the next reading) and bytes in use after it, at the op's host
end time. Readings that changed nothing make no row.

The meter is the device's (``Device.memory_meter``): on CUDA the caching
allocator's cumulative counters (``CudaDevice``: exact per op, since an
op's allocations happen inside it; ``in_use`` is all the device's
allocated memory, the program's tensors from before the recording
included); on SimGPU the storages of the tensors its ops made
(``devices/sim/memory.py``: exact; ``in_use`` counts only storages made
while recording). Without one (a recording on the CPU) ``memory=True`` is
an error.

What ``memory=True`` costs per launching op: on SimGPU most of it is
torch's weak reference to each new storage and its callback
(``benchmarks/RESULTS.md``, recorder options); on CUDA one read of the
allocator's statistics (``torch._C._cuda_memoryStats``). Off, the launch
path tests one attribute.
"""

from __future__ import annotations

import threading
from typing import Any

from ...errors import CutimelineError

__all__ = ["MemoryLog"]


class MemoryLog:
    """Readings of one device's memory meter: ``rows`` of (seq, host_ns,
    allocated, freed, in_use), in the order they were read."""

    def __init__(self, device: Any):
        meter = None if device is None else device.memory_meter()
        if meter is None:
            what = "no device (device='cpu')" if device is None else repr(device)
            raise CutimelineError(
                f"record(memory=True) reads a device's memory, and this recording has "
                f"{what}, whose memory cannot be read; record on a GPU or a "
                f"ctl.SimGPU, or leave memory=False.")
        self.meter, self.index = meter, device.index
        self.rows: list[tuple[int, int, int, int, int]] = []
        # a reading and its row are one step: rows stay in reading order
        # (re-entrant: a finalizer the reading sets off may not wait on it)
        self._lock = threading.RLock()

    def read(self, seq: int, host_ns: int, func: Any, args: tuple, kwargs: dict,
             out: Any) -> None:
        """Read the meter after op ``seq`` (``func``, which returned ``out``)
        ended at ``host_ns``; a row if memory changed."""
        with self._lock:
            allocated, freed, in_use = self.meter.read(func, args, kwargs, out)
            if allocated or freed:
                self.rows.append((seq, host_ns, allocated, freed, in_use))

    def close(self) -> None:
        """The recording is over: the meter lets go of what it watches."""
        self.meter.close()
