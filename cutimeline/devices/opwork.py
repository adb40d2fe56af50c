"""An aten op call's work: its name, the bytes of its tensors, its FLOPs by
torch's formulas, and a key that fixes them.

Two readers share these rules: the recorder counts the FLOPs of every
recorded op that has a formula (``recording/measures/flops.py``, on any
device), and the simulator prices an op by its bytes and FLOPs
(``sim/roofline.py``). FLOPs come from the formulas torch registers for
``FlopCounterMode`` (``torch.utils.flop_counter.flop_registry``: matmuls,
convolutions, attention); bytes are what a kernel touches in each tensor.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["op_name", "touched_bytes", "tensor_bytes", "work_key", "flop_formula",
           "formula_flops"]


def op_name(func: Any) -> str:
    """The op's schema name with overload, as "aten::add.Tensor" ("aten::mm"
    for a default overload); a plain callable's ``__name__`` otherwise."""
    name = getattr(func, "name", None)
    if callable(name):
        try:
            return str(name())
        except TypeError:
            # a ``name`` method that wants arguments: not an op's; use __name__
            pass
    return str(getattr(func, "__name__", func))


_STRIDED = torch.strided


def touched_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches in ``t``: its elements, a broadcast (stride-0)
    dimension once; a sparse tensor's stored values and indices."""
    if t.layout is not torch.strided:
        return _stored_bytes(t)
    if t.is_contiguous():
        return t.nbytes
    try:
        n = t.element_size()
        for size, stride in zip(t.shape, t.stride()):
            if stride:
                n *= size
        return n
    except (RuntimeError, NotImplementedError):  # nested: no strides
        return t.nbytes


_SPARSE_PARTS = {torch.sparse_coo: ("_values", "_indices"),
                 torch.sparse_csr: ("values", "crow_indices", "col_indices"),
                 torch.sparse_bsr: ("values", "crow_indices", "col_indices"),
                 torch.sparse_csc: ("values", "ccol_indices", "row_indices"),
                 torch.sparse_bsc: ("values", "ccol_indices", "row_indices")}


def _stored_bytes(t: torch.Tensor) -> int:
    """A sparse tensor's bytes: its values and index tensors (COO has no
    ``nbytes``, the compressed layouts no strides); 0 for another layout."""
    try:
        return sum(getattr(t, part)().nbytes for part in _SPARSE_PARTS[t.layout])
    except (KeyError, RuntimeError, NotImplementedError):
        return 0


def tensor_bytes(obj: Any, skip: Any = None) -> int:
    """Bytes of every tensor in obj (nested tuples, lists, dicts) except
    ``skip``, by ``touched_bytes`` (its common case, a dense contiguous tensor,
    in line: this runs for every simulated op)."""
    if isinstance(obj, torch.Tensor):
        return 0 if obj is skip else obj.nbytes \
            if obj.layout is _STRIDED and obj.is_contiguous() else touched_bytes(obj)
    if isinstance(obj, dict):
        obj = tuple(obj.values())
    elif not isinstance(obj, (tuple, list)):
        return 0
    n = 0
    for o in obj:
        if isinstance(o, torch.Tensor):
            if o is not skip:
                n += o.nbytes if o.layout is _STRIDED and o.is_contiguous() else touched_bytes(o)
        elif isinstance(o, (tuple, list, dict)):
            n += tensor_bytes(o, skip)
    return n


def _shapes(obj: Any) -> Any:
    """Tensors replaced by their shapes, as flop_counter's shape_wrapper does
    (without its pytree walk, which costs tens of µs per op)."""
    if isinstance(obj, torch.Tensor):
        return obj.shape
    if isinstance(obj, (tuple, list)):
        return type(obj)(_shapes(o) for o in obj)
    return obj


def _key(obj: Any, scalars: bool) -> Any:
    """A hashable summary of op arguments that fixes their cost: tensors by
    shape, dtype and (when not contiguous) strides; other values only when
    ``scalars`` (FLOP formulas read them: a convolution's stride; an output
    scalar does not matter)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout is not torch.strided or obj.is_nested:  # no strides or no sizes
            return (obj.layout, obj.dtype, obj.dim(), touched_bytes(obj))
        if obj.is_contiguous():
            return (obj.shape, obj.dtype)
        return (obj.shape, obj.dtype, obj.stride())
    if isinstance(obj, (tuple, list)):
        return tuple([_key(o, scalars) for o in obj])
    if isinstance(obj, dict):
        return tuple([(k, _key(v, scalars)) for k, v in obj.items()])
    return obj if scalars else None


def work_key(func: Any, args: tuple, kwargs: dict, out: Any) -> tuple:
    """A key of one call of ``func`` that fixes its work (bytes and FLOPs):
    hashable unless an argument is not (a dict lookup raises TypeError)."""
    return (func, _key(args, True), _key(kwargs, True), _key(out, False))


def flop_formula(func: Any) -> Callable | None:
    """torch's FLOP formula for op ``func`` (``flop_registry``), or None."""
    from torch.utils.flop_counter import flop_registry
    return flop_registry.get(getattr(func, "overloadpacket", None))


def formula_flops(formula: Callable, args: tuple, kwargs: dict, out: Any) -> int:
    """FLOPs of one call by ``formula`` (``flop_formula``), from the shapes
    of its arguments and output."""
    raw = getattr(formula, "__wrapped__", None)  # formula on shapes
    if raw is None:
        return int(formula(*args, **kwargs, out_val=out))
    return int(raw(*_shapes(args), out_shape=_shapes(out),
                   **{k: _shapes(v) for k, v in kwargs.items()}))
