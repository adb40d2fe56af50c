"""SimGPU's host side: what a CUDA launch costs the host, and the clock that charges it.

A simulated op runs for real on ``meta`` tensors, inside its dispatch. What
that costs this CPU (a meta kernel: 0.1–1.5 ms for add, gelu, layer_norm,
batch-norm) says nothing about what the same op costs a host that launches
it on a GPU, where the dispatcher sets up the kernel and calls
``cudaLaunchKernel`` in a few µs. So the simulator keeps a *virtual host
clock*: in it each simulated op's dispatch (from its BEGIN event to its
launch) lasts a modelled CUDA dispatch cost (``dispatch_ns``), and every
other instant of the host (the user's Python, data loading, sleeps, waits
for the device, the recorder's own bookkeeping) lasts what it really did.
The simulated device runs on that clock; at stop the recorder maps every
host time of the Timeline onto it with ``host_map`` (knots of a
piecewise-linear, non-decreasing map: real → virtual), so the Timeline
shows the host a CUDA program would have had.

The modelled costs (``DISPATCH_NS``) are the part of an eager op's host
time spent below the dispatch mode: the dispatcher, the kernel's argument
setup and the launch. Published measurements put the launch call itself
(``cudaLaunchKernel``) at 2–4 µs on current x86 hosts and a whole small
eager op, from Python, at 5–10 µs (about 100k–200k ops/s), of which the
Python binding and autograd (above the mode, measured for real here) take
about half. cuBLAS/cuDNN calls pick an algorithm first; a foreach op packs
its tensor lists into kernel arguments; a copy from pageable host memory
is staged through a pinned buffer by the host. These are estimates good to
a factor of about two, which is what a verdict needs: the gap between
launch-bound and GPU-bound loops is one to three orders of magnitude.
``SimGPU(host_cost=...)`` replaces them (a number of ns per op, a callable,
or "measured": the wall-clock time the op took here).

Two more things a real host would not have lost are taken out of the
virtual clock: the simulator's own bookkeeping (the roofline cost of each
op, its event records), and the time the launching thread sat runnable
but waiting for a CPU (``/proc/thread-self/schedstat``'s run-queue time),
which on a loaded machine would otherwise read as the program's host time.
A wait for the device ends on the virtual clock no earlier than the work it
waited for.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from typing import Any

import numpy as np
import torch

from ..errors import CutimelineError
from ..timeline.ranks import piecewise

__all__ = ["DISPATCH_NS", "dispatch_ns", "fixed_dispatch_ns", "SimHost", "SimLocal"]

DISPATCH_NS = {
    "kernel": 4_000,       # one pointwise/reduction kernel through the dispatcher
    "library": 6_000,      # cuBLAS / cuDNN / fused attention: algorithm choice, then launch
    "per_tensor": 250,     # foreach ops: per tensor packed into launch arguments
    "copy": 8_000,         # cudaMemcpyAsync and its bookkeeping
    "pageable_Bps": 10e9,  # host staging of a pageable host→device copy (bytes/s)
}

_LIBRARY = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution",
            "aten::convolution_backward", "aten::_convolution", "aten::cudnn_convolution",
            "aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention",
            "aten::cudnn_batch_norm", "aten::native_batch_norm", "aten::_addmm_activation")
_COPIES = ("aten::_to_copy", "aten::copy_")
_READS = ("aten::_local_scalar_dense", "aten::item")


def _tensors(args: tuple) -> int:
    n = 0
    for a in args:
        if type(a) is list or type(a) is tuple:
            n += sum(isinstance(b, torch.Tensor) for b in a)
    return n


def _devices(name: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """(source, destination) torch.device of a copy op."""
    if name.startswith("aten::_to_copy"):
        src = args[0].device
        return src, torch.device(kwargs.get("device") or src)
    return args[1].device, args[0].device


def dispatch_ns(name: str, args: tuple, kwargs: dict) -> int:
    """Modelled host cost (ns) of dispatching op ``name`` to a CUDA GPU:
    from its BEGIN event to the return of its launch (see the module doc)."""
    d = DISPATCH_NS
    if name.startswith("aten::_foreach_") or name.startswith("aten::_fused_"):
        return d["kernel"] + d["per_tensor"] * _tensors(args)
    if name.startswith(_COPIES) and args and isinstance(args[0], torch.Tensor):
        src, dst = _devices(name, args, kwargs)
        if src.type == "cpu" and dst.type != "cpu":
            host = args[0] if name.startswith("aten::_to_copy") else args[1]
            pinned = kwargs.get("non_blocking", False) and _is_pinned(host)
            if not pinned:  # staged through a pinned buffer by the host
                return d["copy"] + int(host.nbytes / d["pageable_Bps"] * 1e9)
        return d["copy"] if src.type != dst.type else d["kernel"]
    if name.startswith(_READS):
        return d["copy"]
    if name.startswith(_LIBRARY):
        return d["library"]
    return d["kernel"]


def fixed_dispatch_ns(name: str) -> int | None:
    """``dispatch_ns`` of op ``name`` when its name alone fixes it (most
    ops: a SimGPU prices them when it first meets the op, not per call);
    None for foreach/fused ops and copies, whose cost depends on their
    arguments."""
    if name.startswith(("aten::_foreach_", "aten::_fused_")) or name.startswith(_COPIES):
        return None
    d = DISPATCH_NS
    return d["copy"] if name.startswith(_READS) else \
        d["library"] if name.startswith(_LIBRARY) else d["kernel"]


def _is_pinned(t: torch.Tensor) -> bool:
    if getattr(t, "_cutimeline_pinned", False):  # SimGPU.pin_memory
        return True
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # no CUDA in this build: nothing is pinned
        return False


def _check_host_cost(host_cost: Any) -> Any:
    if host_cost is None or host_cost == "measured" or callable(host_cost):
        return host_cost
    if isinstance(host_cost, (int, float, np.number)) and not isinstance(host_cost, bool) \
            and math.isfinite(host_cost) and host_cost >= 0:
        return int(host_cost)
    raise CutimelineError(
        f"SimGPU option host_cost={host_cost!r} must be None (the modelled CUDA "
        f"dispatch cost), 'measured' (the time an op takes here), a number of ns "
        f"per op, or a callable (op_name, args, kwargs) -> ns.")


class SimLocal(threading.local):
    """SimGPU's per-thread state, with its defaults as class attributes: a
    thread's first read of one finds the default without the
    ``AttributeError`` a missing attribute of a plain ``threading.local``
    raises inside ``getattr`` (about 0.3 µs each, several per op)."""
    host = 0          # depth of ``with gpu.host():`` blocks
    stream = 0        # the current stream
    t0 = None         # the recorder's first look at the op being dispatched
    mark = None       # (real, virtual) start of that op's dispatch
    ns = None         # its dispatch cost, when run() or a launch waiting for room priced it
    op = None         # (name, args, kwargs) of the op running, for wait()
    pending = None    # BEGINs waiting for their work (bracket="kernel")
    waited = None     # (stream, last event) of the last wait, for note_sync
    count = None      # (ns, args) of a data-dependent op's count kernel (simdatadep)
    rq = None         # runqueue time at this thread's last knot
    sched_fd = None   # its /proc/thread-self/schedstat


class SimHost:
    """The host half of ``SimGPU`` (mixed into it): the virtual host clock
    and what each simulated op's dispatch costs on it. Works on the
    simulator's lock, clock and per-thread state."""

    _host_cost: Any = None
    _skew = 0          # real − virtual after the last knot (0: not recording)
    _kr: Any = None    # the map's knots, made by _host_start

    def _real_only(self) -> bool:
        """Whether the host clock is the real one: host_cost="measured", or
        not recording (a synchronize() between recordings)."""
        return self._host_cost == "measured" or self._kr is None

    def _host_start(self, now: int) -> None:
        """A new recording: virtual = real at ``now`` (lock held)."""
        self._skew = 0  # real − virtual, after the last knot
        self._kr, self._kv = array("q", [now]), array("q", [now])
        self._sched_fds: list[int] = []
        self._local.t0 = self._local.mark = None
        self._local.rq = self._runqueue_ns()

    def _vnow(self) -> tuple[int, int]:
        """(real, virtual) host time now."""
        real = self._clock.now()
        return real, real - self._skew

    def _virtual(self, real: int) -> int:
        """Virtual time of real host time ``real`` (lock held): after the
        last knot, ``real − skew``; before it (a time read before another
        thread's later knot), on the map."""
        kr = self._kr
        if kr is None or real >= kr[-1]:
            return real - self._skew
        return int(piecewise([real], np.frombuffer(kr, np.int64),
                             np.frombuffer(self._kv, np.int64))[0])

    def mark_dispatch(self, t0: int) -> None:
        """The recorder took op's dispatch in hand at ``t0`` (real host
        time), before its BEGIN: the dispatch is charged from there."""
        self._local.t0 = t0

    def _knot(self, real: int) -> int:
        """A knot at ``real``, the stretch since the last one less this
        thread's runqueue delay in it (lock held); its virtual time. The
        time a thread spent runnable but not running (waiting for a CPU on
        a loaded machine, from the kernel's schedstat) is time the program
        would not have lost on a host of its own. ``SimGPU.begin`` (each
        op's dispatch starts at a knot) does the same in line."""
        rq = self._runqueue_ns()
        last = self._local.rq
        self._local.rq = rq
        lr, lv = self._kr[-1], self._kv[-1]
        if real <= lr:  # another thread's knot is later
            return lv
        gap = real - lr
        v = lv + gap - min(max(rq - last, 0) if last is not None else 0, gap)
        self._kr.append(real)
        self._kv.append(v)
        self._skew = real - v
        return v

    def _hold(self, target: int, begun: int | None = None) -> None:
        """Block the host until virtual time ``target``: a knot where the
        wait begins, and one where it ends, no earlier than ``target`` on
        the virtual clock (the device work it waited for is done by then),
        later only by what the host's own lateness was, less runqueue delay.
        ``begun``: the virtual time the wait begins at (a launch waiting
        for room: the end of its op's modelled dispatch), default now."""
        measured = self._real_only()
        with self._lock:
            now = self._clock.now()
            if measured:
                v = now - self._skew
            elif begun is None:
                v = self._knot(now)
            else:
                v = max(begun, self._kv[-1])
                self._local.rq = self._runqueue_ns()
                if now > self._kr[-1]:
                    self._kr.append(now)
                    self._kv.append(v)
                    self._skew = now - v
            real_target = target + self._skew
        self._clock.wait_until(real_target)
        if measured:
            return
        with self._lock:
            end = self._clock.now()
            rq = self._runqueue_ns()
            late = end - max(real_target, now) - max(rq - (self._local.rq or rq), 0)
            self._local.rq = rq
            ve = max(max(v, target) + max(late, 0), self._kv[-1])
            if end > self._kr[-1]:
                self._kr.append(end)
                self._kv.append(ve)
                self._skew = end - ve

    def _close(self, real: int, name: str, args: tuple, kwargs: dict) -> None:
        """End this thread's dispatch at ``real``: on the virtual clock it
        lasted the modelled cost (lock held)."""
        loc = self._local
        m, loc.mark = loc.mark, None
        ns, loc.ns = loc.ns, None
        if m is None or self._real_only() or real <= self._kr[-1]:
            return
        if ns is None:  # not priced already by run() or a launch that waited for room
            ns = self._dispatch_ns(name, args, kwargs)
        v = max(m[1] + ns, self._kv[-1])
        self._kr.append(real)
        self._kv.append(v)
        self._skew = real - v

    def _dispatch_ns(self, name: str, args: tuple, kwargs: dict) -> int:
        """The host cost of dispatching op ``name`` on the virtual clock."""
        cost = self._host_cost
        return dispatch_ns(name, args, kwargs) if cost is None else \
            cost if isinstance(cost, int) else self._call_host_cost(name, args, kwargs)

    def _fixed_ns(self, name: str) -> int | None:
        """``_dispatch_ns`` of op ``name`` when the name alone fixes it."""
        cost = self._host_cost
        if cost is None:
            return fixed_dispatch_ns(name)
        return cost if isinstance(cost, int) else None

    def _runqueue_ns(self) -> int:
        """Time this thread has waited for a CPU, from
        ``/proc/thread-self/schedstat`` (0 where there is none)."""
        fd = self._local.sched_fd
        if fd is not None and fd >= 0:  # the common case first: one read per op
            try:
                return int(os.pread(fd, 64, 0).split()[1])
            except (OSError, ValueError, IndexError):
                return 0
        if fd is None:
            try:
                fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
                self._sched_fds.append(fd)
            except OSError:  # not Linux: nothing to subtract
                fd = -1
            self._local.sched_fd = fd
        if fd < 0:
            return 0
        try:
            return int(os.pread(fd, 64, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def _host_stop(self) -> None:
        for fd in self._sched_fds:
            os.close(fd)
        self._sched_fds = []
        self._local.sched_fd = None
        self._kr, self._skew = None, 0  # the map is handed over; the real clock again

    def _call_host_cost(self, name: str, args: tuple, kwargs: dict) -> int:
        ns = self._host_cost(name, args, kwargs)
        if isinstance(ns, bool) or not isinstance(ns, (int, float, np.number)) \
                or not math.isfinite(ns) or ns < 0:
            raise CutimelineError(f"The SimGPU host_cost function returned {ns!r} for "
                                  f"{name}; it must return a duration ≥ 0 in ns.")
        return int(round(ns))

    def _real_of(self, virtual: np.ndarray) -> np.ndarray:
        """Real host times of virtual ones (the map's inverse)."""
        real, virt = self.host_map()
        return piecewise(virtual, virt, real)

    def host_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(real, virtual) knots of the host-time map of the recording."""
        return (np.frombuffer(self._kr, np.int64).copy(),
                np.frombuffer(self._kv, np.int64).copy())
