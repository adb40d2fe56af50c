"""SimGPU's collectives: torch.distributed ops as NCCL would run them, on a simulated link.

A simulated program runs its collectives in one process on torch's fake
process group (``torch.testing._internal.distributed.fake_pg``;
``dist.init_process_group("fake", store=FakeStore(), rank=0,
world_size=N)``), whose ops accept meta tensors and return at once. On a
real GPU each is an NCCL kernel on NCCL's own stream, so ``SimComm``
runs it there: it starts when the communication stream is free *and* the
launching stream's earlier work is done (NCCL's event wait), and lasts
``comm_ns``. ``Work.wait()`` and ``wait_tensor`` make the *current*
stream wait for the communication stream, as NCCL's ``work.wait()``
does; the host does not block. The Work the program holds is not the
one the op returned (torch boxes it anew), so a wait covers every
collective launched so far: the same for waits in launch order (DDP's
buckets), a little early for a wait on an older Work while a newer one
runs.

Where the figures come from (``bus_bytes`` counts as nccl-tests does):
``GpuProfile.nvlink_bandwidth`` is nccl-tests' all-reduce "busbw" at
large sizes on one 8-GPU NVSwitch node, ≈ 450 GB/s for H100 and H200 SXM
(NVLink 4, 900 GB/s raw both ways; NVIDIA's published runs reach
450–480) and ≈ 230 GB/s for A100 SXM (NVLink 3, 600 GB/s raw; 220–240
measured). ``collective_latency_ns`` (15 µs) is the small-message time
of the same runs (≈ 10–20 µs on 8 GPUs, ring LL). One link: no
inter-node network, no tree algorithm.

Such an op's gpu row has kind COLLECTIVE, so
``analysis/idle/communication.py`` counts its exposed part. Results on
real devices are never touched: the ``Work.wait`` hook only reads the
simulator's clocks, and only while a SimGPU records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..opwork import tensor_bytes
from .local import SimLocal
from .roofline import GpuProfile
from .streams import SimStreams

__all__ = ["COMM_STREAM", "SimComm", "bus_bytes", "comm_ns",
           "kernel_name", "wait_tensor", "install", "uninstall"]

#: The simulated communication stream's id (NCCL's stream is one apart
#: from the program's; this number stays clear of streams a program names).
COMM_STREAM = 1_000

# op base name (no namespace) -> (NCCL collective, bus factor, the buffer
# nccl-tests sizes: the argument at this index, or -1 the op's output).
# All-gather's buffer is the gathered one, reduce-scatter's the scattered.
_AR, _RING, _ONE = "allreduce", "ring", "one"
_KIND: dict[str, tuple[str, str, int]] = {
    **{n: ("AllReduce", _AR, 0) for n in (
        "allreduce_", "allreduce_coalesced_", "all_reduce", "all_reduce_",
        "all_reduce_coalesced", "all_reduce_coalesced_")},
    **{n: ("AllGather", _RING, 0) for n in (
        "allgather_", "_allgather_base_", "allgather_coalesced_",
        "allgather_into_tensor_coalesced_")},
    **{n: ("AllGather", _RING, -1) for n in (
        "all_gather_into_tensor", "all_gather_into_tensor_out",
        "all_gather_into_tensor_coalesced")},
    **{n: ("ReduceScatter", _RING, 1) for n in (
        "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_")},
    **{n: ("ReduceScatter", _RING, 0) for n in (
        "reduce_scatter_tensor", "reduce_scatter_tensor_out",
        "reduce_scatter_tensor_coalesced")},
    "alltoall_": ("SendRecv", _RING, 1), "alltoall_base_": ("SendRecv", _RING, 1),
    "all_to_all_single": ("SendRecv", _RING, 0),
    "broadcast_": ("Broadcast", _ONE, 0), "broadcast": ("Broadcast", _ONE, 0),
}
_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.float64: "f64", torch.int32: "i32", torch.int64: "i64",
          torch.uint8: "u8", torch.int8: "i8"}


def _split(func: Any) -> str:
    name = func.name() if hasattr(func, "name") else str(func)
    return name.split("::")[-1].split(".")[0]


def _group_size(args: tuple, kwargs: dict) -> int:
    """The size of the op's process group: a ProcessGroup argument (c10d
    ops) or a group name (functional ones); else the default group's."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    c = torch._C._distributed_c10d
    for a in (*args, *kwargs.values()):
        try:
            if isinstance(a, torch.ScriptObject):
                return int(c.ProcessGroup.unbox(a).size())
            if isinstance(a, c.ProcessGroup):
                return int(a.size())
        except (RuntimeError, TypeError):  # another TorchBind class (ReduceOp)
            continue
    name = kwargs.get("group_name", args[-1] if args and isinstance(args[-1], str)
                      else None)
    try:
        if isinstance(name, str):
            return int(c10d._resolve_process_group(name).size())
    except (RuntimeError, ValueError, KeyError):
        pass
    return int(dist.get_world_size()) if dist.is_initialized() else 1


def bus_bytes(func: Any, args: tuple, kwargs: dict, out: Any, world: int) -> float:
    """The bytes one rank moves over its links for collective ``func`` on
    ``world`` ranks, as nccl-tests' bus bandwidth counts them (0 for ops
    that move no data: barriers, waits): the ring algorithm's,
    all-reduce 2(N−1)/N × bytes; all-gather, reduce-scatter and
    all-to-all (N−1)/N × the whole gathered or scattered buffer;
    broadcast 1×."""
    kind = _KIND.get(_split(func))
    if kind is None:
        return 0.0
    n = tensor_bytes(out if kind[2] < 0 else args[kind[2]])
    if kind[1] == _AR:
        return 2 * (world - 1) / world * n
    if kind[1] == _RING:
        return (world - 1) / world * n
    return float(n)


def comm_ns(profile: GpuProfile, func: Any, args: tuple, kwargs: dict, out: Any,
            world: int) -> int:
    """The simulated duration of collective ``func``: the profile's
    collective latency plus its bus bytes at the profile's bus bandwidth."""
    return profile.collective_latency_ns + int(round(
        bus_bytes(func, args, kwargs, out, world) / profile.nvlink_bandwidth * 1e9))


def kernel_name(func: Any, args: tuple) -> str:
    """The NCCL kernel a collective launches, as a profiler trace names it,
    e.g. "ncclDevKernel_AllReduce_Sum_f32_RING_LL"."""
    kind = _KIND.get(_split(func), ("Generic", "", ""))[0]
    t = next((x for x in _flat(args) if isinstance(x, torch.Tensor)), None)
    dt = _DTYPE.get(t.dtype, "u8") if t is not None else "u8"
    red = "_Sum" if kind in ("AllReduce", "ReduceScatter") else ""
    return f"ncclDevKernel_{kind}{red}_{dt}_RING_LL"


def _flat(x: Any):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


@dataclass(eq=False)
class SimComm:
    """The collectives part of ``SimGPU``: the communication stream, made
    to wait for a launching stream and waited for by ``Work.wait``, and a
    collective's duration. Works on the simulator's streams (``free_at``)
    under its lock."""

    profile: GpuProfile
    lock: Any
    local: SimLocal
    streams: SimStreams
    #: ranks a collective's time assumes (None: its process group's)
    world_size: int | None = None

    def collective_stream(self, stream: int) -> int:
        """The stream a collective launched from ``stream`` runs on (the
        recorder asks before the op's BEGIN): the communication stream,
        made to wait first for ``stream``'s work so far, as NCCL does."""
        free_at = self.streams.free_at
        with self.lock:
            free = free_at.get(stream, 0)
            if free > free_at.get(COMM_STREAM, 0):
                free_at[COMM_STREAM] = free
        return COMM_STREAM

    def cost_ns(self, func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        """Collective ``func``'s simulated duration (``comm_ns``) on
        ``world_size`` ranks, else its group's."""
        world = self.world_size or _group_size(args, kwargs)
        return comm_ns(self.profile, func, args, kwargs, out, world)

    def comm_wait(self, stream: int | None = None) -> None:
        """``stream`` (default: the current one) waits for the collectives
        launched so far: what ``Work.wait()`` and ``wait_tensor`` do."""
        s = self.local.stream if stream is None else stream
        free_at = self.streams.free_at
        with self.lock:
            done = free_at.get(COMM_STREAM, 0)
            if done > free_at.get(s, 0):
                free_at[s] = done


def wait_tensor(comm: SimComm, args: tuple, kwargs: dict) -> Any:
    """``_c10d_functional::wait_tensor`` (a value substitute of ``SimOps``):
    the current stream waits for the collectives, then torch's own op runs."""
    comm.comm_wait()
    return NotImplemented


_SAVED: dict[Any, Any] = {}


def install(recording: Any) -> None:
    """Hook ``Work.wait`` (and the subclasses that bind their own) while
    SimGPUs record: each one's collectives part in ``recording`` makes the
    current stream wait for its collectives, then torch's wait runs."""
    try:
        c = torch._C._distributed_c10d
    except AttributeError:  # torch built without distributed
        return
    for cls in (c.Work, *[getattr(c, n) for n in ("FakeWork",) if hasattr(c, n)]):
        if "wait" in cls.__dict__ and cls not in _SAVED:
            _SAVED[cls] = orig = cls.__dict__["wait"]
            cls.wait = _waiting(orig, recording)


def uninstall() -> None:
    for cls, orig in _SAVED.items():
        cls.wait = orig
    _SAVED.clear()


def _waiting(orig: Any, recording: Any) -> Any:
    def wait(self, *args, **kwargs):
        for comm in list(recording):
            comm.comm_wait()
        return orig(self, *args, **kwargs)
    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    return wait
