"""CudaDevice's stamp clock: globaltimer stamps in chunked device buffers, read at harvest.

Each point (BEGIN, END, PING, anchor) launches the one-thread stamp kernel
(``kernels.Stamper``, needs CuPy) that writes ``%globaltimer`` into the
point's slot; a full buffer gets a new chunk. ``StampClock`` is a part of
``CudaDevice``: it works on the device's lock, its torch.cuda calls
(``_api``) and its recording state.
"""

from __future__ import annotations

import numpy as np

from ...errors import CutimelineError

__all__ = ["GLOBALTIMER_STEP_NS", "StampClock"]

#: the update step of %globaltimer: 1 µs on the GPUs reported so far (32 ns
#: while some profilers run); an upper bound, kernels.probe_granularity
#: measures it (scripts/gpu_check.py part b)
GLOBALTIMER_STEP_NS = 1000


class StampClock:
    """The globaltimer half of ``CudaDevice`` (mixed into it): stamping a
    point into its slot, and reading every point's stamp back."""

    def _stamp(self, i: int, stream: int) -> None:
        """Stamp point ``i`` into its slot, adding a chunk if it is the
        first point past the buffer."""
        chunk, slot = divmod(i, self.stamp_slots)
        if chunk >= len(self._stampers):
            with self._lock:
                while chunk >= len(self._stampers):
                    t0 = self._now()
                    self._stampers.append(self._api.new_stamper(self.stamp_slots,
                                                                self.index))
                    self._stamp_wait_ns += self._now() - t0
        self._api.stamp(self._stampers[chunk], slot, stream, self.index)

    def _read_stamps(self, index: np.ndarray) -> np.ndarray:
        """Globaltimer ns of the points ``index`` (read after the device was
        synchronized); point i's stamp is in slot i of the chunked buffer."""
        got = np.concatenate([self._api.read_stamps(s) for s in self._stampers])
        got = got[index].astype(np.int64)
        missing = np.flatnonzero(got < 0)
        if len(missing):
            raise CutimelineError(
                f"{len(missing):,} of {len(got):,} globaltimer stamps were never written "
                f"(the first is point {index[missing[0]]}), so the recording cannot be "
                f"timed by stamps; record with timing='events', and report this.")
        return got
