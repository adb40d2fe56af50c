"""Two recordings of the same steps, their aten op streams aligned op by op.

Which ops take part, on each side:

* **cutimeline** (a recorded Timeline): every ops row except those in the
  ``profiler`` namespace — ``record_function``'s enter/exit calls, which the
  dispatch mode sees as ops and torch.profiler keeps as ranges instead.
* **torch.profiler** (an imported Kineto trace): its *leaf aten ops* in the
  dispatch mode's sense. The mode sits below autograd and below the
  ``CompositeImplicitAutograd`` decompositions, and does not see the ops
  that kernels call internally. So a ``cpu_op`` event counts when it is
  named like an operator (``ns::name``, one ``::``), is not in the
  ``profiler`` namespace, is not a ``CompositeImplicitAutograd`` op (those
  count through their children: ``aten::linear`` as ``aten::t`` and
  ``aten::addmm``), and has no counted ancestor (``aten::t`` counts; the
  ``aten::transpose`` it calls does not). Non-operator events
  (``AddmmBackward0``, ``autograd::engine::evaluate_function: …``) are
  transparent: their children may count.

Names are compared with the overload stripped (Kineto writes
``aten::add``, the recorder ``aten::add.Tensor``). The streams are aligned
step by step as a longest common subsequence (``common_subsequence``:
Myers' diff; difflib for streams too different), with the few
substitutions that a ``TorchDispatchMode`` causes by being active
(``SUBSTITUTES``) keyed alike on both sides and counted apart when the
names differ. Ops left over on the profiler's side are *missing* from
ours, ops left over on ours are *extra*. ``EXPLAINED`` says why each known
difference happens; where our pass recorded a SimGPU (``cuda_paths``), the
CUDA op stream's own paths (foreach and fused optimizers, fused attention)
against the profiler's CPU pass explain the ops around them (``paths.py``).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .paths import PATHS, explain

__all__ = ["OpMatch", "match_ops", "common_subsequence", "recorded_ops",
           "profiler_leaves", "decomposes", "base_name", "SUBSTITUTES", "EXPLAINED"]

_OPERATOR = re.compile(r"[A-Za-z_]\w*::\w+(\.\w+)?")
# Not matched: record_function ranges, and the recorder's own ops for calls
# that pass no dispatcher (a compiled graph, a CUDA graph replay; their
# inner aten ops are matched)
HIDDEN_NAMESPACES = ("profiler", "inductor", "cudagraph")

# profiler's name -> the name our stream shows instead. Both come from
# at::isTensorSubclassLike, which is true while any dispatch mode is active.
SUBSTITUTES = {
    "aten::_reshape_alias": "aten::view",
    "aten::add_": "aten::add",
}
# Why each known difference exists: a (ours, profiler's) pair for a
# substitution, a name for an extra or missing op.
EXPLAINED = {
    ("aten::view", "aten::_reshape_alias"):
        "`reshape` (CompositeImplicitAutograd) takes `_reshape_alias` for a "
        "plain tensor but `view` when `isTensorSubclassLike` holds, which it "
        "does while any TorchDispatchMode is active; both are metadata-only.",
    ("aten::add", "aten::add_"):
        "for composite compliance under a dispatch mode, the autograd engine "
        "sums two gradients for one input out of place (`add`; "
        "`can_accumulate_inplace` rejects subclass-like tensors), and so "
        "does `linear`'s bias on 3-d inputs, where they otherwise add in "
        "place (`add_`).",
    "aten::detach":
        "extra in ours: while a dispatch mode is active, "
        "`TensorImpl::shallow_copy_and_detach` (autograd saving an op's "
        "output for backward, and unpacking it there) calls the mode's "
        "`detach` instead of copying in C++, so the mode sees an "
        "`aten::detach` that the uninstrumented program never dispatches. "
        "They follow ops that save their result (`relu`, `_log_softmax`, "
        "`_softmax`) and precede those results' use in backward.",
}


def base_name(name: str) -> str:
    """The op name without its overload: "aten::add.Tensor" → "aten::add"."""
    ns, sep, rest = name.partition("::")
    return ns + sep + rest.split(".", 1)[0] if sep else name


@functools.lru_cache(maxsize=None)
def decomposes(name: str) -> bool:
    """Whether the op ``name`` (overload stripped, "aten::linear") is a
    ``CompositeImplicitAutograd`` op, which a dispatch mode never sees
    itself, only the ops of its decomposition.

    Kineto does not name the overload, so every overload (``out`` variants
    aside) must decompose — the rule of tests/recording/test_recorder.py. Unknown
    names do not decompose."""
    import torch  # here, not at the top: importing Comparison must not load torch
    ns, _, op = base_name(name).partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
    except (AttributeError, RuntimeError):  # not an operator torch knows
        return False
    found = []
    for overload in packet.overloads():
        if "out" in overload:
            continue
        qualified = f"{ns}::{op}" + ("" if overload == "default" else f".{overload}")
        try:
            found.append(torch._C._dispatch_has_kernel_for_dispatch_key(
                qualified, "CompositeImplicitAutograd"))
        except RuntimeError:  # listed but not registered (aten::add.t)
            pass
    return bool(found) and all(found)


def _operator(name: str) -> bool:
    return _OPERATOR.fullmatch(name) is not None and \
        name.partition("::")[0] not in HIDDEN_NAMESPACES


def recorded_ops(tl: Timeline) -> np.ndarray:
    """Mask over ``tl.ops``: the rows of a recorded Timeline that take part
    (all but the ``profiler`` namespace)."""
    hidden = tuple(f"{n}::" for n in HIDDEN_NAMESPACES)
    keep_id = np.array([not s.startswith(hidden) for s in tl.strings] + [True], bool)
    ids = np.asarray(tl.ops["name"], np.int64)
    return keep_id[np.where(ids == NONE, len(tl.strings), ids)]


def profiler_leaves(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """The leaf aten ops of an imported Kineto trace (see the module doc).

    Returns ``(leaf, owner)``: a mask over ``tl.ops`` of the leaf ops, and
    for every ops row the leaf op that holds it — itself, its counted
    ancestor, or NONE (device work launched from a nested op is the leaf
    op's work). Walks the importer's per-thread nesting (``ops.depth``, in
    the ops' time order, parents before children)."""
    o = tl.ops
    ids = np.asarray(o["name"], np.int64)
    counts_id = np.array([_operator(s) and not decomposes(s) for s in tl.strings]
                         + [False], bool)
    counts = counts_id[np.where(ids == NONE, len(tl.strings), ids)].tolist()
    leaf = np.zeros(len(o), bool)
    owner = np.full(len(o), NONE, np.int64)
    stacks: dict[int, list[int]] = {}   # thread -> owner at each depth
    for row, (thread, depth) in enumerate(zip(o.thread.tolist(), o.depth.tolist())):
        stack = stacks.setdefault(thread, [])
        del stack[depth:]
        above = stack[-1] if stack else NONE
        if above == NONE and counts[row]:
            leaf[row], above = True, row
        owner[row] = above
        stack.append(above)
    return leaf, owner


@dataclass(frozen=True, eq=False)
class OpMatch:
    """The alignment of our op stream with the profiler's.

    ``ours``/``theirs``: the names compared (overloads stripped), all steps
    one after another; ``ours_step``/``theirs_step``: each one's step
    (0-based within the comparison); ``pairs``: (n, 2) positions
    (ours, theirs) of the matched ops, in order; ``cuda_paths``: our pass
    dispatched the CUDA op stream (a SimGPU) against the profiler's CPU
    pass, whose systematic differences ``paths.PATHS`` explain."""

    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    ours_step: np.ndarray
    theirs_step: np.ndarray
    pairs: np.ndarray
    cuda_paths: bool = False

    @property
    def matched(self) -> int:
        return len(self.pairs)

    @property
    def fraction(self) -> float:
        """Matched ops ÷ the profiler's leaf ops (1.0 when both are empty)."""
        if not self.theirs:
            return 0.0 if self.ours else 1.0
        return self.matched / len(self.theirs)

    @property
    def missing(self) -> np.ndarray:
        """Positions in ``theirs`` that no op of ours matched."""
        return np.setdiff1d(np.arange(len(self.theirs)), self.pairs[:, 1])

    @property
    def extra(self) -> np.ndarray:
        """Positions in ``ours`` that match no op of the profiler's."""
        return np.setdiff1d(np.arange(len(self.ours)), self.pairs[:, 0])

    def substituted(self) -> Counter:
        """Matched pairs whose names differ: (ours, theirs) → count."""
        return Counter((self.ours[i], self.theirs[j]) for i, j in self.pairs.tolist()
                       if self.ours[i] != self.theirs[j])

    def missing_names(self) -> Counter:
        return Counter(self.theirs[j] for j in self.missing.tolist())

    def extra_names(self) -> Counter:
        return Counter(self.ours[i] for i in self.extra.tolist())

    @cached_property
    def _paths(self) -> tuple[dict[int, str], dict[int, str]]:
        """Positions (ours, theirs) a CUDA path explains: its name."""
        if not self.cuda_paths:
            return {}, {}
        return explain(self.ours, self.theirs, self.ours_step, self.theirs_step,
                       self.pairs, lambda n: n in EXPLAINED)

    def differences(self) -> list[dict]:
        """Every difference, one row per kind, name and reason, most
        counted first within substituted, missing and extra: ``kind``,
        ``name`` (ours for a substitution), ``theirs`` (a substitution's),
        ``count``, ``why`` ("" when unexplained), ``path`` (the
        ``paths.PATHS`` name that explains it, or None), ``at`` (the first
        position, in its side's stream, for ``example``)."""
        paths = {p.name: p.why for p in PATHS}
        rows = [{"kind": "substituted", "name": a, "theirs": b, "count": c,
                 "why": EXPLAINED.get((a, b), ""), "path": None, "at": None}
                for (a, b), c in self.substituted().most_common()]
        ours_why, theirs_why = self._paths
        for kind, names, free, why in (("missing", self.theirs, self.missing, theirs_why),
                                       ("extra", self.ours, self.extra, ours_why)):
            groups: dict[tuple, list[int]] = {}
            for p in free.tolist():
                groups.setdefault((names[p], why.get(p)), []).append(p)
            rows += sorted(({"kind": kind, "name": n, "theirs": None, "count": len(at),
                             "why": paths[path] if path else EXPLAINED.get(n, ""),
                             "path": path, "at": at[0]}
                            for (n, path), at in groups.items()),
                           key=lambda r: -r["count"])
        return rows

    def unexplained(self) -> list[str]:
        """The differences no reason explains (``EXPLAINED``; with
        ``cuda_paths``, ``paths.PATHS`` too)."""
        return [f"{r['name']} for {r['theirs']}" if r["kind"] == "substituted" else
                f"{r['kind']} {r['name']}" for r in self.differences() if not r["why"]]

    def example(self, side: str, name: str, context: int = 2, at: int | None = None) -> str:
        """One place where ``name`` is extra (side "ours") or missing (side
        "theirs") — the first, or position ``at`` — bracketed among its
        neighbours: "step 0: a, [b], c"."""
        names, steps, free = (self.ours, self.ours_step, self.extra) if side == "ours" \
            else (self.theirs, self.theirs_step, self.missing)
        if at is None:
            at = next(p for p in free.tolist() if names[p] == name)
        lo, hi = max(0, at - context), min(len(names), at + context + 1)
        near = [f"[{names[p]}]" if p == at else names[p] for p in range(lo, hi)]
        return f"step {int(steps[at])}: " + ", ".join(near)

    def to_dict(self, examples: int = 5) -> dict:
        rows = self.differences()

        def top(kind: str, side: str) -> list[dict]:
            return [{"name": r["name"], "count": r["count"],
                     "example": self.example(side, r["name"], at=r["at"]), "why": r["why"]}
                    for r in rows if r["kind"] == kind][:examples]
        return {"ours": len(self.ours), "theirs": len(self.theirs),
                "matched": self.matched, "fraction": self.fraction,
                "cuda_paths": self.cuda_paths,
                "substituted": [{"ours": r["name"], "theirs": r["theirs"], "count": r["count"],
                                 "why": r["why"]} for r in rows if r["kind"] == "substituted"],
                "missing": top("missing", "theirs"),
                "extra": top("extra", "ours"),
                "unexplained": self.unexplained()}


def match_ops(ours: Sequence[str], theirs: Sequence[str], *,
              ours_step: Sequence[int] | None = None,
              theirs_step: Sequence[int] | None = None,
              cuda_paths: bool = False) -> OpMatch:
    """Align two op-name streams (see the module doc). With steps given,
    each step is aligned on its own; a step only one side has is all
    extra or all missing. ``cuda_paths``: ours is the CUDA op stream (a
    SimGPU's) and theirs the CPU one (``OpMatch.cuda_paths``)."""
    ours = tuple(base_name(n) for n in ours)
    theirs = tuple(base_name(n) for n in theirs)
    so = np.zeros(len(ours), np.int64) if ours_step is None else \
        np.asarray(ours_step, np.int64)
    st = np.zeros(len(theirs), np.int64) if theirs_step is None else \
        np.asarray(theirs_step, np.int64)
    if len(so) != len(ours) or len(st) != len(theirs):
        raise CutimelineError("match_ops needs one step number per op name on "
                              "each side; the lengths differ.")
    # Both sides by their substitutes' names, so a real add_ still meets add_.
    ours_keys = [SUBSTITUTES.get(n, n) for n in ours]
    keys = [SUBSTITUTES.get(n, n) for n in theirs]
    pairs = []
    for step in np.union1d(so, st).tolist():
        io, it = np.flatnonzero(so == step), np.flatnonzero(st == step)
        found = common_subsequence([ours_keys[i] for i in io], [keys[j] for j in it])
        pairs.extend((int(io[a]), int(it[b])) for a, b in found)
    return OpMatch(ours, theirs, so, st, np.array(pairs, np.int64).reshape(-1, 2),
                   cuda_paths)


def common_subsequence(a: Sequence[str], b: Sequence[str], *,
                       max_edits: int = 4000) -> list[tuple[int, int]]:
    """Index pairs (i, j), a[i] == b[j], of a longest common subsequence.

    Myers' O((n + m)·D) shortest-edit-script search, D the number of ops
    only one side has: op streams of one step differ in few ops, so this is
    near linear where greedy block matching (difflib) goes astray on
    repetitive streams (layer after identical layer). Past ``max_edits``
    the streams are too different for that to pay, and difflib's
    ``SequenceMatcher`` (longest blocks first, recursively) aligns them."""
    lo = 0   # a common prefix and suffix need no search
    while lo < len(a) and lo < len(b) and a[lo] == b[lo]:
        lo += 1
    hi_a, hi_b = len(a), len(b)
    while hi_a > lo and hi_b > lo and a[hi_a - 1] == b[hi_b - 1]:
        hi_a, hi_b = hi_a - 1, hi_b - 1
    middle = _myers(a[lo:hi_a], b[lo:hi_b], max_edits)
    if middle is None:
        sm = difflib.SequenceMatcher(None, a[lo:hi_a], b[lo:hi_b], autojunk=False)
        middle = [(i + k, j + k) for i, j, size in sm.get_matching_blocks()
                  for k in range(size)]
    tail = range(len(a) - hi_a)
    return ([(i, i) for i in range(lo)] + [(i + lo, j + lo) for i, j in middle]
            + [(hi_a + k, hi_b + k) for k in tail])


def _myers(a: Sequence[str], b: Sequence[str], max_edits: int) -> list | None:
    """The matched pairs of a shortest edit script, or None past max_edits."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    v = {1: 0}           # diagonal k = x - y -> furthest x reached
    trace = []           # v before each round d, for the walk back
    for d in range(min(n + m, max_edits) + 1):
        trace.append(v.copy())
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1] < v[k + 1]):
                x = v[k + 1]          # a step down: b[y] is extra
            else:
                x = v[k - 1] + 1      # a step right: a[x] is extra
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _walk_back(trace, n, m)
    return None


def _walk_back(trace: list[dict], x: int, y: int) -> list[tuple[int, int]]:
    """From the end back through each round's step: the diagonal run
    (matches) that followed it, then the step itself."""
    pairs = []
    for d in range(len(trace) - 1, -1, -1):
        v, k = trace[d], x - y
        prev_k = k + 1 if k == -d or (k != d and v[k - 1] < v[k + 1]) else k - 1
        prev_x = v[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    return pairs[::-1]
