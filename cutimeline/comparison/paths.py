"""The systematic differences between the op stream CUDA dispatches and the
one the CPU does, for ``compare(device="sim")``.

A SimGPU records the ops torch would dispatch for CUDA (``devices/sim``:
foreach and fused optimizers, fused attention, fused dropout), while the profiler's pass,
which cannot see a simulated GPU, runs the same program on CPU (meta)
tensors, where torch takes its per-tensor paths. Each ``Path`` here names
one such difference: the ops on our side that only the CUDA path
dispatches (its ``triggers``, and ``companions`` that come with them) and
the ops the CPU path dispatches instead (``replaced``, or derived from the
triggers' names by ``per_tensor``).

Which missing or extra ops a path explains is read off the aligned streams
(``explain``): around each trigger, the stretch of both streams that holds
only the path's ops — the trigger, its companions, what it replaces,
matched or not — and the ops ``opmatch.EXPLAINED`` accounts for anyway
(the mode's ``detach``). Unmatched ops inside that stretch are the path's;
an op of the same name elsewhere (a ``mul`` missing from the forward pass)
stays unexplained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Path", "PATHS", "per_tensor", "explain"]

_A = "aten::"


def per_tensor(name: str) -> tuple[str, ...]:
    """The per-tensor ops a foreach op stands for: ``aten::_foreach_add_``
    → ``aten::add_``, ``aten::add``; ``_foreach_norm`` →
    ``linalg_vector_norm`` (``clip_grad_norm_``)."""
    op = name[len(_A + "_foreach_"):]
    if op == "norm":
        return (_A + "linalg_vector_norm",)
    base = op.rstrip("_")
    return (_A + base, _A + base + "_")


@dataclass(frozen=True)
class Path:
    """One systematic difference (see the module doc)."""

    name: str
    why: str
    triggers: Callable[[str], bool]
    companions: frozenset
    replaced: frozenset = frozenset()
    derive: Callable[[str], tuple[str, ...]] | None = None

    def theirs(self, trigger_names: set[str]) -> frozenset:
        """The profiler-side ops this path replaces, given the triggers seen."""
        if self.derive is None:
            return self.replaced
        return self.replaced.union(*(self.derive(n) for n in trigger_names))


def _names(*ops: str) -> frozenset:
    return frozenset(_A + o for o in ops)


_ATTENTION = ("_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_cudnn_attention")
_FUSED_OPTIMIZERS = ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_")

PATHS = (
    Path("foreach optimizer",
         "the recorded pass ran on a SimGPU, which dispatches what CUDA would: "
         "torch's optimizers default to their foreach kernels there (one "
         "`_foreach_add_` for all parameters; a `lift_fresh` for the step "
         "increment, and an `.item()` (`_local_scalar_dense`) per parameter for "
         "each bias correction), where the profiler's pass, on CPU (meta) "
         "tensors, runs one op per parameter (`add_`, `lerp_`, `mul_`, ...).",
         lambda n: n.startswith(_A + "_foreach_"),
         _names("lift_fresh", "_local_scalar_dense", "detach"),
         _names("_local_scalar_dense"), per_tensor),
    Path("fused optimizer",
         "the recorded pass ran on a SimGPU, where `fused=True` optimizers run "
         "one fused kernel (`_fused_adam_`, ...) as on CUDA, where the "
         "profiler's pass, on CPU (meta) tensors, runs the per-parameter update.",
         lambda n: n.startswith(tuple(_A + f for f in _FUSED_OPTIMIZERS)),
         _names("lift_fresh", "_local_scalar_dense", "detach"),
         _names("add", "add_", "lerp", "lerp_", "mul", "mul_", "addcmul_", "addcdiv_",
                "sqrt", "sqrt_", "div", "div_", "maximum", "maximum_", "neg", "pow",
                "sub", "sub_", "rsub", "_local_scalar_dense", "copy_", "zero_")),
    Path("fused attention",
         "the recorded pass ran on a SimGPU, where "
         "`F.scaled_dot_product_attention` is one fused kernel as on CUDA "
         "(memory-efficient or flash attention, forward and `_backward`, whose "
         "gradients come back through `clone` and `_unsafe_view`), where on the "
         "profiler's CPU (meta) tensors it decomposes into the math path "
         "(`mul`, `bmm`, `_safe_softmax`, dropout's `bernoulli_` and `div_`, "
         "`_softmax_backward_data`, ...).",
         lambda n: n.startswith(tuple(_A + a for a in _ATTENTION)),
         _names("clone", "_unsafe_view", "view", "transpose", "expand", "detach",
                "zeros", "fill_", "masked_fill", "masked_fill_", "logical_not",
                "scalar_tensor", "where", "contiguous"),
         _names("mul", "mul_", "div", "div_", "transpose", "expand", "view", "reshape",
                "_unsafe_view", "clone", "bmm", "baddbmm", "matmul", "_safe_softmax",
                "_softmax", "softmax", "empty_like", "bernoulli_", "dropout",
                "_softmax_backward_data", "add", "add_", "sum", "masked_fill",
                "masked_fill_", "where", "logical_not", "scalar_tensor", "zeros_like",
                "fill_", "neg", "exp", "sub", "squeeze", "unsqueeze", "detach")),
    Path("fused dropout",
         "the recorded pass ran on a SimGPU, where dropout in training is one "
         "`native_dropout` kernel (and `native_dropout_backward`) as aten picks it "
         "for CUDA tensors, where on the profiler's CPU (meta) tensors it runs as "
         "`bernoulli_`, `div_` and `mul` (and a `mul` in backward).",
         lambda n: n.startswith((_A + "native_dropout", _A + "native_dropout_backward")),
         _names("detach"),
         _names("bernoulli_", "div_", "mul", "empty_like", "dropout", "detach")),
)


def explain(ours: Sequence[str], theirs: Sequence[str], ours_step: np.ndarray,
            theirs_step: np.ndarray, pairs: np.ndarray,
            neutral: Callable[[str], bool]) -> tuple[dict[int, str], dict[int, str]]:
    """Which unmatched ops each path explains: ``{position: path name}`` for
    ours (extra) and for theirs (missing). ``neutral(name)``: an extra op
    explained anyway, which a path's stretch may hold (the module doc)."""
    ours_why: dict[int, str] = {}
    theirs_why: dict[int, str] = {}
    for step in np.union1d(ours_step, theirs_step).tolist():
        io, it = np.flatnonzero(ours_step == step), np.flatnonzero(theirs_step == step)
        walk = _walk(io, it, pairs)
        for path in PATHS:
            at = [k for k, (a, _) in enumerate(walk)
                  if a is not None and path.triggers(ours[a])]
            if not at:
                continue
            mine = path.companions | {ours[walk[k][0]] for k in at}
            other = path.theirs({ours[walk[k][0]] for k in at})

            def inside(k: int) -> bool:
                a, b = walk[k]
                if a is not None and b is not None:     # matched: a name of the path
                    return ours[a] in mine or theirs[b] in other or path.triggers(ours[a])
                if a is not None:                       # extra in ours
                    return ours[a] in mine or path.triggers(ours[a]) or neutral(ours[a])
                return theirs[b] in other               # missing from ours
            seen = np.zeros(len(walk), bool)
            for k in at:
                if seen[k]:
                    continue
                lo = hi = k
                while lo > 0 and inside(lo - 1):
                    lo -= 1
                while hi + 1 < len(walk) and inside(hi + 1):
                    hi += 1
                seen[lo:hi + 1] = True
                for a, b in walk[lo:hi + 1]:
                    if b is None and not neutral(ours[a]):   # the mode's own: not the path's
                        ours_why.setdefault(a, path.name)
                    elif a is None:
                        theirs_why.setdefault(b, path.name)
    return ours_why, theirs_why


def _walk(io: np.ndarray, it: np.ndarray, pairs: np.ndarray) -> list[tuple]:
    """One step's aligned streams in order: (ours position, theirs
    position) per entry, None on the side an unmatched op lacks; between
    two matches, ours' unmatched ops first."""
    match = {int(a): int(b) for a, b in pairs.tolist()}
    out: list[tuple] = []
    j = 0
    it = it.tolist()
    for a in io.tolist():
        b = match.get(a)
        if b is None:
            out.append((a, None))
            continue
        while j < len(it) and it[j] != b:
            out.append((None, it[j]))
            j += 1
        out.append((a, b))
        j += 1
    out.extend((None, b) for b in it[j:])
    return out
