"""CudaDevice's event clock: a pool of CUDA timing events that never makes the host wait, segment anchors, chained reads.

Events are taken from a pool, never created per op. ``cudaEventElapsedTime``
gives float32 milliseconds, whose resolution coarsens with distance, so
every event is read against the newest segment anchor and the anchors
are chained (see ``CudaDevice``, whose lock, torch.cuda calls and
recording state ``EventClock`` works on).

No call here waits for the device: events are only *queried*
(``cudaEventQuery``) and read once complete. While fewer than half a
chunk are free, each event taken reads up to ``READS_PER_TAKE`` completed
ones, oldest first per stream (a stream's events complete in order), at
most ``QUERIES_PER_TAKE`` queries: a small constant per launch, which
``measure_launch_ns`` includes. When the device is far behind the pool
runs dry and grows by a chunk instead of waiting; that refill is the one
burst of host time the pool costs, kept as a *pause*
(``meta["cuda"]["pool_pauses"]``) and, through ``on_pause``, a USER span
named ``POOL_SPAN``, so analysis can tell the recorder's own time from
the program's.

The event tick is measured at start (``_measure_tick``): a burst of
events queued behind a short hold of an idle stream, read against the
first; the smallest nonzero step is one tick, floored at
``EVENT_TICK_NS``.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np

from ...timeline.gpus import EVENT_TICK_NS as CUDA_EVENT_TICK_NS
from ...timeline.schema import NONE, EventKind

__all__ = ["EVENT_TICK_NS", "EventClock", "POOL_SPAN"]

#: the tick of CUDA's event clock (``timeline.gpus.EVENT_TICK_NS``, 0.5 µs):
#: the floor of the tick ``_measure_tick`` finds
EVENT_TICK_NS = CUDA_EVENT_TICK_NS
#: the name of the USER span a pool refill is shown as
POOL_SPAN = "cutimeline event pool"
#: completed events read per event taken, at most, while the pool is low:
#: more than one, so reading outpaces taking whenever the device keeps up
READS_PER_TAKE = 2
#: event queries per event taken, at most (each ~1 µs on a GPU)
QUERIES_PER_TAKE = 3
#: events in the tick burst, and how long the stream is held before it (ns)
TICK_BURST, TICK_HOLD_NS = 64, 1_000_000


class EventClock:
    """The CUDA-event half of ``CudaDevice`` (mixed into it): the event pool,
    the segment anchors, and the raw ns of every point chained from them."""

    #: called with (begin_ns, end_ns) after each pool refill (see the module doc)
    on_pause: Callable[[int, int], None] | None = None

    def _reset_pool(self) -> None:
        """Fresh per-recording state (the lock is held)."""
        self._pending: dict[int, tuple] = {}   # index -> (event, anchor) unread
        self._read: dict[int, float] = {}      # index -> ms after its anchor
        self._anchors: list[tuple[int, Any]] = []  # (index, event)
        self._anchor_done: list[bool] = []     # anchor k has run (queried once true)
        # stream -> unread indices in the order they were recorded there
        self._queues: dict[int, collections.deque] = {}
        self._pauses: list[tuple[int, int]] = []
        self._reads_inline = 0                 # events read by the per-take upkeep
        self._tick_ns, self._tick_measured_ns = EVENT_TICK_NS, None

    def _grow(self, n: int) -> None:
        """Add ``n`` events to the pool (the lock is held)."""
        new = self._api.new_event
        self._free.extend(new() for _ in range(n))
        self._created += n

    def _take(self) -> Any:
        free = self._free
        if len(free) < self.chunk // 2 and not self.captures:
            self._upkeep()
        while True:  # other threads pop without the lock: retry until one is ours
            try:
                return free.pop()
            except IndexError:
                self._refill()

    def _upkeep(self) -> None:
        """Read a few completed events and put them back, if no other
        thread is at it (never wait for the lock on the op path)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._reads_inline += self._reap(READS_PER_TAKE, QUERIES_PER_TAKE)
        finally:
            self._lock.release()

    def _refill(self) -> None:
        """The pool is dry: read what has completed, and grow by a chunk if
        that leaves it low; never wait for the device. Its host time is a
        pause (see the module doc)."""
        t0 = self._now()
        with self._lock:
            if self._free:
                return  # another thread refilled it
            if not self.captures:
                self._reap(self.chunk, self.chunk)
            if len(self._free) < self.chunk // 4:
                self._grow(self.chunk)
        t1 = self._now()
        self._pauses.append((t0, t1))
        if self.on_pause is not None:  # after our lock is released (unless an anchor holds it)
            self.on_pause(t0, t1)

    def _reap(self, reads: int, queries: int) -> int:
        """Read up to ``reads`` completed events, oldest first per stream,
        with at most ``queries`` queries, and return them to the pool (the
        lock is held); how many were read."""
        api, pending, done = self._api, self._pending, self._anchor_done
        n = 0
        for q in list(self._queues.values()):
            while q:
                if n >= reads or queries <= 0:
                    return n
                i = q[0]
                ev, k = pending[i]
                if not done[k]:
                    queries -= 1
                    if not api.query(self._anchors[k][1]):
                        break  # read against an anchor that has not run yet
                    done[k] = True
                queries -= 1
                if not api.query(ev):
                    break  # the rest of this stream is later still
                self._read[i] = api.elapsed_ms(self._anchors[k][1], ev)
                q.popleft()
                del pending[i]
                self._free.append(ev)
                n += 1
        return n

    def _add_pending(self, i: int, ev: Any, k: int, stream: int) -> None:
        """Event ``ev`` of point ``i`` (anchor ``k``) is unread; in the
        stream's queue only after it is pending (a reaper may look at once)."""
        self._pending[i] = (ev, k)
        q = self._queues.get(stream)
        if q is None:
            q = self._queues.setdefault(stream, collections.deque())
        q.append(i)

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
            self._anchor_done.append(False)
            self._rows.append((i, stream, EventKind.ANCHOR, NONE, now, len(self._anchors) - 1))
            self._anchor_ns = now
            if self._stamps:
                self._stamp(i, stream)

    def _measure_tick(self, stream: int) -> None:
        """The event clock's tick (ns): a burst of events from the pool,
        queued behind a short hold of ``stream`` (idle: the pings just
        drained it) so that they run back to back, read against the first.
        Steps between neighbours are then 0 or one tick; the smallest
        nonzero one is the tick, floored at ``EVENT_TICK_NS`` (a step below
        it is the device's spacing of the events, not its clock's)."""
        api = self._api
        with self._lock:
            n = min(TICK_BURST, len(self._free))
            if n < 2:
                return
            burst = [self._free.pop() for _ in range(n)]
        try:
            api.hold(self.index, TICK_HOLD_NS)
            for ev in burst:
                api.record(ev, stream, self.index)
            api.synchronize(self.index)
            ns = np.rint([api.elapsed_ms(burst[0], ev) * 1e6 for ev in burst])
        finally:
            self._free.extend(burst)
        steps = np.diff(ns)
        steps = steps[steps > 0]
        self._tick_measured_ns = int(steps.min()) if len(steps) else None
        self._tick_ns = max(EVENT_TICK_NS, self._tick_measured_ns or 0)

    def _pool_meta(self) -> dict[str, Any]:
        """What the pool did, for ``meta["cuda"]``."""
        return {"events_created": self._created, "pool_pauses": [list(p) for p in self._pauses],
                "pool_pause_ns": int(sum(b - a for a, b in self._pauses)),
                "events_read_inline": self._reads_inline,
                "event_tick_ns": self._tick_ns, "event_tick_measured_ns": self._tick_measured_ns}

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
