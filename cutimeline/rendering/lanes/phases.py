"""The phase of each op (forward / other, backward, optimizer, data, sync),
which picks its colour, and that of the GPU work it launched.

From where the op began: in a backward span or with an autograd node →
backward; in an optimizer span → optimizer; in a DataLoader fetch →
data; a host-blocking op → sync (later rules win). GPU work takes its
op's phase but sync (the wait is the host's, not the kernel's: on a GPU
lane the sync colour is the idle time after a sync), and a memcpy or
memset is a copy whatever launched it. Drawing only: the phase is not a
measure the analysis reports.
"""

from __future__ import annotations

import numpy as np

from ...numeric import intervals as iv
from ...timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from ..palette import PHASES

__all__ = ["FORWARD", "BACKWARD", "OPTIMIZER", "DATA", "SYNC", "NO_OP", "COPY", "COPY_OPS",
           "op_phases", "with_syncs", "gpu_phases"]

FORWARD, BACKWARD, OPTIMIZER, DATA, SYNC, NO_OP, COPY = range(len(PHASES))
_COPIES = (int(GpuKind.MEMCPY), int(GpuKind.MEMSET))
# ops whose device work is a copy (overload stripped)
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::_copy_from",
                      "aten::_copy_from_and_resize"})


def _inside(segments: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    b, e = segments
    if len(b) == 0:
        return np.zeros(len(t), bool)
    i = np.searchsorted(b, t, side="right")
    return (i > 0) & (t < e[np.maximum(i - 1, 0)])


def op_phases(tl: Timeline, act, sync: bool = True) -> np.ndarray:
    """The phase of each op, from where it began (see the module doc);
    without the sync rule when ``sync`` is False (``with_syncs`` adds it)."""
    o, s = tl.ops, tl.spans
    t = o.host_begin_ns

    def spans(kind):
        m = s.kind == kind
        return iv.union(s.begin_ns[m], s.end_ns[m])

    phase = np.full(len(o), FORWARD, np.int64)
    phase[(o.grad_fn != NONE) | _inside(spans(SpanKind.BACKWARD), t)] = BACKWARD
    phase[_inside(spans(SpanKind.OPTIMIZER), t)] = OPTIMIZER
    phase[_inside(act.data, t)] = DATA
    return with_syncs(tl, phase) if sync else phase


def with_syncs(tl: Timeline, phase: np.ndarray) -> np.ndarray:
    """``phase`` (of ``op_phases(sync=False)``) with host-blocking ops sync."""
    sync = (tl.ops.flags & OpFlag.SYNC) != 0
    y_op = tl.syncs.op
    sync[y_op[y_op >= 0]] = True
    out = phase.copy()
    out[sync] = SYNC
    return out


def gpu_phases(tl: Timeline, phase: np.ndarray) -> np.ndarray:
    """The phase of each gpu row: that of the op that launched it (``phase``:
    ``op_phases(sync=False)``), "no op" where that op is unknown, "copy" for
    a memcpy or memset (an imported row of that kind, or a recorded row of
    a copy op: ``COPY_OPS``)."""
    g = tl.gpu
    if not len(phase):
        out = np.full(len(g), NO_OP, np.int64)
    else:
        op = np.maximum(g.op, 0)
        out = np.where(g.op >= 0, phase[op], NO_OP)
        copying = np.array([s.split(".")[0] in COPY_OPS for s in tl.strings] + [False])
        names = np.asarray(tl.ops["name"], np.int64)
        is_copy = copying[np.where(names == NONE, len(tl.strings), names)]
        out[(g.op >= 0) & is_copy[op]] = COPY
    out[np.isin(g.kind, _COPIES)] = COPY
    return out
