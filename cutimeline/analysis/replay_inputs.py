"""What the overhead replay (``compensation.py``) needs of a Timeline's
device side: its gpu rows in launch order with their streams, recorded
times and launch latencies, which streams each sync waits for, and the
launch queue depth, and the recorded waits it keeps (``held``). Apart from the replay so that each module stays one
responsibility: this one reads the Timeline, that one runs the model.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numeric.engines import as_i64, empty_i64
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .facts import column_facts, facts_of

__all__ = ["engine_inputs", "launch_queue", "held", "LAUNCH_QUEUE"]

LAUNCH_QUEUE = 1024  # pending launches per stream at which CUDA blocks the host
_FAR_PAST = -(2 ** 62)


def engine_inputs(tl: Timeline, ln, sy: np.ndarray, keep: np.ndarray | None = None,
                  launch: np.ndarray | None = None, engine: str = "numba"):
    """What ``replay`` needs of the device side: (the gpu rows in launch
    order, or None when they are in it already and ``keep`` keeps them
    all; with ``keep`` only the kept rows; a dict of their ``g_launch``, ``g_grp``,
    ``g_begin``, ``g_end`` and ``lam``; each sync's row of ``covers``; the
    bool ``covers``, sync kinds × streams). ``sy``: the syncs replayed, by
    begin. ``launch``: the rows' host launch times to use (default the
    recorded ones); an unknown launch is taken as begin − λ."""
    y = tl.syncs
    if ln is None:
        return (np.zeros(0, np.int64), dict(
            g_launch=np.zeros(0), g_grp=np.zeros(0), g_begin=np.zeros(0),
            g_end=np.zeros(0), lam=np.zeros(0)), np.zeros(len(sy), np.int64),
            np.zeros((1, 0), bool))
    keys, n_s = ln.stream_keys, len(ln.stream_keys)
    lam = ln.streams.lam
    sid = ln.streams.of_row
    launch = ln.launch if launch is None else launch
    # the recorded column's facts are remembered (``facts.py``): no pass
    f = column_facts(tl.gpu, "launch_ns", engine) if launch is tl.gpu.launch_ns else \
        facts_of(launch, engine)
    if f.none:
        launch = np.where(launch != NONE, launch, ln.begin - lam[sid])
        f = facts_of(launch, engine)
    if keep is None or (f.sorted and keep.all()):
        rows = None if f.sorted else np.argsort(launch, kind="stable")
    else:  # rows in launch order keep it when some are left out: no sort
        kept = np.flatnonzero(keep)
        rows = kept if f.sorted else kept[np.argsort(launch[kept], kind="stable")]
    end = _sync_rows_clipped(tl, ln)
    if rows is None:
        g = dict(g_launch=launch, g_grp=sid, g_begin=ln.begin, g_end=end, lam=lam)
    else:
        g = dict(g_launch=launch[rows], g_grp=sid[rows], g_begin=ln.begin[rows],
                 g_end=end[rows], lam=lam)
    # which streams a sync covers: its stream on its device, or all of
    # its device's streams (all streams when the device is unknown)
    dev, st = y.device[sy].astype(np.int64), y.stream[sy].astype(np.int64)
    kinds, s_grp = np.unique(np.stack([dev, st], 1), axis=0,
                             return_inverse=True) if len(sy) else \
        (np.zeros((0, 2), np.int64), np.zeros(0, np.int64))
    s_grp = s_grp.reshape(-1)
    covers = np.zeros((max(len(kinds), 1), n_s), bool)
    for k, (d, s) in enumerate(kinds):
        covers[k] = ((keys[:, 0] == d) | (d == NONE)) & \
            ((keys[:, 1] == s) | (s == NONE))
    return rows, g, s_grp, covers


def launch_queue(tl: Timeline) -> int:
    """The launch queue depth the replay gives each stream of ``tl``: what
    its device recorded in ``meta["launch_queue"]`` (a SimGPU its own, 0
    when unbounded), else CUDA's ``LAUNCH_QUEUE``."""
    d = tl.meta.get("launch_queue", LAUNCH_QUEUE)
    return LAUNCH_QUEUE if d is None else int(d)


def _sync_rows_clipped(tl: Timeline, ln) -> np.ndarray:
    """The gpu rows' ends, those of a sync op's own rows (a ``.item()``'s
    read-back) no later than the host's return from that sync: the row's
    closing event is recorded when the host is back, so its recorded end
    includes the host's wake-up, which the replay adds once more as the
    sync's own latency (a sync would wait for its own return)."""
    y, g = tl.syncs, tl.gpu
    has = y.op != NONE
    if not has.any() or not len(g):
        return ln.end
    back = np.full(len(tl.ops), NONE, np.int64)
    np.maximum.at(back, np.asarray(y.op[has], np.int64), np.asarray(y.host_end_ns[has], np.int64))
    at = np.where(g.op != NONE, back[np.maximum(g.op, 0)], NONE)
    hit = at != NONE
    if not hit.any():
        return ln.end
    return np.where(hit, np.maximum(np.minimum(ln.end, at), ln.begin), ln.end)


@njit(cache=True)
def _held_nb(g_launch, g_grp, g_begin, g_end, lam):
    hold = empty_i64(len(g_launch))
    prev = np.full(len(lam), _FAR_PAST, np.int64)
    for j in range(len(g_launch)):
        hold[j] = _FAR_PAST
        s = g_grp[j]
        if g_begin[j] > max(prev[s], g_launch[j] + lam[s]):
            hold[j] = g_begin[j]
        prev[s] = max(prev[s], g_end[j])
    return hold


def held(g_launch, g_grp, g_begin, g_end, lam, engine: str = "numba") -> np.ndarray:
    """Recorded begin of each gpu row (sorted by launch) that waited on
    something besides its stream and its launch (it began after both its
    stream's previous work ended and launch + λ), else far in the past:
    the replay keeps such a row no earlier than this, shifted."""
    g_launch, g_grp, g_begin, g_end, lam = (as_i64(a) for a in
                                            (g_launch, g_grp, g_begin, g_end, lam))
    if engine == "numba":
        return _held_nb(g_launch, g_grp, g_begin, g_end, lam)
    hold = np.full(len(g_launch), _FAR_PAST, np.int64)
    for s in np.unique(g_grp):
        r = np.flatnonzero(g_grp == s)
        prev = np.maximum.accumulate(g_end[r])
        prev = np.concatenate([[_FAR_PAST], prev[:-1]])
        waited = g_begin[r] > np.maximum(prev, g_launch[r] + lam[s])
        hold[r[waited]] = g_begin[r[waited]]
    return hold
