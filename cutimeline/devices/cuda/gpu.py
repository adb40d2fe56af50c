"""CudaDevice: one CUDA GPU behind the Device interface, timed by events, stamps or both.

The recorder's per-op calls (``begin``, ``end``, ``note_sync``) land here;
the event pool and anchors are in ``eventclock.py``, the globaltimer stamps
in ``stampclock.py``, and the torch.cuda calls themselves behind one object
(``api.py``) that CPU tests replace by patching ``_cuda_api`` here.
With ``record(memory=True)`` the caching allocator's counters are read
after each launch (``CudaMemory``; through the api's ``memory_counters``
when it has one, as fakes do).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import numpy as np

from ...errors import CutimelineError
from ...timeline.schema import NONE, EventKind
from ..clockread import read_error_ns
from ..device import Device, Harvest
from .api import TorchCuda
from .eventclock import EVENT_TICK_NS, EventClock
from .stampclock import GLOBALTIMER_STEP_NS, StampClock

__all__ = ["CudaDevice", "CudaMemory", "TIMINGS"]

#: how CudaDevice times device work (see its docstring)
TIMINGS = ("events", "stamps", "both")


def _cuda_api() -> Any:
    """The torch.cuda calls CudaDevice makes; CPU tests stand a fake in."""
    return TorchCuda()


def _memory_counters(index: int) -> tuple[int, int, int]:
    """The caching allocator's bytes on GPU ``index``: allocated and freed
    since the process began (or its last reset of them), and in use now."""
    import torch
    a = torch._C._cuda_memoryStats(index)["allocated_bytes"]["all"]
    return a["allocated"], a["freed"], a["current"]


class CudaMemory:
    """The memory meter of a CUDA GPU (``Device.memory_meter``): the
    differences of the caching allocator's cumulative counters between two
    reads, exact per op (its allocations happen inside it; its frees, and
    the program's, between ops go to the next read); in use: all of the
    device's allocated bytes, tensors from before the recording included.
    A reset of the counters (``torch.cuda.reset_accumulated_memory_stats``)
    while recording reads as nothing allocated or freed once."""

    def __init__(self, counters: Any):
        self._counters = counters
        self._allocated, self._freed, _ = counters()

    def read(self, func: Any, args: tuple, kwargs: dict, out: Any) -> tuple[int, int, int]:
        allocated, freed, in_use = self._counters()
        da, df = allocated - self._allocated, freed - self._freed
        self._allocated, self._freed = allocated, freed
        return max(da, 0), max(df, 0), in_use

    def close(self) -> None:
        """Nothing to let go of."""


class _Newest(threading.local):
    """Per thread: the newest event it recorded, overall and per stream. A
    sync covers what its own thread recorded before it blocked; events other
    threads record meanwhile may be enqueued after the sync began."""

    def __init__(self) -> None:
        self.last = NONE
        self.on: dict[int, int] = {}


class CudaDevice(EventClock, StampClock, Device):
    """One CUDA GPU through ``torch.cuda.Event(enable_timing=True)``.

    Events come from a pool grown in chunks of ``chunk``, never created
    per op, and are recorded on the op's current stream. The host never
    waits for the pool: completed events are found by query and read a few
    per launch; a device far behind makes the pool grow, and each growth is
    a pause the recorder shows as its own (``eventclock.py``). The event
    clock's tick is measured at start (``meta["cuda"]["event_tick_ns"]``)
    and enters the clock resolution the aligner's bound allows for.
    ``cudaEventElapsedTime`` gives
    float32 milliseconds, whose resolution coarsens with distance (61 ns at
    1 s, 1 µs at 16 s), so every event is read against the newest *segment
    anchor*, an event laid down every ``anchor_interval_ns`` of host time
    (no device sync), and anchors are chained: anchor 0 has raw 0, anchor k
    raw = raw(k-1) + elapsed(k-1, k), an event's raw = raw(its anchor) +
    elapsed(anchor, event), in ns. Anchors are laid when ops come, so a
    quiet spell of T with no op (a checkpoint save, CPU-side evaluation) is
    one link read over T: up to half a float32 step of error there (2 µs at
    60 s, 31 µs at 10 min); the aligner absorbs it as relaxation where it
    contradicts the bounds (``relax_ns``). ``timing="stamps"`` has no such
    limit. ``pings`` calibration pings at start and
    at stop (synchronize, host time t0, record, synchronize, host time t1)
    give PING events with host_record_ns = t0 and "ping" syncs [t0, t1].
    No event is recorded while this device's current stream captures a CUDA
    graph.

    ``timing`` says what marks each point (BEGIN, END, PING):

    * "events" — the CUDA events above.
    * "stamps" — a launch of the one-thread stamp kernel (``kernels.Stamper``,
      needs CuPy) that writes ``%globaltimer`` into the point's slot of a
      device buffer, read once at harvest. raw_ns is then the globaltimer
      itself: 64-bit ns, no anchors, no float32 rounding; like the event
      clock it drifts against the host clock, and the same hull fit aligns
      it. The buffer holds ``stamp_slots`` points (24 B each) per chunk;
      a full one gets a new chunk, allocated on a side stream of ours and
      waited for there only (``meta["cuda"]["stamp_chunks"]``).
    * "both" — events and stamps at every point (anchors too). The events
      time the Timeline; the stamps come back as ``Harvest.alternates
      ["stamps"]``, a raw_ns column for the same event rows, from which the
      recorder makes a second Timeline (``Recorder.timelines``).

    What stamps cost: a stamp is a kernel launch through CuPy, several µs of
    host time where an event record is about one (``measure_launch_ns``
    says how much), and the kernel occupies its stream for its launch and
    run, ~1–3 µs when the stream is idle (hidden when work is queued before
    it). So on an idle stream an op's gpu row, BEGIN stamp to END stamp,
    includes that much more than its work, and the program runs slower
    than under events.
    """

    kind = "cuda"

    def __init__(self, index: int | None = None, *,
                 anchor_interval_ns: int = 1_000_000_000, chunk: int = 1024,
                 pings: int = 3, timing: str = "events", stamp_slots: int = 1 << 16):
        for name, value, low in (("anchor_interval_ns", anchor_interval_ns, 1),
                                 ("chunk", chunk, 2), ("pings", pings, 1),
                                 ("stamp_slots", stamp_slots, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CutimelineError(f"CudaDevice({name}={value!r}) must be an "
                                      f"integer ≥ {low}.")
        if timing not in TIMINGS:
            raise CutimelineError(f"CudaDevice(timing={timing!r}) is not understood; "
                                  f"give one of {', '.join(map(repr, TIMINGS))}.")
        api = self._api = _cuda_api()
        self.index = api.current_device() if index is None else int(index)
        self.name = api.device_name(self.index)
        import torch
        self._device = torch.device("cuda", self.index)
        self.anchor_interval_ns, self.chunk, self.pings = anchor_interval_ns, chunk, pings
        self.timing, self.stamp_slots = timing, stamp_slots
        self._events = timing != "stamps"
        self._stamps = timing != "events"
        if self._stamps:  # fail here, with what to install, not at the first op
            api.check_stamps(self.index)
        self._now = api.now
        # re-entrant: an anchor (lock held) may stamp into a new chunk (lock)
        self._lock = threading.RLock()
        self._free: list[Any] = []
        self._created = 0
        self._started = False
        # graphs being captured now, on any thread (recording/hooks/installer.py counts them):
        # no event may be queried meanwhile, so the pool grows instead
        self.captures = 0

    def __repr__(self) -> str:
        timing = "" if self.timing == "events" else f", timing={self.timing!r}"
        return f"CudaDevice({self.index}, {self.name!r}{timing})"

    # -- the Device interface ------------------------------------------------
    def owns(self, device: Any) -> bool:
        if getattr(device, "type", None) != "cuda":
            return False
        index = device.index
        if index is None:  # torch.zeros(..., device="cuda"): the current device
            index = self._api.current_device()
        return index == self.index

    def current_stream(self) -> int:
        return self._api.current_stream(self.index)

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise CutimelineError(f"{self!r} is already recording; stop that "
                                      f"recording before starting another.")
            self._started = True
            self._ids = itertools.count()
            self._rows: list[tuple] = []        # (index, stream, kind, seq, host_ns, anchor)
            self._reset_pool()
            self._syncs: list[tuple] = []
            self._newest = _Newest()
            self._user_events: Any = weakref.WeakKeyDictionary()
            if self._events:
                self._grow(max(self.chunk, 4 * self.pings))
            self._stampers: list[Any] = []
            self._stamp_wait_ns = 0
            if self._stamps:
                self._stampers.append(self._api.new_stamper(self.stamp_slots, self.index))
        if self._events:
            self._anchor(self.current_stream(), self._now())
        self._ping()
        if self._events:  # the pings left the stream idle
            self._measure_tick(self.current_stream())

    def begin(self, stream: int, seq: int) -> int:
        if self._api.capturing(self.index):
            return NONE
        return self._record(stream, EventKind.BEGIN, seq, self._fresh(stream))

    def end(self, stream: int, seq: int, func: Any, args: tuple, kwargs: dict,
            out: Any) -> int:
        return self._record(stream, EventKind.END, seq, self._now())

    def wait(self, stream: int | None) -> None:
        """Nothing to do: the op blocked already."""

    def note_sync(self, kind: str, stream: int | None, seq: int,
                  host_begin_ns: int, host_end_ns: int) -> None:
        n = self._newest
        last = n.last if stream is None else n.on.get(stream, NONE)
        self._syncs.append((seq, kind, NONE if stream is None else stream, last,
                            host_begin_ns, host_end_ns, threading.get_ident()))

    def harvest(self) -> Harvest:
        if not self._started:
            raise CutimelineError(f"{self!r}: harvest() was called while not "
                                  f"recording; call start() first.")
        try:
            self._ping()
            self._api.synchronize(self.index)
            with self._lock:  # no thread still recording reaps meanwhile
                return self._harvest()
        finally:
            with self._lock:
                self._free.extend(e for e, _ in self._pending.values())
                self._free.extend(e for _, e in self._anchors)
                self._pending, self._anchors, self._stampers = {}, [], []
                self._started = False

    # -- CUDA-only: user events, and what the recorder measures ---------------------
    def note_user_event(self, event: Any, stream: Any) -> None:
        """A ``torch.cuda.Event`` was recorded on ``stream`` (a torch Stream,
        None: current): remember the newest of our events before it there.
        An event on another GPU is not ours to bound anything with."""
        if stream is None:
            if self._api.current_device() != self.index:
                return
        elif getattr(stream, "device_index", self.index) != self.index:
            return
        sid = self._api.stream_id(stream, self.index)
        try:
            self._user_events[event] = (sid, self._newest.on.get(sid, NONE))
        except TypeError:  # an event type without weak references
            pass

    def note_event_sync(self, event: Any, host_begin_ns: int, host_end_ns: int,
                        kind: str = "event_synchronize") -> None:
        """``event.synchronize()`` returned (or ``event.query()`` returned
        True: ``kind`` "event_query"): it covers what was on the event's
        stream when it was recorded, if we saw that; else it bounds nothing."""
        try:
            sid, last = self._user_events.get(event, (NONE, NONE))
        except TypeError:
            sid, last = NONE, NONE
        self._syncs.append((NONE, kind, sid, last,
                            host_begin_ns, host_end_ns, threading.get_ident()))

    def note_host_wait(self, kind: str, host_begin_ns: int, host_end_ns: int) -> None:
        """The host was in a call that may or may not have waited for this
        device (``torch.cuda.empty_cache``: its cudaFree calls synchronize
        the device only when cached blocks are freed): a device-wide sync
        row that bounds no event (``last_event`` -1), so analysis sees the
        host blocked and the aligner is told nothing it cannot trust."""
        self._syncs.append((NONE, kind, NONE, NONE, host_begin_ns, host_end_ns,
                            threading.get_ident()))

    def memory_meter(self) -> "CudaMemory":
        """The caching allocator's counters of this GPU (``CudaMemory``)."""
        read = getattr(self._api, "memory_counters", None) or _memory_counters
        return CudaMemory(lambda: read(self.index))

    def measure_launch_ns(self, n: int = 64) -> int:
        """Host cost (ns) of the two points around one launch: median of
        ``n`` timed pairs of ``current_stream`` + capture check + event
        record and/or stamp (as ``timing`` has it); with events, also the
        pool's upkeep in the steady state, one completed event queried and
        read per event taken (``eventclock.py``)."""
        api = self._api
        a, b, done = api.new_event(), api.new_event(), api.new_event()
        scratch = api.new_stamper(2, self.index) if self._stamps else None
        if self._events:
            api.record(done, api.current_stream(self.index), self.index)
            api.synchronize(self.index)
        times = []
        for _ in range(n):
            t0 = self._now()
            for slot, ev in enumerate((a, b)):
                s = api.current_stream(self.index)
                api.capturing(self.index)
                if self._events:
                    if api.query(done):
                        api.elapsed_ms(done, done)
                    api.record(ev, s, self.index)
                if scratch is not None:
                    api.stamp(scratch, slot, s, self.index)
            times.append(self._now() - t0)
        api.synchronize(self.index)
        return int(sorted(times)[n // 2])

    # -- internals -------------------------------------------------------------------
    def _record(self, stream: int, kind: int, seq: int, now: int) -> int:
        k = len(self._anchors) - 1
        if self._events:
            ev = self._take()
            self._api.record(ev, stream, self.index)
        if self._stamps:
            # A sync covers every point whose id is at most the newest one's,
            # so ids must follow the order stamps are enqueued in: take the
            # id and stamp as one step. The row goes in first, so a failed
            # stamp leaves a row (named at harvest), not a gap in the ids.
            with self._lock:
                i = next(self._ids)
                if self._events:
                    self._add_pending(i, ev, k, stream)
                self._rows.append((i, stream, kind, seq, now, k))
                self._stamp(i, stream)
        else:
            i = next(self._ids)
            self._add_pending(i, ev, k, stream)
            self._rows.append((i, stream, kind, seq, now, k))
        n = self._newest
        n.last = i
        n.on[stream] = i
        return i

    def _ping(self) -> None:
        api = self._api
        stream = self.current_stream()
        for _ in range(self.pings):
            api.synchronize(self.index)
            t0 = self._now()
            i = self._record(stream, EventKind.PING, NONE, t0)
            api.synchronize(self.index)
            self._syncs.append((NONE, "ping", NONE, i, t0, self._now(),
                                threading.get_ident()))

    def _harvest(self) -> Harvest:
        rows = np.array(sorted(self._rows), np.int64).reshape(-1, 6)
        index, stream, kind, seq, host, anchor_of = rows.T
        stamps = self._read_stamps(index) if self._stamps else None
        raw = self._read_events(rows, anchor_of) if self._events else stamps
        events = {"device": np.full(len(rows), self.index, np.int16), "stream": stream,
                  "kind": kind.astype(np.uint8), "op": seq, "raw_ns": raw,
                  "host_record_ns": host}
        cols = list(zip(*self._syncs)) or [()] * 7
        syncs = {"op": np.array(cols[0], np.int64), "kind": np.array(cols[1], object),
                 "device": np.full(len(self._syncs), self.index, np.int16),
                 "stream": np.array(cols[2], np.int64),
                 "last_event": np.array(cols[3], np.int64),
                 "host_begin_ns": np.array(cols[4], np.int64),
                 "host_end_ns": np.array(cols[5], np.int64),
                 "ident": np.array(cols[6], np.uint64)}
        meta = {"device_name": self.name, "device_names": {str(self.index): self.name},
                "timing": "stamps" if self.timing == "stamps" else "events",
                "cuda": {"anchors": len(self._anchors), **self._pool_meta(),
                         "anchor_interval_ns": self.anchor_interval_ns,
                         "timing": self.timing}}
        if self._stamps:
            meta["cuda"].update(stamp_chunks=len(self._stampers),
                                stamp_slots=self.stamp_slots,
                                stamp_chunk_wait_ns=self._stamp_wait_ns)
        res = self.resolution_ns()
        meta["clock_resolution_ns"] = {str(self.index): res[meta["timing"]]}
        alternates = {"stamps": stamps} if self.timing == "both" else {}
        return Harvest(events, syncs, meta, alternates=alternates,
                       alternate_resolution_ns={k: res[k] for k in alternates})

    def resolution_ns(self) -> dict[str, int]:
        """How far a raw reading may lie from its instant, per timing (ns):
        events, the event clock's tick (measured at start, at least
        ``EVENT_TICK_NS``) plus half a float32 step of a link as long as the
        anchor interval (a quiet spell makes one longer); stamps,
        globaltimer's update step (64-bit ns, no float32)."""
        tick = getattr(self, "_tick_ns", EVENT_TICK_NS)  # before any start: the floor
        return {"events": read_error_ns(tick, self.anchor_interval_ns),
                "stamps": read_error_ns(GLOBALTIMER_STEP_NS)}
