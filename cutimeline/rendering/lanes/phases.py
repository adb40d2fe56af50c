"""The phase of each op (forward / other, backward, optimizer, data, sync),
which picks its colour, and that of the GPU work it launched.

From where the op began: in a backward span or with an autograd node →
backward; in an optimizer span → optimizer; in a DataLoader fetch →
data; a host-blocking op → sync (later rules win). Drawing only: the
phase is not a measure the analysis reports.
"""

from __future__ import annotations

import numpy as np

from ...numeric import intervals as iv
from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from ..palette import PHASES

__all__ = ["FORWARD", "BACKWARD", "OPTIMIZER", "DATA", "SYNC", "NO_OP", "op_phases",
           "gpu_phases"]

FORWARD, BACKWARD, OPTIMIZER, DATA, SYNC, NO_OP = range(len(PHASES))


def _inside(segments: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    b, e = segments
    if len(b) == 0:
        return np.zeros(len(t), bool)
    i = np.searchsorted(b, t, side="right")
    return (i > 0) & (t < e[np.maximum(i - 1, 0)])


def op_phases(tl: Timeline, act) -> np.ndarray:
    """The phase of each op, from where it began (see the module doc)."""
    o, s = tl.ops, tl.spans
    t = o.host_begin_ns

    def spans(kind):
        m = s.kind == kind
        return iv.union(s.begin_ns[m], s.end_ns[m])

    phase = np.full(len(o), FORWARD, np.int64)
    phase[(o.grad_fn != NONE) | _inside(spans(SpanKind.BACKWARD), t)] = BACKWARD
    phase[_inside(spans(SpanKind.OPTIMIZER), t)] = OPTIMIZER
    phase[_inside(act.data, t)] = DATA
    sync = (o.flags & OpFlag.SYNC) != 0
    y_op = tl.syncs.op
    sync[y_op[y_op >= 0]] = True
    phase[sync] = SYNC
    return phase


def gpu_phases(tl: Timeline, phase: np.ndarray) -> np.ndarray:
    """The phase of each gpu row: that of the op that launched it, "no op"
    where that op is unknown."""
    g = tl.gpu
    if not len(phase):
        return np.full(len(g), NO_OP, np.int64)
    return np.where(g.op >= 0, phase[np.maximum(g.op, 0)], NO_OP)
