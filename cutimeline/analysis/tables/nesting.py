"""Ops inside ops: the host time an op spent itself, without the ops nested in it.

torch.profiler traces nest: ``aten::linear`` holds ``aten::t`` and
``aten::addmm``, which holds the launch. Summing their ``host_end −
host_begin`` counts the same host time once per level, so "where did the
host's time go" must ask for self time instead: an op's duration minus the
durations of its direct children.

Where the nesting comes from:

* imported traces: ``ops.depth`` as ``formats/kineto/`` assigns it (per thread,
  in order of begin, longer first on ties, with External ids deciding
  where ops begin at one instant);
* recordings (``meta["source"]`` "record" or "merge"), where ``ops.depth``
  is the *module* depth: by containment of host intervals on each thread.
  The recorder sees leaf ops, so only a compiled graph's op
  (``inductor::graph_<n>``) holds others: the ops its code dispatched.

Then an op at depth d belongs to the last op before it at depth d − 1 on
its thread.
"""

from __future__ import annotations

import numpy as np

from ...timeline.schema import COMPILED_PREFIX
from ...timeline.timeline import Timeline

__all__ = ["self_ns", "parents", "op_depth", "nested"]

#: meta["source"] of Timelines whose ops.depth is the module depth
RECORDED = frozenset({"record", "merge"})


def op_depth(tl: Timeline) -> np.ndarray:
    """How many ops each op is nested in (int64; see the module doc)."""
    o = tl.ops
    if tl.meta.get("source") not in RECORDED:
        return np.maximum(np.asarray(o.depth, np.int64), 0)
    graphs = [i for i, v in enumerate(tl.strings) if v.startswith(COMPILED_PREFIX)]
    if not graphs or not np.isin(np.asarray(o["name"]), graphs).any():
        return np.zeros(len(o), np.int64)  # leaf ops only: nothing to sort
    begin = np.asarray(o.host_begin_ns, np.int64)
    end = np.asarray(o.host_end_ns, np.int64)
    order = np.lexsort((begin - end, begin, np.asarray(o.thread, np.int64)))
    return _contained(begin[order], end[order],
                      np.asarray(o.thread, np.int64)[order])[np.argsort(order)]


def _contained(begin: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Depth by containment of intervals sorted by thread, begin and longer
    first: level by level, an interval not yet placed is inside another when
    an earlier unplaced one of its thread ends after it begins and no
    earlier than it ends (intervals of one level do not overlap, so the
    running maximum of their ends finds the container)."""
    depth = np.zeros(len(begin), np.int64)
    left = np.arange(len(begin))
    while len(left) > 1:
        b, e, th = begin[left], end[left], thread[left]
        reach = np.full(len(left), np.iinfo(np.int64).min)
        first = np.r_[True, th[1:] != th[:-1]]
        # the running maximum of earlier ends, restarted at each thread
        start = np.flatnonzero(first)
        for i, j in zip(start, np.r_[start[1:], len(left)]):
            if j - i > 1:
                reach[i + 1:j] = np.maximum.accumulate(e[i:j - 1])
        inside = (reach > b) & (reach >= e)
        if not inside.any():
            break
        left = left[inside]
        depth[left] += 1
    return depth


def nested(tl: Timeline) -> bool:
    """Whether any op of ``tl`` is nested in another."""
    return bool(len(tl.ops)) and bool(op_depth(tl).max() > 0)


def parents(tl: Timeline) -> np.ndarray:
    """Row of each op's direct parent op (-1 for a top-level op)."""
    o = tl.ops
    n = len(o)
    parent = np.full(n, -1, np.int64)
    if n == 0:
        return parent
    depth = op_depth(tl)
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
