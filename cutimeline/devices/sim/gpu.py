"""SimGPU: a simulated GPU behind the recorder's Device interface.

``SimGPU`` owns ``meta`` tensors: every op on them (outside a DataLoader
fetch or a ``with gpu.host():`` block) is work for a virtual GPU; CPU
tensors stay host work. The real op still runs on meta tensors
(metadata only); the host is charged what dispatching it to CUDA would
cost, on a virtual host clock (``host.py``), and its roofline cost
(``roofline.py``) is enqueued on a virtual stream (``streams.py``). The
timing rules, in virtual host ns:

* an op whose dispatch began at d and whose launch returned at h starts
  at ``max(free_at, h, d + launch_latency)``: the latency runs from the
  dispatch's start (setup, driver, front end) and a kernel starts no
  earlier than its launch returned, so with the profiles' latencies an
  op on an idle stream starts at the return and its row
  (``alignment/aligner.py``) is its work alone;
* a BEGIN event recorded at h executes at ``max(free_at, h +
  event_latency)``, an END event at ``max(op end, h + event_latency)``;
* a sync really waits until its stream (or all) has drained; a launch
  into a full queue (``launch_queue``, 1024 as in CUDA) waits inside the
  op for the oldest (``SimStreams.room``); a collective runs on a
  communication stream of its own, as NCCL's kernel does (``comm.py``).

The recorder sees what it would see from CUDA: a device clock with its
own offset and drift, quantised to 0.5 µs, read only as
float32-millisecond elapsed times from segment anchors laid down every
~1 s and chained (``devices/clockread.py``). The true times go to
``Harvest.truth`` and ``Harvest.meta["sim"]`` so the aligner can be
scored; everything is labelled a simulation. The parts (``local.py``
and the classes ``SimGPU`` holds) share one clock and lock; the per-op
methods work on their fields in line, as a Python call layer costs
~0.1 µs an op.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import operator
import threading
import warnings
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import CutimelineError
from ...timeline.schema import NONE, EventKind
from ..device import Device, Harvest
from .comm import COMM_STREAM, SimComm
from .datadep import DataDependent
from .host import SimHost, pin
from .local import SimLocal
from .memory import StorageMeter
from .ops import SimOps
from .options import CPU_OWNED, CpuOwnedWarning, SimOptions
from .roofline import GpuProfile, OpModel
from .streams import SimEvent, SimStreams, check_stream
from .values import SimValues

_BEGIN, _END = int(EventKind.BEGIN), int(EventKind.END)

__all__ = ["SimGPU"]


class SimGPU(Device):
    """A virtual GPU for ``ctl.record(device=ctl.SimGPU(...))``.

    ``profile``: "h100", "a100", "h200" or a ``roofline.GpuProfile``.
    Keyword options (times in ns): ``offset_ns`` (device clock at start;
    None: drawn from ``seed``), ``drift_ppm`` (device clock rate error;
    None: drawn from ``seed``, within ±20 ppm), ``quantum_ns`` (clock
    resolution, 500), ``launch_latency_ns`` / ``event_latency_ns`` (None:
    the profile's), ``cost`` (None: roofline; a dict ``{op_name: ns}``, names
    like "aten::mm" or "aten::add.Tensor", other ops by roofline; or a
    callable ``(op_name, args, kwargs, out) -> ns``), ``jitter`` (relative
    log-normal spread of op costs, 0), ``seed``, ``tf32`` (None follows
    torch's TF32 switches), ``owns`` (tensor device types that are device
    work), ``index`` (device index in the Timeline), ``anchor_interval_ns``
    (1 s), ``pings`` (calibration pings at start and at stop), ``clock``
    (``now()`` and ``wait_until(ns)``; ``FakeClock`` drives it by hand), ``bracket``
    (when a BEGIN event executes), ``host_cost`` (below), ``launch_queue``
    (pending launched ops per stream at which a launch blocks the host, 1024
    as in CUDA; 0 or None: unbounded, the host runs any distance ahead),
    ``nonzero_fraction`` / ``unique_fraction`` (0.5: the share of elements
    that ``x[mask]``, ``nonzero``, ``masked_select`` / ``unique`` keep; meta
    tensors have no values, so such counts are modelled: ``datadep.py``),
    ``world_size`` (ranks a collective's time assumes; None: its group's),
    ``read_limit`` and ``values`` (what host reads of simulated tensors
    return, and the bound on modelled reads that steer a loop: ``values.py``).
    They are ``SimOptions``' fields (``options.py``: the defaults, the
    checks); ``gpu.options`` holds them checked, and ``SHOWN_OPTIONS`` read
    as the SimGPU's own attributes (``gpu.profile``, ``gpu.seed``).

    ``bracket="cuda"`` (the default): events behave as CUDA events do; a
    BEGIN executes when its stream reaches it, which on an idle stream is
    when the host records it, before the op's launch (the aligner then
    starts the op's row at its launch, see ``alignment/aligner.py``).
    ``bracket="kernel"``: a BEGIN executes right before its op's work.

    ``owns`` (default ``("meta",)``): tensors on these device types stand
    for device tensors; ops on others (CPU tensors) are host work. With
    ``("cpu",)`` the real op computes on the CPU inside its dispatch, time
    a GPU program would not spend (``host_cost`` replaces it).
    ``host_cost``: what dispatching a simulated op costs the host (see
    ``host.py``): None, the modelled CUDA dispatch cost; "measured", the
    time the op took here; a number of ns; or a callable
    ``(op_name, args, kwargs) -> ns``. Times SimGPU reports are virtual.
    """

    kind = "sim"
    #: the stream collectives run on (NCCL's own, ``comm.py``)
    comm_stream = COMM_STREAM
    #: set by the recorder while it records: ``(kind, host_begin_ns,
    #: host_end_ns)`` of each sync ``synchronize`` makes, for its SYNC span
    on_sync = None

    def __init__(self, profile: str | GpuProfile = "h100", **options: Any):
        # the keyword options are SimOptions' fields, with its defaults: the
        # signature help() shows is made from them (below the class)
        o = self.options = SimOptions(profile, **options)
        if "cpu" in o.owns:
            warnings.warn(CPU_OWNED, CpuOwnedWarning, stacklevel=2)  # the user's line
        self.index = o.index  # the Device interface's, read by the recorder
        self._owned: dict[Any, bool] = {}  # device -> owns(device)
        self.name = f"SimGPU {o.profile.name} (simulated)"
        # the parts, sharing the host clock, one lock and each thread's state
        clock, lock, loc = self._clock, self._lock, self._local = \
            o.clock, threading.Lock(), SimLocal()
        host = self.virtual_host = SimHost(clock, lock, loc, o.host_cost)
        self.streams = SimStreams(clock, lock, loc, host, o.launch_queue, o.launch_latency_ns,
                                  o.event_latency_ns, o.pings)
        self.comm = SimComm(o.profile, lock, loc, self.streams, o.world_size)
        self.datadep = DataDependent(o.profile, loc, o.nonzero_fraction, o.unique_fraction)
        self.values = SimValues(o.seed, o.read_limit, o.values)
        self.ops = SimOps(loc, host, self.streams, self.comm, self.datadep, o.owns, o.cost,
                          OpModel(o.profile, o.tf32), self.values)
        # the op stream's run, bound: the recorder calls it for every op, and
        # a method here calling it would add a call layer (module doc)
        self.run = self.ops.run
        self._start_ns = 0

    def __repr__(self) -> str:
        return (f"SimGPU({self.profile.name!r}, offset_ns={self.offset_ns}, "
                f"drift_ppm={self.drift_ppm:.3f}, quantum_ns={self.quantum_ns})")

    # -- the Device interface ------------------------------------------------
    def owns(self, device: Any) -> bool:
        if self._local.host:
            return False
        # by device: torch.device.type makes a new str at each read (0.3 µs)
        mine = self._owned.get(device)
        if mine is None:
            kind = getattr(device, "type", None)
            mine = (str(device).split(":")[0] if kind is None else kind) in self.options.owns
            if len(self._owned) < 64:
                self._owned[device] = mine
        return mine

    def current_stream(self) -> int:
        return self._local.stream

    def on_step(self, at: int | None = None) -> None:
        """The recorder ended a step (at real host time ``at``): the bound
        on modelled reads that steer a loop counts from here
        (``values.py``), and a knot of the virtual host clock at ``at``
        keeps the step's end before whatever the next step does (knots
        strictly increase: ``SimHost.knot``)."""
        self.values.step()
        host = self.virtual_host
        if at is not None:
            with self._lock:
                if self.streams.recording and not host.real_only():
                    host.knot(at)

    def mark_dispatch(self, t0: int) -> None:
        """The recorder took op's dispatch in hand at ``t0`` (real host
        time), before its BEGIN: the dispatch is charged from there."""
        self._local.t0 = t0

    def start(self) -> None:
        with self._lock:
            if self.streams.recording:
                raise CutimelineError(f"{self.name} is already recording; stop "
                                      f"that recording before starting another.")
            self.streams.start()
            self._start_ns = now = self._clock.now()
            self.virtual_host.start(now)
            if not self.ops.mapped:  # a CUDA mapping keeps values across recordings
                self.values.reset()
            self.streams.anchor(0, now, now)
            self.ops.as_cuda(True)
        self.streams.ping()

    def begin(self, stream: int, seq: int) -> int:
        # The dispatch's start (a knot of the virtual host clock, SimHost.knot)
        # and its BEGIN (SimStreams.record) in line: this and end() run for
        # every simulated op (module doc)
        loc, host, st, o = self._local, self.virtual_host, self.streams, self.options
        with self._lock:
            if not st.recording:
                self._require("begin")
            # recorded when the op's dispatch began (the recorder's mark)
            now = self._clock.now()
            t0, loc.t0 = loc.t0, None
            if host.host_cost == "measured":
                v = now - host.skew
                loc.mark = (now, v)
            else:
                if t0 is not None and t0 < now:
                    now = t0
                # SimHost.knot in line: the stretch since the last knot,
                # less this thread's runqueue delay in it
                rq = host.runqueue_ns()
                last, loc.rq = loc.rq, rq
                kr, kv = host.kr, host.kv
                v = kv[-1]
                if now > kr[-1]:
                    gap = now - kr[-1]
                    lost = 0 if last is None or rq <= last else rq - last
                    # at least 1 ns: what comes after a knot stays after it
                    v += gap - lost if lost < gap else 1
                    kr.append(now)
                    kv.append(v)
                    host.skew = now - v
                loc.mark = (now, v)
            if now - st.anchor_host_ns >= o.anchor_interval_ns:
                st.anchor(stream, now, v)
            true = v + o.event_latency_ns
            free_at = st.free_at
            free = free_at.get(stream, 0)
            if free > true:
                true = free
            if o.bracket == "cuda":
                free_at[stream] = true
            ev = st.events
            i = len(ev)
            ev.append((stream, _BEGIN, seq, now, true, len(st.anchors) - 1))
            st.last_on[stream] = i
        if o.bracket == "kernel":  # executes at the launch: end() or wait()
            # a list: a compiled region's BEGIN waits for its first work, which
            # may be an op launched inside it
            if loc.pending is None:
                loc.pending = []
            loc.pending.append(i)
        return i

    def end(self, stream: int, seq: int, func: Any, args: tuple, kwargs: dict,
            out: Any) -> int:
        now = self._clock.now()  # the launch was done when func returned
        ops = self.ops
        cost = ops.model.cost_ns(func, args, kwargs, out) if ops.cost is None \
            and stream != COMM_STREAM else ops.cost_ns(func, args, kwargs, out, stream)
        loc, host, st, o = self._local, self.virtual_host, self.streams, self.options
        with self._lock:
            if not st.recording:
                self._require("end")
            # SimHost.close in line: the dispatch lasted its modelled cost
            m, loc.mark = loc.mark, None
            ns, loc.ns = loc.ns, None
            kr, kv = host.kr, host.kv
            measured = host.host_cost == "measured"
            if m is not None and not measured and now > kr[-1]:
                if ns is None:
                    info = ops.seen.get(id(func)) or ops.info(func)
                    ns = info[2]
                    if ns is None:
                        ns = host.dispatch_ns(info[0], args, kwargs)
                v = m[1] + ns
                if kv[-1] > v:
                    v = kv[-1]
                kr.append(now)
                kv.append(v)
                host.skew = now - v
            loc.op = None
            v = now - host.skew if now >= kr[-1] else host.virtual(now)
            if o.jitter and cost:
                cost = int(round(cost * math.exp(
                    o.jitter * o.rng.standard_normal())))
            # the kernel starts launch_latency after its dispatch began, not
            # before the launch returned: on an idle stream, at the return
            # (no mark: a region's END, its dispatch's start unknown here)
            start = v + o.launch_latency_ns if m is None else \
                max(v, m[1] + o.launch_latency_ns)
            free_at = st.free_at
            free = free_at.get(stream, 0)
            if free > start:
                start = free
            if loc.pending:
                st.settle(stream, start, now)
            finish = start + cost
            if o.launch_queue:
                q = st.pending.get(stream)
                if q is None:
                    q = st.pending[stream] = deque()
                q.append(finish)
            true = v + o.event_latency_ns  # the END event (SimStreams.record)
            if finish > true:
                true = finish
            free_at[stream] = true
            ev = st.events
            i = len(ev)
            ev.append((stream, _END, seq, now, true, len(st.anchors) - 1))
            st.last_on[stream] = i
            # the roofline and this took no host time: a flat stretch of the map
            real = self._clock.now()
            if not measured and real > now and real > kr[-1]:
                if now > kr[-1]:
                    kr.append(now)
                    kv.append(now - host.skew)
                kr.append(real)
                kv.append(kv[-1])
                host.skew = real - kv[-1]
            # what the recorder does from here on is its own (recorder_left)
            loc.since = real
            return i

    def wait(self, stream: int | None) -> None:
        self.streams.wait(stream)

    def note_sync(self, kind: str, stream: int | None, seq: int,
                  host_begin_ns: int, host_end_ns: int) -> None:
        with self._lock:
            self._require("note_sync")
            self.streams.note_sync(kind, stream, seq, host_begin_ns, host_end_ns)

    def recorder_work(self, ns: int) -> int:
        """The recorder's own time: not the program's, so the virtual host
        leaves it out (``SimLocal.discount``); none while this thread is
        inside a simulated launch, which lasts its modelled cost whatever
        ran in it (a garbage collection: ``recording/hooks/gcpauses.py``)."""
        loc = self._local
        if loc.mark is not None:
            return 0
        loc.discount += ns
        return ns

    def keeps_host_clock(self) -> bool:
        """The virtual host is this simulator's (``SimHost``), unless
        ``host_cost="measured"`` makes it the real one."""
        return self.virtual_host.host_cost != "measured"

    def metadata_ns(self, device: Any, func: Any, args: tuple, kwargs: dict) -> int | None:
        """A view or ``empty`` of a simulated tensor lasts the virtual host's
        price of it (``SimHost.metadata_ns``), not its meta kernel's time."""
        if not self.owns(device):
            return None
        return self.virtual_host.metadata_ns(
            func.name() if hasattr(func, "name") else str(func), args, kwargs)

    def recorder_left(self, now: int, since: int | None, entry_ns: int) -> None:
        loc = self._local
        if since is None:  # a launch: since its end (end())
            since, loc.since = loc.since, None
        loc.discount += entry_ns + (now - since if since is not None and now > since else 0)

    def memory_meter(self) -> StorageMeter:
        """The bytes of the storages its ops make (``memory.py``)."""
        return StorageMeter()

    def harvest(self) -> Harvest:
        with self._lock:
            self._require("harvest")
        self.streams.ping()
        with self._lock:
            self.streams.recording = False
            self.ops.as_cuda(False)
            try:
                h = self.streams.harvest(self.options, self.name, self._start_ns)
                if self.ops.mapped:  # CUDA was this GPU (cuda/mapping.py): how
                    h.meta["cuda_mapped"] = dict(self.ops.mapping_said)
                if self.ops.warnings:  # what it did not simulate (ops.py)
                    h.meta["warnings"] = list(self.ops.warnings)
                    self.ops.warnings.clear()
                return h
            finally:
                self.virtual_host.stop()

    # -- controls a program uses by hand ---------------------------------------
    def as_cuda(self) -> Any:
        """A context manager: inside it, CUDA means this simulated GPU, so
        unmodified CUDA code (``device="cuda"``, ``.cuda()``,
        ``torch.cuda.*``, ``torch.autocast("cuda")``) runs on it, recorded
        or not (``cuda/mapping.py``); ``cutimeline record --device sim``
        runs a script inside one."""
        from .cuda.mapping import CudaMapping  # torch's mode machinery, when asked
        return CudaMapping(self)

    def stream(self, stream: int) -> contextlib.AbstractContextManager[int]:
        """Make ``stream`` this thread's current stream inside the block."""
        return self.streams.stream(stream)

    def set_stream(self, stream: int) -> None:
        """Make ``stream`` this thread's current stream (``torch.cuda.set_stream``)."""
        self._local.stream = check_stream(stream)

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
        return self.streams.record_event(stream)

    def wait_event(self, event: SimEvent, stream: int | None = None) -> None:
        """Work enqueued on ``stream`` from now on starts after ``event``."""
        self.streams.wait_event(event, stream)

    def wait_stream(self, waiting: int, on: int) -> None:
        """Stream ``waiting``'s next work starts no earlier than the end of
        the work already enqueued on stream ``on``."""
        self.wait_event(self.record_event(check_stream(on)), check_stream(waiting))

    def synchronize(self, stream: int | None = None) -> None:
        """Block the host until ``stream`` (None: every stream) drains, and
        note the sync while recording, like ``torch.cuda.synchronize`` (kind
        "synchronize") or ``Stream.synchronize`` ("stream_synchronize")."""
        s = None if stream is None else check_stream(stream)
        t0 = self._clock.now()
        self.streams.wait(s)
        if self.streams.recording:
            kind, t1 = "synchronize" if s is None else "stream_synchronize", self._clock.now()
            self.note_sync(kind, s, NONE, t0, t1)
            if self.on_sync is not None:
                self.on_sync(kind, t0, t1)
            self.recorder_work(self._clock.now() - t1)  # the notes: no program's time

    def drained_at(self, stream: int | None = None) -> int:
        """True host time (ns) at which ``stream`` (None: every stream)
        finishes the work enqueued so far."""
        return self.streams.drained_at(stream)

    def pin_memory(self, tensor: Any) -> Any:
        """``tensor`` marked as pinned host memory for this simulation, and
        returned: what ``tensor.pin_memory()`` gives on a CUDA build, which
        torch without CUDA cannot pin (``host.pin``)."""
        return pin(tensor)

    def collective_stream(self, stream: int) -> int:
        """The stream a collective launched from ``stream`` runs on (comm.py)."""
        return self.comm.collective_stream(stream)

    def comm_wait(self, stream: int | None = None) -> None:
        """``stream`` (default: the current one) waits for the collectives
        launched so far: what ``Work.wait()`` and ``wait_tensor`` do."""
        self.comm.comm_wait(stream)

    def host_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(real, virtual) knots of the host-time map of the recording."""
        return self.virtual_host.host_map()

    def host_now(self) -> int:
        """The virtual host time now (ns; the real one when not recording)."""
        with self._lock:
            return self.virtual_host.virtual(self._clock.now())

    def fetched(self, begin: int, end_virtual: int) -> None:
        """A DataLoader fetch that began at real host time ``begin`` returns
        now, at virtual time ``end_virtual`` as its workers are modelled
        (``recording/hooks/fetches.py``; ``SimHost.jump``)."""
        self.virtual_host.jump(begin, end_virtual)

    # -- internals ----------------------------------------------------------------
    def _require(self, what: str) -> None:
        if not self.streams.recording:
            raise CutimelineError(f"{self.name}: {what}() was called while not "
                                  f"recording; call start() first.")


#: the options a SimGPU shows as its own read-only attributes (``gpu.profile``,
#: ``gpu.seed``, ...), read from ``gpu.options``
SHOWN_OPTIONS = ("profile", "seed", "bracket", "offset_ns", "drift_ppm", "quantum_ns",
                 "launch_latency_ns", "event_latency_ns", "launch_queue",
                 "anchor_interval_ns", "pings", "cost", "jitter", "world_size",
                 "nonzero_fraction", "unique_fraction")
for _name in SHOWN_OPTIONS:
    setattr(SimGPU, _name, property(operator.attrgetter(f"options.{_name}"),
                                    doc=f"``options.{_name}`` (``SimOptions``)."))

# SimGPU(profile, *, every SimOptions field with its default): what help()
# and inspect.signature show, written once, in SimOptions
SimGPU.__init__.__signature__ = inspect.Signature(
    [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] +
    [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name == "profile"
                       else inspect.Parameter.KEYWORD_ONLY, default=f.default,
                       annotation=f.type)
     for f in dataclasses.fields(SimOptions) if f.init])
