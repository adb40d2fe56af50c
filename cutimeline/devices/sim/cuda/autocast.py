"""``torch.autocast("cuda")`` on the simulated GPU: autocast's CUDA op lists, applied above autograd.

Real autocast casts at the dispatcher's Autocast key, which a tensor gets
from its backend (CUDA → AutocastCUDA); a ``meta`` tensor has none, so
autocast does nothing to simulated tensors by itself. While CUDA is mapped
(``mapping.py``) autocast's own state is real — ``torch.autocast("cuda")``
enters and leaves as on a CUDA build, nested ``enabled=False`` regions and
``custom_fwd`` included — and the mapping's function mode reads it before
each torch function and casts that function's arguments as the
AutocastCUDA kernel would cast the aten op it becomes:

* ``LOWER`` — matmuls, linear layers, convolutions, attention, RNN cells:
  floating-point arguments (not float64) to the autocast dtype;
* ``FP32`` — ops autocast keeps in float32 for range (pointwise
  exponentials and logs, norms, softmax, losses, reductions): fp16/bf16
  arguments to float32;
* ``PROMOTE`` — ops over several tensors: to the widest floating dtype
  among them.

The lists are torch's (``aten/src/ATen/autocast_mode.cpp``, the CUDA
kernel registrations, and the "Autocast Op Reference" of torch's AMP
documentation), spelled as the Python-level names the function mode sees
(``F.linear`` is "linear", ``a @ b`` "__matmul__", ``F.cross_entropy``
"cross_entropy"). Each cast is an ``aten::_to_copy`` the recorder sees and
prices, as the cast kernels autocast adds on CUDA are; a leaf tensor that
requires grad (a parameter) is cast once per autocast region, as
autocast's weight cache does, until the optimizer writes it.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LOWER", "FP32", "PROMOTE", "Casts"]

LOWER = frozenset({
    "linear", "matmul", "__matmul__", "__rmatmul__", "mm", "mv", "bmm", "addmm", "addmv",
    "addr", "baddbmm", "addbmm", "chain_matmul", "multi_dot", "linalg_multi_dot", "vecdot",
    "linalg_vecdot", "einsum", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
    "_convolution", "prelu", "scaled_dot_product_attention", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention"})

FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus",
    "layer_norm", "group_norm", "norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
    "upsample_bicubic2d", "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum",
    "cross_entropy", "cross_entropy_loss", "linalg_vector_norm", "linalg_matrix_norm"})

PROMOTE = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot",
                     "grid_sampler", "index_put", "scatter_add", "tensordot", "vdot",
                     "stack", "cat"})

_F32, _F64 = torch.float32, torch.float64
_Tensor = torch.Tensor


def _eligible(t: Any) -> bool:
    return isinstance(t, _Tensor) and t.is_floating_point() and t.dtype is not _F64 \
        and t.is_meta


class Casts:
    """The casts of one mapping: ``cast(name, args, kwargs, dtype)`` gives
    the arguments the function named ``name`` runs on under an autocast
    region of ``dtype``; ``clear()`` empties the weight cache when the
    outermost region ends."""

    def __init__(self) -> None:
        # id(leaf) -> (the leaf, its version when cast, dtype, the cast); the
        # leaf held, not weakly referenced: a weak reference would stop a
        # module move from swapping it (moves.py), and the cast keeps it
        # alive through autograd until clear() anyway
        self.cache: dict[int, tuple] = {}

    def clear(self) -> None:
        self.cache.clear()

    def cast(self, name: str, args: tuple, kwargs: dict,
             dtype: torch.dtype) -> tuple[tuple, dict] | None:
        """The cast arguments, or None when ``name`` is on no list."""
        if name in LOWER:
            to = dtype
        elif name in FP32:
            to = _F32
        elif name in PROMOTE:
            to = self._widest(args, kwargs)
            if to is None:
                return None
        else:
            return None
        return (tuple(self._arg(a, to) for a in args),
                {k: self._arg(v, to) for k, v in kwargs.items()})

    def _widest(self, args: tuple, kwargs: dict) -> torch.dtype | None:
        found = [t.dtype for t in _tensors(args) + _tensors(tuple(kwargs.values()))
                 if _eligible(t)]
        if len(set(found)) < 2:
            return None  # nothing to promote
        return max(found, key=lambda d: torch.finfo(d).bits)

    def _arg(self, a: Any, to: torch.dtype) -> Any:
        if type(a) is list or type(a) is tuple:
            return type(a)(self._one(b, to) for b in a)
        return self._one(a, to)

    def _one(self, t: Any, to: torch.dtype) -> Any:
        if not _eligible(t) or t.dtype is to:
            return t
        if t.is_leaf and t.requires_grad and torch.is_grad_enabled():
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t and hit[1] == t._version and hit[2] is to:
                return hit[3]
            out = t.to(to)
            self.cache[id(t)] = (t, t._version, to, out)
            return out
        return t.to(to)


def _tensors(args: tuple) -> list:
    out = []
    for a in args:
        if isinstance(a, _Tensor):
            out.append(a)
        elif type(a) is list or type(a) is tuple:
            out.extend(b for b in a if isinstance(b, _Tensor))
    return out
