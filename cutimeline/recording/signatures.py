"""Op signatures: what an op is interned by, its shapes as text, the kinds
of its arguments, and what its name says about it.

An op's signature is its name, its tensor arguments' dtypes and shapes,
and its device; the op stream keys it flat (no tuple per tensor) and the
session builds its text (``shapes_text``) only on a miss. By name alone
an op may launch no device work (``NO_WORK``), block the host (``RULES``,
applied to one call by ``blocking``), be a collective or its wait
(``RULE_COLL``, ``RULE_WAIT``; which ops: ``collectives.OPS``), or be
measured: FLOPs (``RULE_FLOPS``: a formula in torch's ``flop_registry``)
or, with ``record(memory=True)``, an allocation without a kernel
(``RULE_ALLOC``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

__all__ = ["NO_WORK", "RULES", "RULE_COLL", "RULE_WAIT", "RULE_FLOPS", "RULE_ALLOC",
           "ALLOCS", "DIST_NAMESPACES", "Named", "dtype_shape", "shape_text", "shapes_text",
           "ragged_key", "arg_kinds", "leading_tensors", "composite", "blocking"]

_Tensor = torch.Tensor
dtype_shape = operator.attrgetter("dtype", "shape")

# Ops that launch no device work besides the aliasing ones (func.is_view),
# the in-place ones among them included: they change a tensor's sizes and
# strides only (F.linear on a 1-D input ends in squeeze_).
NO_WORK = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::_unsafe_view", "aten::_reshape_alias",
    "aten::lift_fresh", "aten::resize_", "aten::resize_as_", "aten::set_",
    "aten::is_pinned", "aten::squeeze_", "aten::unsqueeze_", "aten::t_",
    "aten::transpose_", "aten::swapdims_", "aten::swapaxes_", "aten::as_strided_",
    "aten::detach_"})
# Host-blocking rules by op name (overload stripped).
_ALWAYS, _REPEAT, _BOOL_INDEX, _TO_COPY, _COPY = 1, 2, 3, 4, 5
RULES = {**dict.fromkeys((
    "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
    "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount"),
    _ALWAYS), "aten::repeat_interleave": _REPEAT, "aten::index": _BOOL_INDEX,
    "aten::index_put": _BOOL_INDEX, "aten::index_put_": _BOOL_INDEX,
    "aten::_index_put_impl_": _BOOL_INDEX, "aten::_to_copy": _TO_COPY,
    "aten::copy_": _COPY}
# torch.distributed ops (collectives.OPS): collectives, and the waits of functional ones
RULE_COLL, RULE_WAIT = 6, 7
# measured ops (Session.measured): FLOPs by formula; allocations without a kernel
RULE_FLOPS, RULE_ALLOC = 8, 9
ALLOCS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like",
                     "aten::new_empty", "aten::new_empty_strided", "aten::resize_"})
DIST_NAMESPACES = ("c10d", "_c10d_functional")
_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
           torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8",
           torch.complex64: "c64", torch.complex128: "c128"}


class Named:
    """A stand-in for an op that is no aten op (a compiled graph, a CUDA
    graph replay): what the session and devices read of one, its name."""

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


def shape_text(k: Any) -> str:
    """``f32[2,3]`` from a (dtype, shape) pair."""
    dtype, shape = k[0], k[1]
    return f"{_DTYPES.get(dtype, str(dtype).replace('torch.', ''))}" \
        f"[{','.join(str(d) for d in shape)}]"


def ragged_key(args: tuple, kwargs: dict) -> list:
    """The op stream's key entries, dtype and shape per tensor argument (the
    same tensors as its loop), for an op with a nested tensor, which has no
    sizes to read: its shape is one "*" per dimension (``f32[*,*,*]``)."""
    tensors = [b for a in args for b in ((a,) if isinstance(a, _Tensor) else
                                         a if type(a) is list or type(a) is tuple else ())
               if isinstance(b, _Tensor)]
    tensors += [a for a in kwargs.values() if isinstance(a, _Tensor)]
    return [x for t in tensors for x in (t.dtype, ("*",) * t.dim() if t.is_nested else t.shape)]


def shapes_text(key: tuple) -> str:
    """``f32[2,3], f32[3]`` from an op stream key: ``(id(func), dtype,
    shape, dtype, shape, ..., device)``."""
    return ", ".join(shape_text(key[i:i + 2]) for i in range(1, len(key) - 1, 2))


def arg_kinds(args: tuple, kwargs: dict | None) -> tuple[int, int, int, int]:
    """(tensors, floats, lists, others) among an op's arguments: the
    dispatch mode's cost per op grows with each kind at its own rate (a
    Python float is wrapped into a tensor on every call, a list is
    converted element by element; see ``selfcost.measure_overhead``)."""
    n = [0, 0, 0, 0]
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, _Tensor):
            n[0] += 1
        elif type(a) is list or type(a) is tuple:
            n[0] += sum(isinstance(b, _Tensor) for b in a)
            n[2] += 1
        elif type(a) is float or type(a) is complex:
            n[1] += 1
        else:
            n[3] += 1
    return n[0], n[1], n[2], n[3]


_LEADS: dict[Any, int] = {}  # func -> leading_tensors(func), for every recording


def leading_tensors(func: Any) -> int:
    """How many plain tensor arguments lead the schema of ``func`` when it
    has no other tensor argument (optional, in a list, keyword-only such as
    ``out=``): 1 to 3, and 0 for any other op (more, none, others, or no
    schema). The op stream keys an op with 1 to 3 by reading those alone,
    its other arguments unseen: they hold no tensor. A leading tensor may
    arrive as a number (``torch.add(t, 1)``); the op stream checks. Read
    once per process (3-4 µs a schema): each recording's first op of every
    kind asks."""
    n = _LEADS.get(func)
    if n is None:
        n = _LEADS[func] = _schema_leading_tensors(func)
    return n


_COMPOSITE: dict[Any, bool] = {}  # func -> composite(func), for every recording


def composite(func: Any) -> bool:
    """Whether aten op ``func`` is ``CompositeImplicitAutograd`` (runs as
    other ops: ``linear``, ``item``, ``to``): such an op reaches the
    dispatch mode only where autograd did not decompose it (under
    ``torch.inference_mode()``), and the mode decomposes it
    (``Session.decompose``). Read once per process."""
    c = _COMPOSITE.get(func)
    if c is None:
        c = _COMPOSITE[func] = isinstance(func, torch._ops.OpOverload) and \
            torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                           "CompositeImplicitAutograd")
    return c


def _schema_leading_tensors(func: Any) -> int:
    """``leading_tensors(func)`` read from its schema."""
    arguments = getattr(getattr(func, "_schema", None), "arguments", None)
    if arguments is None:
        return 0
    n = 0
    while n < len(arguments) and not arguments[n].kwarg_only and \
            str(arguments[n].type) == "Tensor":
        n += 1
    if n > 3 or any("Tensor" in str(a.type) for a in arguments[n:]):
        return 0
    return n


def blocking(s: Any, w: Any, rule: int, args: tuple, kwargs: dict,
             dev: Any) -> tuple[Any, bool]:
    """Where an op of host-blocking ``rule`` (1-5) runs and whether it
    blocks: (the device owned by session ``s`` for writer ``w`` it runs on,
    None when none is; whether the host waits for that device)."""
    sync = False
    if rule == _TO_COPY or rule == _COPY:
        if rule == _TO_COPY:
            src, dst = args[0].device, kwargs.get("device") or args[0].device
            nb = kwargs.get("non_blocking", False)
            pinned = nb  # _to_copy pins a non-blocking device→host output
        else:
            dst, src = args[0].device, args[1].device
            nb = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
            pinned = nb and dst.type == "cpu" and _pinned(args[0])
        if s.owned(w, src):
            return src, dst.type == "cpu" and not s.owned(w, dst) and not pinned
        if s.owned(w, dst):
            return dst, src.type == "cpu" and not nb
        return None, False
    if not s.owned(w, dev):
        return None, False
    if rule == _ALWAYS:
        sync = True
    elif rule == _REPEAT:
        sync = kwargs.get("output_size") is None
    else:  # boolean masks make indexing call nonzero
        sync = any(isinstance(i, _Tensor) and i.dtype in (torch.bool, torch.uint8)
                   for i in (args[1] if len(args) > 1 else ()) or ())
    return dev, sync


def _pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:  # no accelerator to pin for
        return False
