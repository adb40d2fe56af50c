"""Ops inside ops: the host time an op spent itself, without the ops nested in it.

The recorder sees leaf ops only (``ops.depth`` is 0 throughout), but
torch.profiler traces nest: ``aten::linear`` holds ``aten::t`` and
``aten::addmm``, which holds the launch. Summing their ``host_end −
host_begin`` counts the same host time once per level, so "where did the
host's time go" must ask for self time instead: an op's duration minus the
durations of its direct children. Children are found from ``ops.depth`` as
``kineto.py`` assigns it: per thread, in order of begin (longer first on
ties), an op at depth d belongs to the last op before it at depth d − 1.
"""

from __future__ import annotations

import numpy as np

from .timeline import Timeline

__all__ = ["self_ns", "parents"]


def parents(tl: Timeline) -> np.ndarray:
    """Row of each op's direct parent op (-1 for a top-level op)."""
    o = tl.ops
    n = len(o)
    parent = np.full(n, -1, np.int64)
    if n == 0:
        return parent
    depth = np.asarray(o.depth, np.int64)
    if depth.max() <= 0:
        return parent
    begin = np.asarray(o.host_begin_ns, np.int64)
    dur = np.asarray(o.host_end_ns, np.int64) - begin
    thread = np.asarray(o.thread, np.int64)
    order = np.lexsort((-dur, begin, thread))
    d, th = depth[order], thread[order]
    pos = np.arange(n)
    for level in range(1, int(d.max()) + 1):
        # the last position at depth level − 1 up to each position
        last = np.maximum.accumulate(np.where(d == level - 1, pos, -1))
        at = np.flatnonzero(d == level)
        p = last[at]
        ok = (p >= 0) & (th[np.maximum(p, 0)] == th[at])
        parent[order[at[ok]]] = order[p[ok]]
    return parent


def self_ns(tl: Timeline) -> np.ndarray:
    """Host ns of each op not spent in the ops nested inside it (int64, ≥ 0)."""
    o = tl.ops
    dur = np.asarray(o.host_end_ns, np.int64) - np.asarray(o.host_begin_ns, np.int64)
    parent = parents(tl)
    child = parent >= 0
    if not child.any():
        return dur
    inner = np.bincount(parent[child], weights=dur[child], minlength=len(o))
    return np.maximum(dur - inner.round().astype(np.int64), 0)
