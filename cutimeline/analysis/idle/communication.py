"""Exposed communication: the time a device ran collectives and nothing else.

A collective kernel (NCCL/RCCL: gpu rows of kind COLLECTIVE, as the Kineto
importer marks them) keeps the device busy while it moves data or waits
for the other ranks to arrive. Beside compute it costs the step nothing;
alone it is time the step spends on communication, however busy the
device reads. So a window's *communication* time is its busy time less
the time covered by any other work (kernels, copies, memsets) on the same
device: the collectives' part that no other work hides. The verdicts
(``margins.py``) weigh it beside the idle causes, so a step that mostly
waits for an all-to-all reads communication-bound, not GPU-bound.

Recordings on CUDA see a device collective's enqueue on the current
stream, not NCCL's kernel on its own stream (``recording/measures/collectives.py``),
so there this is zero; traces with the kernels (torch.profiler's) and
SimGPU's recordings (its collectives run on a communication stream of
their own, ``devices/sim/comm.py``) have them.
"""

from __future__ import annotations

import numpy as np

from ...numeric import intervals as iv
from ...timeline.schema import GpuKind
from ...timeline.timeline import Timeline

__all__ = ["collective_rows", "exposed"]


def collective_rows(tl: Timeline) -> np.ndarray:
    """Which gpu rows are collectives (bool per row)."""
    return np.asarray(tl.gpu.kind) == GpuKind.COLLECTIVE


def exposed(tl: Timeline, ln, group: int, w0, w1, engine: str = "numba") -> np.ndarray:
    """Per window [w0, w1) (ns), the time device group ``group`` of the
    lanes ``ln`` ran collectives with no other work beside them."""
    w0, w1 = np.asarray(w0, np.int64), np.asarray(w1, np.int64)
    coll = collective_rows(tl)
    if ln is None or not coll.any():
        return np.zeros(len(w0), np.int64)
    mine = ln.devices.of_row == group if ln.devices.n > 1 else np.ones(len(coll), bool)
    if not (coll & mine).any():
        return np.zeros(len(w0), np.int64)

    def covered(rows):
        b, e = iv.union(ln.begin[rows], ln.end[rows], engine)
        return iv.coverage(b, e, w0, w1, engine)

    return covered(mine) - covered(mine & ~coll)
