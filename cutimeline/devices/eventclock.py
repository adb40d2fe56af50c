"""CudaDevice's event clock: a pool of CUDA timing events, segment anchors, chained reads.

Events are taken from a pool grown in chunks (completed ones are read and
put back before it grows), never created per op. ``cudaEventElapsedTime``
gives float32 milliseconds, whose resolution coarsens with distance, so every
event is read against the newest segment anchor and the anchors are chained
(see ``CudaDevice``). ``EventClock`` is a part of ``CudaDevice``: it works on
the device's lock, its torch.cuda calls (``_api``) and its recording state.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..timeline.schema import NONE, EventKind

__all__ = ["EVENT_TICK_NS", "EventClock"]

#: the tick of CUDA's event clock: cudaEventElapsedTime has "a resolution
#: of around 0.5 microseconds" (CUDA runtime API reference)
EVENT_TICK_NS = 500


class EventClock:
    """The CUDA-event half of ``CudaDevice`` (mixed into it): the event pool,
    the segment anchors, and the raw ns of every point chained from them."""

    def _grow(self, n: int) -> None:
        """Add ``n`` events to the pool (the lock is held)."""
        new = self._api.new_event
        self._free.extend(new() for _ in range(n))
        self._created += n

    def _take(self) -> Any:
        while True:  # other threads pop without the lock: retry until one is ours
            try:
                return self._free.pop()
            except IndexError:
                with self._lock:
                    if not self._free and not self.captures:
                        self._reap()
                    if len(self._free) < self.chunk // 4:
                        self._grow(self.chunk)

    def _reap(self) -> None:
        """Read the completed events among the oldest unread ones and return
        them to the pool (the lock is held)."""
        api, anchors, read = self._api, self._anchors, self._read
        done_anchor: dict[int, bool] = {}
        for i, (ev, k) in list(itertools.islice(self._pending.items(), 4 * self.chunk)):
            a = anchors[k][1]
            if k not in done_anchor:
                done_anchor[k] = api.query(a)
            if done_anchor[k] and api.query(ev):
                read[i] = api.elapsed_ms(a, ev)
                del self._pending[i]
                self._free.append(ev)

    def _fresh(self, stream: int) -> int:
        """Now, after laying a new anchor if the newest is too old."""
        now = self._now()
        if self._events and now - self._anchor_ns >= self.anchor_interval_ns:
            self._anchor(stream, now)
        return now

    def _anchor(self, stream: int, now: int) -> None:
        with self._lock:
            if self._anchors and now - self._anchor_ns < self.anchor_interval_ns:
                return  # another thread laid it
            ev = self._take()
            self._api.record(ev, stream, self.index)
            i = next(self._ids)
            self._anchors.append((i, ev))
            self._rows.append((i, stream, EventKind.ANCHOR, NONE, now, len(self._anchors) - 1))
            self._anchor_ns = now
            if self._stamps:
                self._stamp(i, stream)

    def _read_events(self, rows: np.ndarray, anchor_of: np.ndarray) -> np.ndarray:
        """Raw ns of every point from its event, chained from the anchors."""
        api = self._api
        # chain the anchors: each link is read over ~anchor_interval_ns only
        chain = np.zeros(len(self._anchors), np.int64)
        for k in range(1, len(self._anchors)):
            ms = api.elapsed_ms(self._anchors[k - 1][1], self._anchors[k][1])
            chain[k] = chain[k - 1] + round(ms * 1e6)
        rel = np.zeros(len(rows), np.int64)
        for i, (ev, k) in self._pending.items():
            self._read[i] = api.elapsed_ms(self._anchors[k][1], ev)
        for i, ms in self._read.items():
            rel[i] = round(ms * 1e6)
        return chain[anchor_of] + rel
