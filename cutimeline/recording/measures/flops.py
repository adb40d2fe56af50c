"""FLOPs of recorded ops: which ops have a formula, and what it counts.

An op whose aten op has a formula in torch's ``flop_counter.flop_registry``
(matmuls: ``mm``, ``addmm``, ``bmm``, ``baddbmm``; convolutions and their
backward; the fused attention kernels and their backward) gets a row in the
Timeline's ``flops`` table: its floating-point operations by that formula
(2·m·n·k for an ``mm``), the same count SimGPU's roofline prices it by
(both count by ``devices/opwork.py``). Every recorded op with a formula is
counted, wherever it ran: on the recording's device, or on the host (a CPU
recording's ops, CPU ops beside a GPU's); ``ops.device`` says which.

The signature cache decides once per signature whether an op has a
formula (``Session.signature`` gives it the rule ``RULE_FLOPS``), so ops
without one pay nothing; for those with one the count is cached, since
torch's formulas cost tens of µs and a training loop repeats its shapes:
per op signature (function, tensor dtypes and shapes: what the op stream
keyed it by already) and its other arguments (a convolution's stride),
which fix the output's shape and the count; a hit is one dict lookup,
host time after the op's launch (what it costs: ``benchmarks/RESULTS.md``,
recorder options). Without a signature (``count`` called alone) the key is
``opwork.work_key``. A formula that fails on an argument it does not
expect counts nothing, with one warning per op.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from ...devices.opwork import formula_flops, op_name, work_key

__all__ = ["FlopCounter"]

_Tensor = torch.Tensor


def _scalars(args: tuple, kwargs: dict) -> tuple:
    """An op's arguments but its tensors, hashable (lists as tuples). A
    loop, not a comprehension: this runs on every matmul, and a
    comprehension is one more Python call."""
    out = []
    for a in args:
        if not isinstance(a, _Tensor):
            out.append(tuple(a) if type(a) is list else a)
    if kwargs:
        for k, v in kwargs.items():
            if not isinstance(v, _Tensor):
                out.append((k, tuple(v) if type(v) is list else v))
    return tuple(out)


class FlopCounter:
    """Counts the FLOPs of one recording's ops into ``rows`` (seq, FLOPs)."""

    #: distinct calls remembered before the cache starts over
    CACHE_SIZE = 100_000

    def __init__(self) -> None:
        from torch.utils.flop_counter import flop_registry  # now, not in the first op
        self._registry = flop_registry
        self.rows: list[tuple[int, float]] = []
        self._counts: dict[tuple, float] = {}
        self._failed: set[str] = set()

    def formula(self, func: Any) -> Callable | None:
        """torch's FLOP formula for ``func``, or None (no row for its ops):
        ``roofline.flop_formula``."""
        return self._registry.get(getattr(func, "overloadpacket", None))

    def count(self, func: Any, args: tuple, kwargs: dict, out: Any,
              sig: int | None = None) -> float:
        """FLOPs of one call of ``func`` that returned ``out`` (``sig``: its
        signature in the session, if known); 0 without a formula."""
        try:
            key = work_key(func, args, kwargs, out) if sig is None else \
                (sig, _scalars(args, kwargs))
            n = self._counts.get(key)
        except (TypeError, RuntimeError, NotImplementedError):  # unhashable, or sparse
            key = n = None  # not cached
        if n is not None:
            return n
        formula = self.formula(func)
        n = 0.0
        if formula is not None:
            try:
                n = float(formula_flops(formula, args, kwargs, out))
            except Exception as exc:  # the user's program goes on, uncounted
                name = op_name(func)
                if name not in self._failed:
                    self._failed.add(name)
                    warnings.warn(f"cutimeline could not count the FLOPs of {name} "
                                  f"({type(exc).__name__}: {exc}); its ops have no "
                                  f"flops rows.", RuntimeWarning, stacklevel=4)
        if key is not None:
            if len(self._counts) >= self.CACHE_SIZE:
                self._counts.clear()
            self._counts[key] = n
        return n

    def note(self, seq: int, sig: int, func: Any, args: tuple, kwargs: dict,
             out: Any) -> None:
        """Count the FLOPs of op ``seq`` of signature ``sig``; a row when
        there are any."""
        n = self.count(func, args, kwargs, out, sig)
        if n > 0:
            self.rows.append((seq, n))
