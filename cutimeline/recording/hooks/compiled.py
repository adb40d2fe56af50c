"""torch.compile: each call of an Inductor graph, as an op over the ops it dispatches.

The dispatch mode asks to be ignored by compile internals, so compiled
code stays compiled, and at run time it sees only the ops the compiled
artifact dispatches: every aten op with ``aot_eager``; with Inductor its
extern calls (``aten::mm``, ``aten::addmm``), while its fused kernels run
without passing the dispatcher. This module makes those visible:

* **the op**: every call of a ``CompiledFxGraph`` (one forward or
  backward graph) is an ops row ``inductor::graph_<n>``, n the order in
  which the recording first called that graph, ``grad_fn``
  ``CompiledFunctionBackward`` for a backward graph. Its host interval
  holds the ops its code dispatched (``nesting.py``), so its self time is
  the fused kernels' launches (on the CPU, their work).
* **the device side**: on an owned device, BEGIN and END events around
  the call, cut into COMPILED gpu rows around the inner ops' rows
  (``cut``). On a busy stream a piece is the fused kernels' work; on a
  stream that runs dry inside the graph it also covers the host's
  launching, so it is an upper bound (the plot hatches these rows).
* **on SimGPU**: Inductor compiles a graph over meta tensors to the
  allocation of its outputs: nothing to simulate, and the recording says
  so once (``_not_simulated``).
* **the hook**: ``CompiledFxGraph.__call__`` is wrapped (``installer.py``)
  at start when the program has loaded Inductor, else at the first step
  boundary after it does (so a model's first, compiling, call is not
  recorded as a graph), and records only calls made where this
  recording's mode is on.
"""

from __future__ import annotations

import sys
import warnings
from time import perf_counter_ns as _now
from typing import Any, Callable

import numpy as np
import torch

from ...timeline.schema import COMPILED_PREFIX, NONE, GpuKind, OpFlag
from ..signatures import dtype_shape, Named, shape_text

__all__ = ["graph_class", "wrap", "launch", "graph_device", "cut"]

_LAUNCH, _CAPTURED, _TRUNCATED = int(OpFlag.LAUNCH), int(OpFlag.CAPTURED), int(OpFlag.TRUNCATED)
_KEY = ("inductor",)  # an identity: the first item of compiled graphs' signature keys
_node = torch._C._current_autograd_node


def graph_class() -> Any:
    """Inductor's ``CompiledFxGraph`` once the program has loaded Inductor;
    None before (importing it here would put ≈ 0.2 s of the recorder's own
    work into the recording); False, with a warning, when there is nothing
    to wrap (a half-imported or odd build, a class without its own
    ``__call__``): the program goes on, its compiled graphs unrecorded."""
    if "torch._inductor.codecache" not in sys.modules:
        return None
    try:
        from torch._inductor.codecache import CompiledFxGraph
    except Exception as exc:
        why = f"importing torch._inductor.codecache.CompiledFxGraph failed ({exc})"
    else:
        if "__call__" in CompiledFxGraph.__dict__:
            return CompiledFxGraph
        why = "CompiledFxGraph has no __call__ of its own to wrap"
    warnings.warn(f"cutimeline cannot record torch.compile's graphs in torch "
                  f"{torch.__version__}: {why}. Their calls are not ops of the "
                  f"recording, and on a GPU their fused kernels' time is missing "
                  f"from it (read as idle).", RuntimeWarning, stacklevel=2)
    return False


def wrap(s: Any, original: Callable) -> Callable:
    """``CompiledFxGraph.__call__`` recorded by session ``s``."""
    depth, at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at

    def call(graph: Any, inputs: Any) -> Any:
        # only where this recording's mode is on (not in other threads)
        if s.off or s.paused or not any(getattr(at(i), "s", None) is s
                                        for i in range(depth())):
            return original(graph, inputs)
        return launch(s, original, graph, inputs)
    return call


def launch(s: Any, call: Callable, graph: Any, inputs: Any) -> Any:
    """One call of ``graph`` in session ``s`` (see the module doc): its ops
    row, and on an owned device a launch of kind COMPILED between events."""
    w = s.writer()
    seq, t0 = next(s.count), _now()
    dev = graph_device(graph)
    key = (_KEY, id(graph), dev)
    sig = s.sigs.get(key)
    if sig is None:
        with s.lock:
            s.funcs.append(graph)  # keeps id(graph) in the key unique
            n, s.graphs = s.graphs, s.graphs + 1
        if n == 0 and getattr(s.device, "kind", "") == "sim" and \
                "meta" in (getattr(graph, "device_types", ()) or ()):
            _not_simulated(s)
        if n == 0 and _recompiles_under_modes():
            warnings.warn(
                f"cutimeline: on torch {torch.__version__} Dynamo recompiles a compiled "
                f"graph at every call while a dispatch mode is on (fixed in torch "
                f"{FIXED_IN}), so this recording of a torch.compile'd program runs, and "
                f"shows, compilations the program alone does not do. Record with torch "
                f"≥ {FIXED_IN}, or record the model uncompiled.", RuntimeWarning, stacklevel=4)
        shapes = ", ".join(shape_text(dtype_shape(t)) for t in inputs
                           if isinstance(t, torch.Tensor))
        sig = s.signature(key, Named(f"{COMPILED_PREFIX}{n}"), dev, shapes=shapes)
    sig = sig[0]
    gid = NONE
    if s.backward:  # its backward graph runs in CompiledFunctionBackward
        node = _node()
        if node is not None:
            gid = s.nodes.get(type(node))
            if gid is None:
                gid = s.node(node)
    flags = 0
    if seq >= s.max_ops:
        if seq > s.max_ops:
            return call(graph, inputs)
        s.truncate()
        flags = _TRUNCATED
    d = s.device
    if d is None or flags or not s.owned(w, dev):
        try:
            return call(graph, inputs)
        finally:
            w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
    stream = d.current_stream()
    b = d.begin(stream, seq)
    try:
        out = call(graph, inputs)
    except BaseException:
        w.ops.append((seq, t0, _now(), sig, w.ctx, gid, flags))
        raise
    t1 = _now()
    if b >= 0:  # the inputs are gone (a boxed call clears them): cost by outputs
        e = d.end(stream, seq, Named(s.strings.values[s.sig_table[sig][0]]), (), {}, out)
        w.launches.append((seq, stream, b, e, int(GpuKind.COMPILED)))
        flags |= _LAUNCH
    else:
        flags |= _CAPTURED
    w.ops.append((seq, t0, t1, sig, w.ctx, gid, flags))
    if s.memlog is not None:  # what the graph's kernels allocated, as for an op
        s.memlog.read(seq, t1, Named(s.strings.values[s.sig_table[sig][0]]), (), {}, out)
    return out


NOT_SIMULATED = (
    "torch.compile'd code is not simulated: on meta tensors Inductor compiles each graph "
    "to the allocation of its outputs, so its inductor::graph_N rows cost no GPU time "
    "and their work is missing from the simulated GPU; record the model uncompiled to "
    "simulate it.")


def _not_simulated(s: Any) -> None:
    """Say once, as a warning and in the Timeline's ``meta["warnings"]``,
    that SimGPU cannot simulate the compiled graphs of session ``s``."""
    if NOT_SIMULATED in s.warnings:
        return
    s.warnings.append(NOT_SIMULATED)
    warnings.warn(f"cutimeline: {NOT_SIMULATED}", RuntimeWarning, stacklevel=5)


#: the first torch whose Dynamo reuses compiled code while a dispatch mode
#: with ignore_compile_internals is on (2.4.1 and 2.9.1 recompile at every
#: call; 2.10.0, 2.13.0 and 2.14.1 do not: benchmarks/RESULTS.md)
FIXED_IN = "2.10"


def _recompiles_under_modes() -> bool:
    from torch.torch_version import TorchVersion
    return TorchVersion(torch.__version__) < FIXED_IN


def graph_device(graph: Any) -> torch.device:
    """The torch.device an Inductor graph runs its kernels on: its
    accelerator if it has one (the lowest index; unindexed when it names
    none), else the CPU."""
    types = getattr(graph, "device_types", ()) or ()
    for kind in ("cuda", "xpu", "mps"):
        if kind in types:
            idxs = sorted(getattr(graph, "device_idxs", ()) or ())
            return torch.device(kind, idxs[0]) if idxs else torch.device(kind)
    return torch.device("cpu")


def cut(launches: np.ndarray) -> np.ndarray:
    """Launches ``(seq, stream, begin_event, end_event, kind)`` sorted by
    seq, with each compiled graph's row cut around the rows of the ops it
    dispatched on its stream (events are numbered in the order they were
    recorded): its BEGIN to the first one's BEGIN, that one's END to the
    next one's BEGIN, ..., the last one's END to its END; each piece keeps
    the graph's seq and follows the row whose END opens it."""
    compiled = launches[:, 4] == GpuKind.COMPILED
    if not compiled.any():
        return launches
    other = launches[~compiled]
    by_stream = {}
    for st in np.unique(other[:, 1]):
        rows = other[other[:, 1] == st]
        by_stream[int(st)] = rows[np.argsort(rows[:, 2], kind="stable")]
    pieces, keys = [other], [np.stack([other[:, 0], np.zeros(len(other), np.int64)], 1)]
    for seq, st, b, e, kind in launches[compiled]:
        rows = by_stream.get(int(st), other[:0])
        inner = rows[np.searchsorted(rows[:, 2], b, "right"):np.searchsorted(rows[:, 2], e)]
        inner = inner[inner[:, 3] < e]
        piece = np.empty((len(inner) + 1, 5), np.int64)
        piece[:, 0], piece[:, 1], piece[:, 4] = seq, st, kind
        piece[:, 2] = np.concatenate([[b], inner[:, 3]])
        piece[:, 3] = np.concatenate([inner[:, 2], [e]])
        pieces.append(piece)
        keys.append(np.stack([np.concatenate([[seq], inner[:, 0]]),
                              np.ones(len(piece), np.int64)], 1))
    out, key = np.concatenate(pieces), np.concatenate(keys)
    return out[np.lexsort((key[:, 1], key[:, 0]))]
