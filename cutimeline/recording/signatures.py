"""Op signatures: what an op is interned by, its shapes as text, the kinds
of its arguments, and what its name says about it.

An op's signature is its name, its tensor arguments' dtypes and shapes,
and its device. The op stream keys it by ``id(func)``, each tensor's
``(dtype, shape)`` (``_dtype_shape``, one C call) and the device; the
session builds its text (``_shape``) only on a miss. By name alone an op
may launch no device work (``_NO_WORK``), may block the host (``_RULES``),
or be a torch.distributed collective or the wait of one (``_COLL``,
``_WAIT``; which ops: ``collectives.OPS``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

_Tensor = torch.Tensor
_dtype_shape = operator.attrgetter("dtype", "shape")

# Ops that launch no device work besides the aliasing ones (func.is_view).
_NO_WORK = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
    "aten::new_empty_strided", "aten::_unsafe_view", "aten::_reshape_alias",
    "aten::lift_fresh", "aten::resize_", "aten::set_", "aten::is_pinned"})
# Host-blocking rules by op name (overload stripped).
_ALWAYS, _REPEAT, _BOOL_INDEX, _TO_COPY, _COPY = 1, 2, 3, 4, 5
_RULES = {**dict.fromkeys((
    "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
    "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::bincount"),
    _ALWAYS), "aten::repeat_interleave": _REPEAT, "aten::index": _BOOL_INDEX,
    "aten::index_put": _BOOL_INDEX, "aten::index_put_": _BOOL_INDEX,
    "aten::_index_put_impl_": _BOOL_INDEX, "aten::_to_copy": _TO_COPY,
    "aten::copy_": _COPY}
# torch.distributed ops (collectives.OPS): collectives, and the waits of functional ones
_COLL, _WAIT = 6, 7
_DIST_NAMESPACES = ("c10d", "_c10d_functional")
_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
           torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "b8",
           torch.complex64: "c64", torch.complex128: "c128"}


class _Named:
    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


def _shape(k: Any) -> str:
    """``f32[2,3]`` from a key's (dtype, shape, device) triple."""
    dtype, shape = k[0], k[1]
    return f"{_DTYPES.get(dtype, str(dtype).replace('torch.', ''))}" \
        f"[{','.join(str(d) for d in shape)}]"


def _arg_kinds(args: tuple, kwargs: dict | None) -> tuple[int, int, int, int]:
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

