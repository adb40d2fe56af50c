"""SimGPU's ops whose output size depends on the data: a modelled count, and the sync it costs.

``x[mask]``, ``torch.nonzero``, ``torch.where(cond)``, ``masked_select``,
``torch.unique`` (and its variants), ``repeat_interleave`` without
``output_size`` and ``bincount`` size their output by their input's
values. On CUDA such an op syncs the host (a kernel counts, the count is
copied back, the host waits inside the op, then allocates and launches
the rest); ``torch.equal`` reads a compare alike. On ``meta`` tensors
torch has no kernel for them, so a simulated program using them would
stop.

SimGPU models the count, deterministically: selecting ops (``nonzero``,
boolean-mask indexing, ``masked_select``; ``x[mask] = v`` counts alike)
keep ``SimGPU(nonzero_fraction=)`` of their candidates (0.5),
``unique`` keeps ``unique_fraction`` (0.5; at least one of a non-empty
input), ``repeat_interleave`` repeats each index once on average and
``bincount`` has ``max(minlength, 1)`` bins. Counts round to the nearest
integer (``modelled``), so two masks of one size select alike
(``logits[mask]`` and ``y[mask]`` match). Each op's output is made as
torch's fake tensors make it, with that count (``SUBSTITUTES``, used by
``SimOps.run`` on meta tensors only).

The recorder already treats these ops as host-blocking
(``recording/signatures.py``): it calls ``SimGPU.wait`` inside the op
and records a sync at the user's source line. The substitute notes the
count kernel (``count_ns``) for that wait, so the host waits for the
stream's earlier work *and* the count kernel
(``SimStreams.count_kernel``); the op's own work follows on the stream.
Results on real devices are never touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..opwork import tensor_bytes
from .local import SimLocal
from .roofline import GpuProfile

__all__ = ["DataDependent", "SUBSTITUTES", "count_ns", "modelled"]

_aten = torch.ops.aten
_LONG = torch.long


@dataclass(eq=False)
class DataDependent:
    """The data-dependent part of ``SimGPU``: the modelled shares, the
    profile that prices the count kernel, and the per-thread state where
    an op leaves its count kernel for the wait that follows. The
    substitutes below take it as their first argument."""

    profile: GpuProfile
    local: SimLocal
    #: the share of elements that ``x[mask]``, ``nonzero``, ``masked_select`` keep
    nonzero_fraction: float = 0.5
    #: the share that ``unique`` keeps
    unique_fraction: float = 0.5


def modelled(n: int, fraction: float, least: int = 0) -> int:
    """The modelled count of ``n`` candidates: ``fraction`` of them rounded
    half up, at least ``least`` when there is any."""
    k = int(fraction * n + 0.5)
    return max(k, least) if n else 0


def count_ns(owner: Any, args: tuple) -> int:
    """The count kernel's duration: one pass over the op's inputs at the
    memory bandwidth of ``owner``'s profile (a SimGPU or its
    ``DataDependent``), plus the profile's least kernel time."""
    p = owner.profile
    return p.min_kernel_ns + int(round(tensor_bytes(args) / p.bandwidth * 1e9))


def _meta(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _note(part: DataDependent, args: tuple) -> None:
    """The count kernel for the wait that follows (``SimStreams.wait``), keyed
    by this op's arguments, so a stale note never reaches another op."""
    part.local.count = (count_ns(part, args), args)


def _positions(part: DataDependent, mask: torch.Tensor) -> torch.Tensor:
    """Modelled ``nonzero(mask)``: (count, mask.dim()) long indices."""
    k = modelled(mask.numel(), part.nonzero_fraction)
    return _aten.nonzero_static(mask, size=k)


def _nonzero(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    if not _meta(args[0]) or kwargs:
        return NotImplemented
    _note(part, args)
    return _positions(part, args[0])


def _masked_select(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    x, mask = args[0], args[1]
    if not _meta(x) or kwargs:
        return NotImplemented
    n = math.prod(torch.broadcast_shapes(x.shape, mask.shape))
    _note(part, args)
    return x.new_empty((modelled(n, part.nonzero_fraction),))


def _index(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    x, indices = args[0], args[1]
    masks = [i for i in indices if isinstance(i, torch.Tensor)
             and i.dtype in (torch.bool, torch.uint8)]
    if not _meta(x) or not masks or kwargs:
        return NotImplemented
    _note(part, args)
    plain: list[Any] = []
    for i in indices:  # a mask stands for its nonzero positions, one index a dim
        if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
            plain.extend(_positions(part, i).unbind(1))
        else:
            plain.append(i)
    return _aten.index.Tensor(x, plain)


def _index_put(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    """A write through a mask: torch's meta kernel sizes it without the
    values; on CUDA the mask's positions are counted first all the same."""
    if _meta(args[0]) and any(isinstance(i, torch.Tensor) and i.dtype in
                              (torch.bool, torch.uint8) for i in args[1]):
        _note(part, args)
    return NotImplemented


def _unique_values(part: DataDependent, x: torch.Tensor, dim: Any) -> tuple[torch.Tensor, int]:
    n = x.numel() if dim is None else x.size(dim)
    k = modelled(n, part.unique_fraction, 1)
    if dim is None:
        return x.new_empty((k,)), k
    shape = list(x.shape)
    shape[dim] = k
    return x.new_empty(shape), k


def _unique(part: DataDependent, args: tuple, kwargs: dict, *, dim: Any = None,
            flags: tuple = (), outs: int = 3) -> Any:
    """``_unique2``/``_unique``/``unique_consecutive``/``unique_dim*``:
    (values, inverse, counts), inverse and counts empty unless asked for
    (``unique_dim*`` always fills them, as torch does)."""
    x = args[0]
    if not _meta(x):
        return NotImplemented
    _note(part, args)
    values, k = _unique_values(part, x, dim)
    inverse, counts = flags
    empty = x.new_empty((0,), dtype=_LONG)
    inv = x.new_empty(x.shape if dim is None else (x.size(dim),), dtype=_LONG) \
        if inverse else empty
    cnt = x.new_empty((k,), dtype=_LONG) if counts else empty
    return (values, inv, cnt)[:outs]


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _unique2(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    flags = (_arg(args, kwargs, 2, "return_inverse", False),
             _arg(args, kwargs, 3, "return_counts", False))
    return _unique(part, args, kwargs, flags=flags)


def _unique1(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    flags = (_arg(args, kwargs, 2, "return_inverse", False), False)
    return _unique(part, args, kwargs, flags=flags, outs=2)


def _unique_consecutive(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    dim = _arg(args, kwargs, 3, "dim", None)
    if dim is not None:
        dim = dim % max(args[0].dim(), 1)
        return _unique(part, args, kwargs, dim=dim, flags=(True, True))
    flags = (_arg(args, kwargs, 1, "return_inverse", False),
             _arg(args, kwargs, 2, "return_counts", False))
    return _unique(part, args, kwargs, flags=flags)


def _unique_dim(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    dim = _arg(args, kwargs, 1, "dim", 0) % max(args[0].dim(), 1)
    return _unique(part, args, kwargs, dim=dim, flags=(True, True))


def _repeat_interleave(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    repeats = args[0]
    if not _meta(repeats) or len(args) > 1 or kwargs.get("output_size") is not None:
        return NotImplemented  # other overloads, or a size given: torch's own
    _note(part, args)
    return repeats.new_empty((repeats.numel(),), dtype=_LONG)


def _bincount(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    if not _meta(x):
        return NotImplemented
    weights = _arg(args, kwargs, 1, "weights", None)
    bins = max(int(_arg(args, kwargs, 2, "minlength", 0)), 1)
    _note(part, args)
    return x.new_empty((bins,), dtype=_LONG if weights is None else weights.dtype)


def _equal(part: DataDependent, args: tuple, kwargs: dict) -> Any:
    if not (_meta(args[0]) and _meta(args[1])):
        return NotImplemented
    _note(part, args)  # the compare, then its answer read back: zeros alike
    return args[0].shape == args[1].shape and args[0].dtype == args[1].dtype


SUBSTITUTES: dict[str, Callable] = {
    "nonzero": _nonzero, "masked_select": _masked_select, "index": _index,
    "index_put": _index_put, "index_put_": _index_put, "_index_put_impl_": _index_put,
    "_unique2": _unique2, "_unique": _unique1, "unique_consecutive": _unique_consecutive,
    "unique_dim": _unique_dim, "unique_dim_consecutive": _unique_dim,
    "repeat_interleave": _repeat_interleave, "bincount": _bincount,
    "equal": _equal}
