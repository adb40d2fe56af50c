"""A module moved to or from the simulated GPU keeps its Parameter objects, as on CUDA.

On CUDA, ``model.cuda()`` changes each parameter's data in place (torch's
``param.data = param.cuda()`` path), so an optimizer made before the move
(``opt = AdamW(model.parameters()); model.cuda()``, which accelerate's
``prepare`` does) and weights tied between modules (a language model's
embedding and output head) still hold the module's parameters. A CPU
tensor's data cannot be set to a ``meta`` one (torch refuses the two tensor
types), so ``Module._apply`` would make new Parameter objects instead: the
optimizer would step the old CPU parameters, which get no gradients, and
tied weights would come untied — silently.

While CUDA is mapped, ``Module._apply`` takes torch's swapping path (the
one ``torch.__future__.set_swap_module_params_on_conversion(True)`` asks
for), and the swap it asks for is, where CPU meets meta, a swap of the
tensors under the two Python objects alone: the parameter object keeps
its class and attributes (libraries mark parameters), as ``param.data =``
keeps them, and gets the converted tensor. Every other conversion (a dtype
cast on the simulated GPU, one on the CPU) takes torch's usual
``param.data =`` path, unless the program asked for swapping itself. What
a moved parameter does not keep, as under torch's own swap: hooks
registered on it before it moved.

A parameter that left the simulated GPU this way is marked (``LEFT``, in
its ``__dict__``; moving back unmarks it) and said to the mapping, which
warns when a marked parameter is used again (``mapping.py``): a model moved
to the CPU after training is no news, one that goes on training there is.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.nn import Module, Parameter

__all__ = ["patches", "LEFT"]

#: the attribute marking a parameter moved off the simulated GPU: the site that moved it
LEFT = "_cutimeline_left_gpu"


def _crosses(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether one of ``a``, ``b`` is a simulated GPU tensor and the other not."""
    return a.is_meta != b.is_meta


def patches(left: Callable[[list], None]) -> list[tuple[Any, str, Any]]:
    """(owner, name, replacement) for ``Module._apply`` and the swap it asks
    for; ``left(parameters)`` hears of parameters that moved off the
    simulated GPU."""
    apply = Module.__dict__["_apply"]
    asked = torch.__future__.get_swap_module_params_on_conversion
    swap = torch.utils.swap_tensors
    local = threading.local()

    def moving() -> bool:
        return getattr(local, "depth", 0) > 0

    def _apply(self: Module, fn: Callable, recurse: bool = True) -> Module:
        was = [(p, p.is_meta) for p in self._parameters.values() if p is not None]
        local.depth = getattr(local, "depth", 0) + 1
        try:
            out = apply(self, fn, recurse)
        finally:
            local.depth -= 1
        gone = [p for p, meta in was if meta and not p.is_meta]
        if gone:
            left(gone)
        for p, meta in was:
            if not meta and p.is_meta and LEFT in p.__dict__:
                del p.__dict__[LEFT]  # back on the simulated GPU
        return out

    def get_swap_module_params_on_conversion() -> bool:
        return asked() or moving()

    def swap_tensors(t1: Any, t2: Any) -> None:
        if asked() or not moving():
            swap(t1, t2)
        elif _crosses(t1, t2):
            # the tensors under the two Python objects trade places; the
            # objects keep their class and attributes. Not swap()'s checks
            # of who else holds the tensor: a graph left from the last step
            # (the loss still named) holds the old one, and may go on
            # holding it, as it would on CUDA
            torch._C._swap_tensor_impl(t1, t2)
        elif torch._has_compatible_shallow_copy_type(t1, t2):
            t1.data = t2  # what Module._apply does when swapping was not asked for
        else:
            swap(t1, t2)

    return [(Module, "_apply", _apply),
            (torch.__future__, "get_swap_module_params_on_conversion",
             get_swap_module_params_on_conversion),
            (torch.utils, "swap_tensors", swap_tensors)]


def mark(params: list[Parameter], site: str) -> None:
    """Mark ``params`` as moved off the simulated GPU at ``site``."""
    for p in params:
        setattr(p, LEFT, site)
