"""SimGPU's virtual streams: when work and events execute, and the controls that steer them.

Each stream keeps ``free_at``, the true host time at which it has drained
what was enqueued so far (see ``sim.py`` for the rules). ``SimStreams`` is a
part of ``SimGPU``: it works on the simulator's lock, its per-thread state,
its host clock and its recording state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import CutimelineError
from ..timeline.schema import NONE, EventKind
from .device import Harvest
from .simclock import read_device_clock, read_error_ns

__all__ = ["SimEvent", "SimStreams"]


@dataclass(frozen=True)
class SimEvent:
    """A simulated ``torch.cuda.Event``: done when its stream reaches it."""
    stream: int
    done_ns: int  # true host time at which the stream passes the event


def _check_stream(stream: Any) -> int:
    if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) \
            or stream < 0:
        raise CutimelineError(f"Simulated stream {stream!r} is not valid; "
                              f"streams are integers ≥ 0 (0 is the default).")
    return int(stream)


class SimStreams:
    """The stream half of ``SimGPU`` (mixed into it): the controls a program
    uses by hand, the bookkeeping of when each event executes and of each
    stream's launch queue (``SimGPU.begin``/``end`` do the per-op part in
    line), segment anchors and calibration pings, and the events handed
    over at stop (``_harvest``)."""

    launch_queue = 0  # set by SimGPU
    _pending: dict[int, Any]  # finish times of launched ops, per stream (SimGPU)

    # -- user controls -------------------------------------------------------
    @contextlib.contextmanager
    def stream(self, stream: int) -> Iterator[int]:
        """Make ``stream`` this thread's current stream inside the block."""
        stream = _check_stream(stream)
        before = self._local.stream
        self._local.stream = stream
        try:
            yield stream
        finally:
            self._local.stream = before

    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        """Ops dispatched by this thread inside the block are host work."""
        self._local.host += 1
        try:
            yield
        finally:
            self._local.host -= 1

    def record_event(self, stream: int | None = None) -> SimEvent:
        """An event after the work enqueued so far on ``stream`` (default:
        the current stream), like ``torch.cuda.Event.record``."""
        s = self.current_stream() if stream is None else _check_stream(stream)
        with self._lock:
            return SimEvent(s, self._free_at.get(s, 0))

    def wait_event(self, event: SimEvent, stream: int | None = None) -> None:
        """Work enqueued on ``stream`` from now on starts after ``event``."""
        if not isinstance(event, SimEvent):
            raise CutimelineError(f"wait_event needs a SimEvent from "
                                  f"SimGPU.record_event, not {event!r}.")
        s = self.current_stream() if stream is None else _check_stream(stream)
        with self._lock:
            self._free_at[s] = max(self._free_at.get(s, 0), event.done_ns)

    def wait_stream(self, waiting: int, on: int) -> None:
        """Stream ``waiting``'s next work starts no earlier than the end of
        the work already enqueued on stream ``on``."""
        self.wait_event(self.record_event(_check_stream(on)),
                        _check_stream(waiting))

    def synchronize(self, stream: int | None = None) -> None:
        """Block the host until ``stream`` (None: every stream) drains, and
        note the sync while recording, like ``torch.cuda.synchronize`` (kind
        "synchronize") or ``Stream.synchronize`` ("stream_synchronize")."""
        s = None if stream is None else _check_stream(stream)
        t0 = self._clock.now()
        self.wait(s)
        if self._started:
            self.note_sync("synchronize" if s is None else "stream_synchronize",
                           s, NONE, t0, self._clock.now())

    def drained_at(self, stream: int | None = None) -> int:
        """True host time (ns) at which ``stream`` (None: every stream)
        finishes the work enqueued so far."""
        with self._lock:
            if stream is None:
                return max(self._free_at.values(), default=0)
            return self._free_at.get(_check_stream(stream), 0)

    def pin_memory(self, tensor: Any) -> Any:
        """``tensor`` marked as pinned host memory for this simulation, and
        returned: what ``tensor.pin_memory()`` (or a DataLoader's
        ``pin_memory=True``) gives on a CUDA build, which torch without
        CUDA cannot pin. A ``non_blocking=True`` copy of it to the simulated
        device then costs the host no staging (``simhost.dispatch_ns``)."""
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
            raise CutimelineError(f"SimGPU.pin_memory needs a CPU tensor, not "
                                  f"{type(tensor).__name__} on "
                                  f"{getattr(tensor, 'device', 'no device')}.")
        tensor._cutimeline_pinned = True
        return tensor

    # -- when each event executes (the lock is held where noted) --------------
    def _room(self, name: str, args: tuple, kwargs: dict) -> None:
        """Hold this thread's launch of op ``name`` until its stream has
        room: fewer than ``launch_queue`` launched ops not yet finished at
        the virtual time of the launch (the end of the op's modelled
        dispatch). Called inside the op, so the recorder sees the wait as
        the op's host time, as CUDA's blocking launch call shows it."""
        stream = self.current_stream()
        with self._lock:
            q = self._pending.get(stream)
            if not q or len(q) < self.launch_queue:
                return
            m = self._local.mark
            if m is None or self._real_only():
                at, v = None, self._virtual(self._clock.now())
            else:
                self._local.ns = ns = self._dispatch_ns(name, args, kwargs)
                at = v = max(m[1] + ns, self._kv[-1])
            while q and q[0] <= v:
                q.popleft()
            if len(q) < self.launch_queue:
                return
            target = q[len(q) - self.launch_queue]
        self._hold(target, begun=at)

    def _record(self, stream: int, kind: int, seq: int, now: int,
                ready_ns: int, advance: bool = True) -> int:
        """Append one event (lock held); it executes when its stream gets to
        it, and no earlier than ``ready_ns``. ``advance=False``: a BEGIN whose
        time ``_settle`` fixes later (bracket="kernel")."""
        true = max(self._free_at.get(stream, 0), ready_ns)
        if advance:
            self._free_at[stream] = true
        i = len(self._ev)
        self._ev.append((stream, kind, seq, now, true, len(self._anchors) - 1))
        self._last_on[stream] = i
        return i

    def _settle(self, stream: int, true_ns: int, launch_ns: int) -> None:
        """Fix this thread's pending BEGINs on ``stream`` (bracket="kernel")
        to execute at ``true_ns``, right before the first work after them, and
        to count as recorded at ``launch_ns``, when the host enqueued that
        work (lock held): an op's launch is then the enqueue, as a kernel's
        launch call would say, not the start of its dispatch."""
        pending = self._local.pending
        if not pending:
            return
        left = []
        for i in pending:
            s, kind, seq, _, _, anchor = self._ev[i]
            if s == stream:
                self._ev[i] = (s, kind, seq, launch_ns, true_ns, anchor)
            else:
                left.append(i)
        self._local.pending = left
        if len(left) < len(pending):
            self._free_at[stream] = max(self._free_at.get(stream, 0), true_ns)

    def _count_kernel(self, stream: int, v: int, now: int) -> None:
        """The count kernel of the data-dependent op this thread is in
        (``simdatadep.py``), just before its wait (lock held): it starts
        when the stream is free and its launch has arrived, and the stream
        is busy until it is done, so the wait covers it; this thread's
        pending BEGINs (bracket="kernel") execute right before it. A note
        left by another op (its wait never came) is dropped."""
        loc = self._local
        count, loc.count = loc.count, None
        if loc.op is None or count[1] is not loc.op[1]:
            return
        start = max(self._free_at.get(stream, 0), v + self.launch_latency_ns)
        self._settle(stream, start, now)
        self._free_at[stream] = start + count[0]

    def _anchor(self, stream: int, now: int, virtual: int) -> None:
        """Lay down a segment anchor at real host time ``now`` (lock held)."""
        self._anchors.append(len(self._ev))  # read against itself
        self._anchor_host_ns = now
        self._record(stream, EventKind.ANCHOR, NONE, now,
                     virtual + self.event_latency_ns)

    def _ping(self) -> None:
        """Calibration pings as the CUDA device does them: synchronize, host
        time, record, synchronize, host time; each a "ping" sync row."""
        for _ in range(self.pings):
            self.wait(None)
            self._local.waited = None  # this sync is noted here, not by note_sync
            with self._lock:
                before, v = self._vnow()
                i = self._record(0, EventKind.PING, NONE, before,
                                 v + self.event_latency_ns)
                target = self._ev[i][4]
            self._hold(target)
            after = self._clock.now()
            with self._lock:
                self._sy.append((NONE, "ping", NONE, i, before, after,
                                 threading.get_ident()))
    def _last_event(self, stream: int | None) -> int:
        if stream is None:
            return len(self._ev) - 1
        return self._last_on.get(stream, NONE)

    def _harvest(self) -> Harvest:
        """The recording's events, syncs and truth as the recorder's columns
        (lock held, at stop)."""
        ev = np.asarray(self._ev, np.int64).reshape(-1, 6)
        stream, kind, op, host, true, anchor_of = ev.T.copy()
        raw, dev = read_device_clock(
            true, np.asarray(self._anchors, np.int64), anchor_of,
            start_ns=self._start_ns, offset_ns=self.offset_ns,
            drift_ppm=self.drift_ppm, quantum_ns=self.quantum_ns)
        n = len(raw)
        events = {"device": np.full(n, self.index, np.int16), "stream": stream,
                  "kind": kind.astype(np.uint8), "op": op, "raw_ns": raw,
                  "host_record_ns": host}
        s_op, s_kind, s_stream, s_last, s_b, s_e, s_ident = (
            list(c) for c in zip(*self._sy)) if self._sy else ([],) * 7
        syncs = {"op": np.asarray(s_op, np.int64),
                 "kind": np.asarray(s_kind, dtype=object),
                 "device": np.full(len(s_op), self.index, np.int16),
                 "stream": np.asarray(s_stream, np.int64),
                 "last_event": np.asarray(s_last, np.int64),
                 "host_begin_ns": np.asarray(s_b, np.int64),
                 "host_end_ns": np.asarray(s_e, np.int64),
                 "ident": np.asarray(s_ident, np.uint64)}
        p = self.profile
        meta = {"simulated": True, "device_name": self.name,
                "launch_queue": self.launch_queue,
                "device_names": {str(self.index): self.name},
                "clock_resolution_ns": {str(self.index): read_error_ns(
                    self.quantum_ns, self.anchor_interval_ns)},
                "sim": {"profile": p.name, "peak_flops": dict(p.peak_flops),
                        "bandwidth": p.bandwidth, "min_kernel_ns": p.min_kernel_ns,
                        "offset_ns": self.offset_ns, "drift_ppm": self.drift_ppm,
                        "start_host_ns": self._start_ns,
                        "quantum_ns": self.quantum_ns,
                        "launch_latency_ns": self.launch_latency_ns,
                        "event_latency_ns": self.event_latency_ns,
                        "anchor_interval_ns": self.anchor_interval_ns,
                        "anchor0_device_ns": int(dev[0]) if n else None,
                        "jitter": self.jitter, "seed": self.seed,
                        "bracket": self.bracket,
                        "cost": "roofline" if self.cost is None else "override",
                        "host_cost": "model" if self._host_cost is None else
                        self._host_cost if isinstance(self._host_cost, (int, str))
                        else "callable"}}
        return Harvest(events, syncs, meta,
                       {"event": np.arange(n, dtype=np.int64),
                        "host_ns": self._real_of(true)}, host_map=self.host_map())
