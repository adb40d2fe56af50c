"""SimGPU's virtual streams: when work and events execute, and the recording's log.

Each stream keeps ``free_at``, the true host time at which it has drained
what was enqueued so far (see ``gpu.py`` for the rules), and the finish
times of its launched ops not yet done (its launch queue). While recording,
``SimStreams`` keeps the log a recording hands over at stop: one tuple per
event (stream, kind, seq, host_record, true, anchor) and one per sync. The
per-op part of that bookkeeping (an op's BEGIN and END) is done in line by
``SimGPU.begin``/``end``, on these same fields, with the lock held.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import CutimelineError
from ...timeline.schema import NONE, EventKind
from ..clockread import read_error_ns
from ..device import Harvest
from .clock import read_device_clock
from .host import SimHost
from .local import SimLocal
from .options import SimOptions

__all__ = ["SimEvent", "SimStreams", "check_stream"]


@dataclass(frozen=True)
class SimEvent:
    """A simulated ``torch.cuda.Event``: done when its stream reaches it."""
    stream: int
    done_ns: int  # true host time at which the stream passes the event


def check_stream(stream: Any) -> int:
    """A stream id as an int ≥ 0, or a CutimelineError."""
    if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) \
            or stream < 0:
        raise CutimelineError(f"Simulated stream {stream!r} is not valid; "
                              f"streams are integers ≥ 0 (0 is the default).")
    return int(stream)


@dataclass(eq=False)
class SimStreams:
    """The stream part of ``SimGPU``: when each event executes, each
    stream's launch queue, waits and syncs, segment anchors and calibration
    pings, and the log of events and syncs handed over at stop. Shares the
    simulator's host clock, lock, per-thread state and virtual host clock
    (``SimHost``)."""

    clock: Any
    lock: Any
    local: SimLocal
    host: SimHost
    #: pending launched ops per stream at which a launch blocks the host (0: unbounded)
    launch_queue: int
    launch_latency_ns: int
    event_latency_ns: int
    #: calibration pings at start and at stop
    pings: int
    #: stream -> true host time at which it has drained what was enqueued so far
    free_at: dict[int, int] = field(default_factory=dict, init=False)
    #: stream -> finish times of its launched ops (the launch queue)
    pending: dict[int, deque] = field(default_factory=dict, init=False)
    #: between start() and stop()
    recording: bool = field(default=False, init=False)
    #: the log: one tuple per event (stream, kind, seq, host_record, true, anchor)
    events: list[tuple[int, ...]] = field(default_factory=list, init=False)
    #: index in ``events`` of each segment anchor
    anchors: list[int] = field(default_factory=list, init=False)
    #: one tuple per sync: seq, kind, stream, last_event, begin, end, thread ident
    syncs: list[tuple[Any, ...]] = field(default_factory=list, init=False)
    #: stream -> its newest event
    last_on: dict[int, int] = field(default_factory=dict, init=False)
    #: real host time of the newest anchor
    anchor_host_ns: int = field(default=0, init=False)

    def start(self) -> None:
        """A fresh log for a new recording (lock held)."""
        self.recording = True
        self.events, self.anchors, self.syncs, self.last_on = [], [], [], {}

    # -- user controls -------------------------------------------------------
    @contextlib.contextmanager
    def stream(self, stream: int) -> Iterator[int]:
        """Make ``stream`` this thread's current stream inside the block."""
        stream = check_stream(stream)
        before = self.local.stream
        self.local.stream = stream
        try:
            yield stream
        finally:
            self.local.stream = before

    def record_event(self, stream: int | None = None) -> SimEvent:
        """An event after the work enqueued so far on ``stream`` (default:
        the current stream), like ``torch.cuda.Event.record``."""
        s = self.local.stream if stream is None else check_stream(stream)
        with self.lock:
            return SimEvent(s, self.free_at.get(s, 0))

    def wait_event(self, event: SimEvent, stream: int | None = None) -> None:
        """Work enqueued on ``stream`` from now on starts after ``event``."""
        if not isinstance(event, SimEvent):
            raise CutimelineError(f"wait_event needs a SimEvent from "
                                  f"SimGPU.record_event, not {event!r}.")
        s = self.local.stream if stream is None else check_stream(stream)
        with self.lock:
            self.free_at[s] = max(self.free_at.get(s, 0), event.done_ns)

    def drained_at(self, stream: int | None = None) -> int:
        """True host time (ns) at which ``stream`` (None: every stream)
        finishes the work enqueued so far."""
        with self.lock:
            if stream is None:
                return max(self.free_at.values(), default=0)
            return self.free_at.get(check_stream(stream), 0)

    # -- host waits ----------------------------------------------------------
    def wait(self, stream: int | None) -> None:
        """Block the host until ``stream`` (None: every stream) drains
        (``Device.wait``): inside a host-blocking op, which launched its
        work before it blocked."""
        with self.lock:
            now = self.clock.now()
            loc = self.local
            op = loc.op or ("aten::_local_scalar_dense", (), {})
            self.host.close(now, *op)
            v = self.host.virtual(now)
            if loc.count is not None and stream is not None:
                self.count_kernel(stream, v, now)  # a data-dependent op's (datadep.py)
            for s in {self.events[i][0] for i in loc.pending or ()}:
                self.settle(s, max(self.free_at.get(s, 0),
                                   v + self.event_latency_ns), now)
            if stream is None:
                target = max(self.free_at.values(), default=0)
            else:
                target = self.free_at.get(stream, 0)
            if self.recording:  # what this wait covers, for note_sync
                loc.waited = (stream, self.last_event(stream))
        self.host.hold(target)

    def note_sync(self, kind: str, stream: int | None, seq: int,
                  host_begin_ns: int, host_end_ns: int) -> None:
        """A sync row (lock held): the host blocked from ``host_begin_ns``
        to ``host_end_ns`` until ``stream`` (None: all) drained."""
        waited = self.local.waited
        self.local.waited = None
        # Events other threads recorded after our wait began are not
        # covered: use the newest event as of the wait when we have it.
        last = waited[1] if waited and waited[0] == stream \
            else self.last_event(stream)
        self.syncs.append((seq, kind, NONE if stream is None else stream,
                           last, host_begin_ns, host_end_ns, threading.get_ident()))

    def room(self, name: str, args: tuple, kwargs: dict) -> None:
        """Hold this thread's launch of op ``name`` until its stream has
        room: fewer than ``launch_queue`` launched ops not yet finished at
        the virtual time of the launch (the end of the op's modelled
        dispatch). Called inside the op, so the recorder sees the wait as
        the op's host time, as CUDA's blocking launch call shows it."""
        stream = self.local.stream
        host = self.host
        with self.lock:
            q = self.pending.get(stream)
            if not q or len(q) < self.launch_queue:
                return
            m = self.local.mark
            if m is None or host.real_only():
                at, v = None, host.virtual(self.clock.now())
            else:
                self.local.ns = ns = host.dispatch_ns(name, args, kwargs)
                at = v = max(m[1] + ns, host.kv[-1])
            while q and q[0] <= v:
                q.popleft()
            if len(q) < self.launch_queue:
                return
            target = q[len(q) - self.launch_queue]
        host.hold(target, begun=at)

    # -- when each event executes (the lock is held) ---------------------------
    def record(self, stream: int, kind: int, seq: int, now: int,
               ready_ns: int, advance: bool = True) -> int:
        """Append one event; it executes when its stream gets to it, and no
        earlier than ``ready_ns``. ``advance=False``: a BEGIN whose time
        ``settle`` fixes later (bracket="kernel")."""
        true = max(self.free_at.get(stream, 0), ready_ns)
        if advance:
            self.free_at[stream] = true
        i = len(self.events)
        self.events.append((stream, kind, seq, now, true, len(self.anchors) - 1))
        self.last_on[stream] = i
        return i

    def settle(self, stream: int, true_ns: int, launch_ns: int) -> None:
        """Fix this thread's pending BEGINs on ``stream`` (bracket="kernel")
        to execute at ``true_ns``, right before the first work after them, and
        to count as recorded at ``launch_ns``, when the host enqueued that
        work: an op's launch is then the enqueue, as a kernel's launch call
        would say, not the start of its dispatch."""
        pending = self.local.pending
        if not pending:
            return
        left = []
        for i in pending:
            s, kind, seq, _, _, anchor = self.events[i]
            if s == stream:
                self.events[i] = (s, kind, seq, launch_ns, true_ns, anchor)
            else:
                left.append(i)
        self.local.pending = left
        if len(left) < len(pending):
            self.free_at[stream] = max(self.free_at.get(stream, 0), true_ns)

    def count_kernel(self, stream: int, v: int, now: int) -> None:
        """The count kernel of the data-dependent op this thread is in
        (``datadep.py``), just before its wait: it starts when the stream
        is free and its launch has arrived, and the stream is busy until
        it is done, so the wait covers it; this thread's pending BEGINs
        (bracket="kernel") execute right before it. A note left by another
        op (its wait never came) is dropped."""
        loc = self.local
        count, loc.count = loc.count, None
        if loc.op is None or count[1] is not loc.op[1]:
            return
        start = max(self.free_at.get(stream, 0), v + self.launch_latency_ns)
        self.settle(stream, start, now)
        self.free_at[stream] = start + count[0]

    def anchor(self, stream: int, now: int, virtual: int) -> None:
        """Lay down a segment anchor at real host time ``now``."""
        self.anchors.append(len(self.events))  # read against itself
        self.anchor_host_ns = now
        self.record(stream, EventKind.ANCHOR, NONE, now,
                    virtual + self.event_latency_ns)

    def last_event(self, stream: int | None) -> int:
        if stream is None:
            return len(self.events) - 1
        return self.last_on.get(stream, NONE)

    # -- calibration pings (the lock is not held) --------------------------------
    def ping(self) -> None:
        """Calibration pings as the CUDA device does them: synchronize, host
        time, record, synchronize, host time; each a "ping" sync row."""
        for _ in range(self.pings):
            self.wait(None)
            self.local.waited = None  # this sync is noted here, not by note_sync
            with self.lock:
                before, v = self.host.vnow()
                i = self.record(0, EventKind.PING, NONE, before,
                                v + self.event_latency_ns)
                target = self.events[i][4]
            # from its host time read on, the ping's own bookkeeping is flat:
            # its bounds are as tight as a real host's
            self.host.hold(target, begun=v)
            after = self.clock.now()
            with self.lock:
                self.syncs.append((NONE, "ping", NONE, i, before, after,
                                   threading.get_ident()))

    # -- at stop ------------------------------------------------------------------
    def harvest(self, o: SimOptions, name: str, start_ns: int) -> Harvest:
        """The recording's events, syncs and truth as the recorder's columns,
        its device clock read as the recorder reads CUDA's, and the
        simulator's meta (lock held, at stop); ``o``: the SimGPU's options,
        ``start_ns``: when the recording began."""
        ev = np.asarray(self.events, np.int64).reshape(-1, 6)
        stream, kind, op, host, true, anchor_of = ev.T.copy()
        raw, dev = read_device_clock(
            true, np.asarray(self.anchors, np.int64), anchor_of,
            start_ns=start_ns, offset_ns=o.offset_ns,
            drift_ppm=o.drift_ppm, quantum_ns=o.quantum_ns)
        n = len(raw)
        events = {"device": np.full(n, o.index, np.int16), "stream": stream,
                  "kind": kind.astype(np.uint8), "op": op, "raw_ns": raw,
                  "host_record_ns": host}
        s_op, s_kind, s_stream, s_last, s_b, s_e, s_ident = (
            list(c) for c in zip(*self.syncs)) if self.syncs else ([],) * 7
        syncs = {"op": np.asarray(s_op, np.int64),
                 "kind": np.asarray(s_kind, dtype=object),
                 "device": np.full(len(s_op), o.index, np.int16),
                 "stream": np.asarray(s_stream, np.int64),
                 "last_event": np.asarray(s_last, np.int64),
                 "host_begin_ns": np.asarray(s_b, np.int64),
                 "host_end_ns": np.asarray(s_e, np.int64),
                 "ident": np.asarray(s_ident, np.uint64)}
        p, host_cost = o.profile, o.host_cost
        meta = {"simulated": True, "device_name": name,
                "launch_queue": o.launch_queue,
                "device_names": {str(o.index): name},
                "clock_resolution_ns": {str(o.index): read_error_ns(
                    o.quantum_ns, o.anchor_interval_ns)},
                "sim": {"profile": p.name, "peak_flops": dict(p.peak_flops),
                        "bandwidth": p.bandwidth, "min_kernel_ns": p.min_kernel_ns,
                        "offset_ns": o.offset_ns, "drift_ppm": o.drift_ppm,
                        "start_host_ns": start_ns,
                        "quantum_ns": o.quantum_ns,
                        "launch_latency_ns": o.launch_latency_ns,
                        "event_latency_ns": o.event_latency_ns,
                        "anchor_interval_ns": o.anchor_interval_ns,
                        "anchor0_device_ns": int(dev[0]) if n else None,
                        "jitter": o.jitter, "seed": o.seed,
                        "bracket": o.bracket,
                        # fp32 matmuls and convolutions forced onto TF32 (or off
                        # it); None: torch's switches (the meta beside)
                        "tf32": o.tf32,
                        "cost": "roofline" if o.cost is None else "override",
                        "host_cost": "model" if host_cost is None else
                        host_cost if isinstance(host_cost, (int, str)) else "callable"}}
        return Harvest(events, syncs, meta,
                       {"event": np.arange(n, dtype=np.int64),
                        "host_ns": self.host.real_of(true)}, host_map=self.host.host_map())
