"""SimGPU: a simulated GPU behind the recorder's Device interface.

``SimGPU`` owns ``meta`` tensors: every op on them (outside a DataLoader
fetch or a ``with gpu.host():`` block) is treated as work for a virtual
GPU, and CPU tensors stay host work. The real op still runs, on meta
tensors (metadata only); the host is charged what dispatching it to CUDA
would cost, on a virtual host clock (``simhost.py``), and the simulator
enqueues its roofline cost (see ``roofline.py``) on a virtual stream that
keeps its own ``free_at`` on that clock (``simstreams.py``):

* an op launched (its END call) at host time h starts at
  ``max(free_at, h + launch_latency)`` and lasts ``cost(op)``;
* a BEGIN event recorded at h executes at ``max(free_at, h + event_latency)``,
  an END event at ``max(op end, h + event_latency)``;
* a sync makes the host really wait until its stream (or all) has drained;
* a launch into a stream that already holds ``launch_queue`` launched ops
  not yet finished (1024: CUDA blocks the host at about 1,024 pending
  launches) waits, inside the op, until the oldest of them has finished
  (``SimStreams._room``);
* a torch.distributed collective runs on a communication stream of its
  own, as NCCL's kernel does (``simcomm.py``).

The recorder sees what it would see from CUDA: a device clock with its own
offset and drift, quantised to 0.5 µs, read only as float32-millisecond
elapsed times relative to segment anchors laid down every ~1 s and chained
(see ``chain_raw_ns``). The true host time of every event goes to
``Harvest.truth`` and the true clock to ``Harvest.meta["sim"]``, so the
aligner can be scored. Everything is labelled a simulation.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE, EventKind
from .device import Device, Harvest
from .roofline import GpuProfile, OpModel, profile_named
from .simclock import (FakeClock, HostClock, chain_raw_ns, device_time_ns, elapsed_ms,
                       read_device_clock, synthetic_events)
from .simcomm import SimComm, check_world_size
from .simdatadep import check_fraction
from .simhost import SimHost, SimLocal, _check_host_cost
from .simops import SimOps
from .simstreams import SimStreams

_BEGIN, _END = int(EventKind.BEGIN), int(EventKind.END)

__all__ = ["SimGPU", "HostClock", "FakeClock", "device_time_ns", "elapsed_ms",
           "chain_raw_ns", "read_device_clock", "synthetic_events"]


def _check_int(name: str, value: Any, low: int, unit: str = "ns") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or value < low:
        raise CutimelineError(
            f"SimGPU option {name}={value!r} must be an integer ≥ {low}"
            f"{' ' + unit if unit else ''}.")
    return int(value)


class SimGPU(SimHost, SimStreams, SimOps, SimComm, Device):
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
    tensors have no values, so such counts are modelled: ``simdatadep.py``),
    ``world_size`` (ranks a collective's time assumes; None: its group's).

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
    ``simhost.py``): None, the modelled CUDA dispatch cost; "measured", the
    time the op took here; a number of ns; or a callable
    ``(op_name, args, kwargs) -> ns``. Times SimGPU reports are virtual.
    """

    kind = "sim"

    def __init__(self, profile: str | GpuProfile = "h100", *,
                 offset_ns: int | None = None, drift_ppm: float | None = None,
                 quantum_ns: int = 500, launch_latency_ns: int | None = None,
                 event_latency_ns: int | None = None,
                 cost: Mapping[str, int] | Callable[..., float] | None = None,
                 jitter: float = 0.0, seed: int = 0, tf32: bool | None = None,
                 owns: tuple[str, ...] = ("meta",), index: int = 0,
                 anchor_interval_ns: int = 1_000_000_000, pings: int = 3,
                 clock: Any = None, bracket: str = "cuda", host_cost: Any = None,
                 launch_queue: int | None = 1024, nonzero_fraction: float = 0.5,
                 unique_fraction: float = 0.5, world_size: int | None = None):
        self.profile = profile_named(profile)
        seed = _check_int("seed", seed, 0, "")
        rng = np.random.default_rng(seed)
        if offset_ns is None:
            offset_ns = int(rng.integers(10**9, 10**12))
        if drift_ppm is None:
            drift_ppm = float(rng.uniform(-20, 20))
        self.offset_ns = _check_int("offset_ns", offset_ns, 0)
        if isinstance(drift_ppm, bool) or not isinstance(drift_ppm, (int, float)) \
                or not math.isfinite(drift_ppm) or abs(drift_ppm) >= 1e5:
            raise CutimelineError(f"SimGPU option drift_ppm={drift_ppm!r} must be "
                                  f"a finite number of ppm below 100000 in size.")
        self.drift_ppm = float(drift_ppm)
        self.quantum_ns = _check_int("quantum_ns", quantum_ns, 1)
        p = self.profile
        self.launch_latency_ns = _check_int(
            "launch_latency_ns", p.launch_latency_ns if launch_latency_ns is None
            else launch_latency_ns, 0)
        self.event_latency_ns = _check_int(
            "event_latency_ns", p.event_latency_ns if event_latency_ns is None
            else event_latency_ns, 0)
        if not (cost is None or callable(cost) or isinstance(cost, Mapping)):
            raise CutimelineError(
                f"SimGPU option cost={cost!r} must be None (roofline), a dict "
                f"{{op_name: ns}} or a callable (op_name, args, kwargs, out) -> ns.")
        if isinstance(cost, Mapping):
            cost = {str(k): _check_int(f"cost[{k!r}]", v, 0)
                    for k, v in cost.items()}
        self.cost = cost
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) \
                or not 0 <= jitter <= 2:
            raise CutimelineError(f"SimGPU option jitter={jitter!r} must be a "
                                  f"number from 0 to 2 (relative spread).")
        self.jitter = float(jitter)
        if tf32 not in (None, True, False):
            raise CutimelineError(f"SimGPU option tf32={tf32!r} must be None "
                                  f"(follow torch), True or False.")
        if isinstance(owns, str):
            owns = (owns,)
        if not isinstance(owns, (tuple, list, set, frozenset)) or not owns or \
                not all(isinstance(o, str) and o for o in owns):
            raise CutimelineError(f"SimGPU option owns={owns!r} must name tensor "
                                  f"device types, such as ('cpu', 'meta').")
        self._owns = frozenset(owns)
        self._owned: dict[Any, bool] = {}  # device -> owns(device)
        self._host_cost = _check_host_cost(host_cost)
        self.launch_queue = _check_int("launch_queue", 0 if launch_queue is None
                                       else launch_queue, 0, "")
        if bracket not in ("kernel", "cuda"):
            raise CutimelineError(f"SimGPU option bracket={bracket!r} must be "
                                  f"'kernel' (rows are the simulated work) or "
                                  f"'cuda' (BEGIN executes when recorded).")
        self.bracket = bracket
        self.index = _check_int("index", index, 0, "")
        self.anchor_interval_ns = _check_int("anchor_interval_ns",
                                             anchor_interval_ns, 1)
        self.pings = _check_int("pings", pings, 1, "")
        if clock is None:
            clock = HostClock()
        elif not (callable(getattr(clock, "now", None))
                  and callable(getattr(clock, "wait_until", None))):
            raise CutimelineError(f"SimGPU option clock={clock!r} must have "
                                  f"now() -> ns and wait_until(ns) methods.")
        self._clock = clock
        self.seed, self._rng = seed, rng
        self.nonzero_fraction = check_fraction("nonzero_fraction", nonzero_fraction)
        self.unique_fraction = check_fraction("unique_fraction", unique_fraction)
        self.world_size = check_world_size(world_size)
        self._model = OpModel(self.profile, tf32)
        self.name = f"SimGPU {self.profile.name} (simulated)"
        self._lock = threading.Lock()
        self._local = SimLocal()
        self._ops_seen: dict[int, tuple] = {}  # id(OpOverload) -> SimOps._op_info
        self._free_at: dict[int, int] = {}
        self._pending: dict[int, deque] = {}  # finish times of launched ops, per stream
        self._started, self._start_ns = False, 0

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
            mine = (str(device).split(":")[0] if kind is None else kind) in self._owns
            if len(self._owned) < 64:
                self._owned[device] = mine
        return mine

    def current_stream(self) -> int:
        return self._local.stream

    def start(self) -> None:
        with self._lock:
            if self._started:
                raise CutimelineError(f"{self.name} is already recording; stop "
                                      f"that recording before starting another.")
            self._started = True
            # one tuple per event: stream, kind, seq, host_record, true, anchor
            self._ev: list[tuple[int, ...]] = []
            self._anchors: list[int] = []
            # one tuple per sync: seq, kind, stream, last_event, begin, end, thread ident
            self._sy: list[tuple[Any, ...]] = []
            self._last_on: dict[int, int] = {}
            self._start_ns = now = self._clock.now()
            self._host_start(now)
            self._anchor(0, now, now)
            self._as_cuda(True)
        self._ping()

    def begin(self, stream: int, seq: int) -> int:
        # The dispatch's start (a knot of the virtual host clock, SimHost)
        # and its BEGIN (SimStreams._record) in line: this and end() run for
        # every simulated op, and each call layer cost ~0.1 µs (issue 25)
        loc = self._local
        with self._lock:
            if not self._started:
                self._require("begin")
            # recorded when the op's dispatch began (the recorder's mark)
            now = self._clock.now()
            t0, loc.t0 = loc.t0, None
            if self._host_cost == "measured":
                v = now - self._skew
            else:
                if t0 is not None and t0 < now:
                    now = t0
                # SimHost._knot in line: the stretch since the last knot,
                # less this thread's runqueue delay in it
                rq = self._runqueue_ns()
                last, loc.rq = loc.rq, rq
                kr, kv = self._kr, self._kv
                v = kv[-1]
                if now > kr[-1]:
                    gap = now - kr[-1]
                    lost = 0 if last is None or rq <= last else rq - last
                    if lost < gap:
                        v += gap - lost
                    kr.append(now)
                    kv.append(v)
                    self._skew = now - v
                loc.mark = (now, v)
            if now - self._anchor_host_ns >= self.anchor_interval_ns:
                self._anchor(stream, now, v)
            true = v + self.event_latency_ns
            free = self._free_at.get(stream, 0)
            if free > true:
                true = free
            if self.bracket == "cuda":
                self._free_at[stream] = true
            i = len(self._ev)
            self._ev.append((stream, _BEGIN, seq, now, true, len(self._anchors) - 1))
            self._last_on[stream] = i
        if self.bracket == "kernel":  # executes at the launch: end() or wait()
            # a list: a compiled region's BEGIN waits for its first work, which
            # may be an op launched inside it
            if loc.pending is None:
                loc.pending = []
            loc.pending.append(i)
        return i

    def end(self, stream: int, seq: int, func: Any, args: tuple, kwargs: dict,
            out: Any) -> int:
        now = self._clock.now()  # the launch was done when func returned
        cost = self._model.cost_ns(func, args, kwargs, out) if self.cost is None \
            and stream != self.comm_stream else self._cost_ns(func, args, kwargs, out, stream)
        loc = self._local
        with self._lock:
            if not self._started:
                self._require("end")
            # SimHost._close in line: the dispatch lasted its modelled cost
            m, loc.mark = loc.mark, None
            ns, loc.ns = loc.ns, None
            kr, kv = self._kr, self._kv
            if m is not None and self._host_cost != "measured" and now > kr[-1]:
                if ns is None:
                    info = self._op_info(func)
                    ns = info[2]
                    if ns is None:
                        ns = self._dispatch_ns(info[0], args, kwargs)
                v = m[1] + ns
                if kv[-1] > v:
                    v = kv[-1]
                kr.append(now)
                kv.append(v)
                self._skew = now - v
            loc.op = None
            v = now - self._skew if now >= kr[-1] else self._virtual(now)
            if self.jitter and cost:
                cost = int(round(cost * math.exp(
                    self.jitter * self._rng.standard_normal())))
            start = v + self.launch_latency_ns
            free = self._free_at.get(stream, 0)
            if free > start:
                start = free
            if loc.pending:
                self._settle(stream, start, now)
            finish = start + cost
            if self.launch_queue:
                q = self._pending.get(stream)
                if q is None:
                    q = self._pending[stream] = deque()
                q.append(finish)
            true = v + self.event_latency_ns  # the END event (SimStreams._record)
            if finish > true:
                true = finish
            self._free_at[stream] = true
            i = len(self._ev)
            self._ev.append((stream, _END, seq, now, true, len(self._anchors) - 1))
            self._last_on[stream] = i
            # the roofline and this took no host time (SimHost._aside in line)
            real = self._clock.now()
            if self._host_cost != "measured" and real > now and real > kr[-1]:
                if now > kr[-1]:
                    kr.append(now)
                    kv.append(now - self._skew)
                kr.append(real)
                kv.append(kv[-1])
                self._skew = real - kv[-1]
            return i

    def wait(self, stream: int | None) -> None:
        with self._lock:
            # a host-blocking op launched its work before it blocked
            now = self._clock.now()
            op = self._local.op or ("aten::_local_scalar_dense", (), {})
            self._close(now, *op)
            v = self._virtual(now)
            if self._local.count is not None and stream is not None:
                self._count_kernel(stream, v, now)  # a data-dependent op's (simdatadep)
            for s in {self._ev[i][0] for i in self._local.pending or ()}:
                self._settle(s, max(self._free_at.get(s, 0),
                                    v + self.event_latency_ns), now)
            if stream is None:
                target = max(self._free_at.values(), default=0)
            else:
                target = self._free_at.get(stream, 0)
            if self._started:  # what this wait covers, for note_sync
                self._local.waited = (stream, self._last_event(stream))
        self._hold(target)

    def note_sync(self, kind: str, stream: int | None, seq: int,
                  host_begin_ns: int, host_end_ns: int) -> None:
        with self._lock:
            self._require("note_sync")
            waited = self._local.waited
            self._local.waited = None
            # Events other threads recorded after our wait began are not
            # covered: use the newest event as of the wait when we have it.
            last = waited[1] if waited and waited[0] == stream \
                else self._last_event(stream)
            self._sy.append((seq, kind, NONE if stream is None else stream,
                             last, host_begin_ns, host_end_ns, threading.get_ident()))

    def memory_meter(self) -> Any:
        """The bytes of the storages its ops make (``simmemory.py``)."""
        from .simmemory import StorageMeter
        return StorageMeter()

    def harvest(self) -> Harvest:
        with self._lock:
            self._require("harvest")
        self._ping()
        with self._lock:
            self._started = False
            self._as_cuda(False)
            try:
                return self._harvest()
            finally:
                self._host_stop()

    # -- internals (the lock is held where noted) ------------------------------
    def _require(self, what: str) -> None:
        if not self._started:
            raise CutimelineError(f"{self.name}: {what}() was called while not "
                                  f"recording; call start() first.")
