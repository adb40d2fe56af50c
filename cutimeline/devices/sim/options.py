"""SimGPU's options: ``SimOptions``, one frozen object that holds their
defaults and checks itself when made; each bad option is a
``CutimelineError`` sentence that names it and what it takes (``SimGPU``'s
docstring says what each means; its signature is made from the fields). The seed's generator draws the device clock's offset and drift when
they are not given, and goes on to draw the jitter of op costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import CutimelineError
from ...timeline.gpus import EVENT_TICK_NS, LAUNCH_QUEUE
from .clock import HostClock
from .roofline import GpuProfile, profile_named

#: what ``owns=("cpu",)`` cannot give, said once per SimGPU made with it
CPU_OWNED = (
    "SimGPU(owns=('cpu', ...)): CPU tensors stand for device tensors here, but torch "
    "still takes its CPU code paths on them (optimizers without foreach or fused "
    "kernels, step counts kept as tensors read with .item(), simulated here as device "
    "syncs), so the timeline and its verdict are not what CUDA would give; for that, "
    "keep the code's .cuda() and record inside SimGPU().as_cuda() (`cutimeline record "
    "--device sim`), or build the model on 'meta'.")


class CpuOwnedWarning(UserWarning):
    """A SimGPU owns CPU tensors (``CPU_OWNED``): fine for tests that need
    real values, not for a verdict."""

__all__ = ["SimOptions", "CPU_OWNED", "CpuOwnedWarning", "check_host_cost", "check_fraction",
           "check_world_size"]


@dataclass(frozen=True)
class SimOptions:
    """``SimGPU``'s options, with their defaults (``SimGPU``'s signature is
    made from these fields, its docstring says what each means), checked
    and completed when made; times in ns. Made, ``profile`` is a
    ``GpuProfile``, ``offset_ns``/``drift_ppm`` are drawn from ``seed``'s
    generator (``rng``) where None, the latencies are the profile's where
    None, ``owns`` is a frozenset, ``launch_queue`` None is 0 (unbounded)
    and ``clock`` None a ``HostClock``."""
    profile: str | GpuProfile = "h100"
    offset_ns: int | None = None
    drift_ppm: float | None = None
    quantum_ns: int = EVENT_TICK_NS
    launch_latency_ns: int | None = None
    event_latency_ns: int | None = None
    cost: Mapping[str, int] | Callable[..., float] | None = None
    jitter: float = 0.0
    seed: int = 0
    tf32: bool | None = None
    owns: tuple[str, ...] | frozenset = ("meta",)
    index: int = 0
    anchor_interval_ns: int = 1_000_000_000
    pings: int = 3
    clock: Any = None
    bracket: str = "cuda"
    host_cost: Any = None
    launch_queue: int | None = LAUNCH_QUEUE
    nonzero_fraction: float = 0.5
    unique_fraction: float = 0.5
    world_size: int | None = None
    read_limit: int = 1000
    values: Callable | None = None
    #: the seed's generator, after it drew what ``offset_ns``/``drift_ppm`` left open
    rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # each option checked in the order SimGPU lists them: the first bad
        # one is the one named
        for name, value in _checked(self).items():
            object.__setattr__(self, name, value)


def _check_int(name: str, value: Any, low: int, unit: str = "ns") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or value < low:
        raise CutimelineError(
            f"SimGPU option {name}={value!r} must be an integer ≥ {low}"
            f"{' ' + unit if unit else ''}.")
    return int(value)


def check_host_cost(host_cost: Any) -> Any:
    """``SimGPU(host_cost=)`` checked: None, "measured", a callable, or a
    number of ns ≥ 0 (made an int)."""
    if host_cost is None or host_cost == "measured" or callable(host_cost):
        return host_cost
    if isinstance(host_cost, (int, float, np.number)) and not isinstance(host_cost, bool) \
            and math.isfinite(host_cost) and host_cost >= 0:
        return int(host_cost)
    raise CutimelineError(
        f"SimGPU option host_cost={host_cost!r} must be None (the modelled CUDA "
        f"dispatch cost), 'measured' (the time an op takes here), a number of ns "
        f"per op, or a callable (op_name, args, kwargs) -> ns.")


def check_fraction(name: str, value: Any) -> float:
    """``value`` as a fraction from 0 to 1, or a CutimelineError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= 1:
        raise CutimelineError(
            f"SimGPU option {name}={value!r} must be a number from 0 to 1 (the "
            f"modelled share of elements kept, such as 0.5).")
    return float(value)


def check_world_size(value: Any) -> int | None:
    """``SimGPU(world_size=)``: None (the process group's size) or an int ≥ 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CutimelineError(
            f"SimGPU option world_size={value!r} must be None (the process "
            f"group's size) or an integer ≥ 1, such as 8.")
    return value


def _checked(o: SimOptions) -> dict[str, Any]:
    """``o``'s fields checked and completed (``SimOptions``' docstring)."""
    profile = profile_named(o.profile)
    seed = _check_int("seed", o.seed, 0, "")
    rng = np.random.default_rng(seed)
    offset_ns, drift_ppm = o.offset_ns, o.drift_ppm
    if offset_ns is None:
        offset_ns = int(rng.integers(10**9, 10**12))
    if drift_ppm is None:
        drift_ppm = float(rng.uniform(-20, 20))
    offset_ns = _check_int("offset_ns", offset_ns, 0)
    if isinstance(drift_ppm, bool) or not isinstance(drift_ppm, (int, float)) \
            or not math.isfinite(drift_ppm) or abs(drift_ppm) >= 1e5:
        raise CutimelineError(f"SimGPU option drift_ppm={drift_ppm!r} must be "
                              f"a finite number of ppm below 100000 in size.")
    drift_ppm = float(drift_ppm)
    quantum_ns = _check_int("quantum_ns", o.quantum_ns, 1)
    launch_latency_ns = _check_int(
        "launch_latency_ns", profile.launch_latency_ns if o.launch_latency_ns is None
        else o.launch_latency_ns, 0)
    event_latency_ns = _check_int(
        "event_latency_ns", profile.event_latency_ns if o.event_latency_ns is None
        else o.event_latency_ns, 0)
    cost = o.cost
    if not (cost is None or callable(cost) or isinstance(cost, Mapping)):
        raise CutimelineError(
            f"SimGPU option cost={cost!r} must be None (roofline), a dict "
            f"{{op_name: ns}} or a callable (op_name, args, kwargs, out) -> ns.")
    if isinstance(cost, Mapping):
        cost = {str(k): _check_int(f"cost[{k!r}]", v, 0)
                for k, v in cost.items()}
    jitter = o.jitter
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) \
            or not 0 <= jitter <= 2:
        raise CutimelineError(f"SimGPU option jitter={jitter!r} must be a "
                              f"number from 0 to 2 (relative spread).")
    if o.tf32 not in (None, True, False):
        raise CutimelineError(f"SimGPU option tf32={o.tf32!r} must be None "
                              f"(follow torch), True or False.")
    owns = (o.owns,) if isinstance(o.owns, str) else o.owns
    if not isinstance(owns, (tuple, list, set, frozenset)) or not owns or \
            not all(isinstance(d, str) and d for d in owns):
        raise CutimelineError(f"SimGPU option owns={owns!r} must name tensor "
                              f"device types, such as ('cpu', 'meta').")
    host_cost = check_host_cost(o.host_cost)
    launch_queue = _check_int("launch_queue", 0 if o.launch_queue is None
                              else o.launch_queue, 0, "")
    if o.bracket not in ("kernel", "cuda"):
        raise CutimelineError(f"SimGPU option bracket={o.bracket!r} must be "
                              f"'kernel' (rows are the simulated work) or "
                              f"'cuda' (BEGIN executes when recorded).")
    index = _check_int("index", o.index, 0, "")
    read_limit = _check_int("read_limit", o.read_limit, 1, "reads")
    if o.values is not None and not callable(o.values):
        raise CutimelineError(f"SimGPU option values={o.values!r} must be None (the value "
                              f"model) or a callable (site, shape, dtype) -> number, "
                              f"array or None.")
    anchor_interval_ns = _check_int("anchor_interval_ns", o.anchor_interval_ns, 1)
    pings = _check_int("pings", o.pings, 1, "")
    clock = o.clock
    if clock is None:
        clock = HostClock()
    elif not (callable(getattr(clock, "now", None))
              and callable(getattr(clock, "wait_until", None))):
        raise CutimelineError(f"SimGPU option clock={clock!r} must have "
                              f"now() -> ns and wait_until(ns) methods.")
    return dict(
        profile=profile, seed=seed, rng=rng, offset_ns=offset_ns, drift_ppm=drift_ppm,
        quantum_ns=quantum_ns, launch_latency_ns=launch_latency_ns,
        event_latency_ns=event_latency_ns, cost=cost, jitter=float(jitter),
        owns=frozenset(owns), host_cost=host_cost, launch_queue=launch_queue, index=index,
        anchor_interval_ns=anchor_interval_ns, pings=pings, clock=clock,
        nonzero_fraction=check_fraction("nonzero_fraction", o.nonzero_fraction),
        unique_fraction=check_fraction("unique_fraction", o.unique_fraction),
        world_size=check_world_size(o.world_size), read_limit=read_limit)
