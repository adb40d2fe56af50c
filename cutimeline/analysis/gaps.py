"""Why the GPU was idle: the cause of every gap in a stream's (or device's) work.

A *gap* on a stream (or a device: the union of its streams) is a stretch with
no work between two busy intervals, or before the first / after the last.
It ends when the next work begins; call that work's host launch time L, the
gap [g0, g1), and λ the stream's smallest observed launch latency
(``begin − launch`` over its rows). Then:

* **dependency** — L ≤ g0: the work was queued before the gap began, yet
  started only at g1 (it waited on another stream or an event, or on
  latency). The whole gap is dependency.
* **host** — L > g0: nothing was queued, the GPU waited for the host. The
  host part is [g0, min(L + λ, g1)): had the host launched at g0 the work
  would have started λ later. Any rest, [L + λ, g1), is dependency. A gap
  with no next work (the tail) is host time throughout.
* **unknown** — the next work has no launch time (imported traces whose
  launch call was not captured).

The host part is split by what the host was doing, instant by instant
(apportioned, so a gap spent first loading data and then dispatching counts
both): **data** while in a DataLoader fetch (DATA spans, and user spans
whose name contains "DataLoader", as torch.profiler names its fetches);
**sync** while blocked in a host-blocking op (the syncs table, SYNC spans
and ops flagged SYNC); **dispatch** otherwise (dispatching ops, Python).
Data wins where a fetch contains a sync. One more rule makes a sync's
cost visible: a sync drains the queue, so the host time right after it is
time the GPU would not have lost without it. When a gap begins while the
host is in a sync (or within ``slack_ns``, 100 µs, of its end, which
absorbs clock alignment error), or right after the sync op's own gpu row
(the recorder brackets a sync op with events too; its closing event runs
when the host is back, after the recorder's bookkeeping), the host part up
to the next data fetch counts as sync. A gap that began before the sync
did not qualify by time: the GPU was idle before the host started to wait,
so the sync is not what emptied the queue.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..numeric import intervals as iv
from ..numeric.engines import I64_MAX
from ..timeline.schema import NONE, OpFlag, SpanKind
from ..timeline.timeline import Timeline

__all__ = ["Cause", "CAUSES", "HostActivity", "host_activity", "classify"]


class Cause(enum.IntEnum):
    """Columns of the amounts ``classify`` returns, and ``gaps.cause``."""
    DATA = 0
    SYNC = 1
    DISPATCH = 2
    DEPENDENCY = 3
    UNKNOWN = 4


CAUSES = tuple(c.name.lower() for c in Cause)
HOST_CAUSES = (Cause.DATA, Cause.SYNC, Cause.DISPATCH)


@dataclass(frozen=True)
class HostActivity:
    """The host's activity as sorted disjoint segments (ns): data fetches,
    syncs (all of them), and syncs outside data fetches."""
    data: tuple[np.ndarray, np.ndarray]
    sync: tuple[np.ndarray, np.ndarray]
    sync_only: tuple[np.ndarray, np.ndarray]
    slack_ns: int


def host_activity(tl: Timeline, slack_ns: int = 100_000,
                  engine: str = "numba") -> HostActivity:
    """Data and sync segments of a Timeline's host side (all threads)."""
    s, y, o = tl.spans, tl.syncs, tl.ops
    data = s.kind == SpanKind.DATA
    user = np.flatnonzero(s.kind == SpanKind.USER)
    if len(user):
        names = tl.decode(s["name"][user])
        data[user[[("DataLoader" in str(n)) for n in names]]] = True
    sync_ops = (o.flags & OpFlag.SYNC) != 0
    span_sync = s.kind == SpanKind.SYNC
    d = iv.union(s.begin_ns[data], s.end_ns[data], engine)
    sy = iv.union(np.concatenate([y.host_begin_ns, s.begin_ns[span_sync],
                                  o.host_begin_ns[sync_ops]]),
                  np.concatenate([y.host_end_ns, s.end_ns[span_sync],
                                  o.host_end_ns[sync_ops]]), engine)
    return HostActivity(d, sy, subtract(sy, d), int(slack_ns))


def subtract(a: tuple[np.ndarray, np.ndarray],
             b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Segments of a not covered by b (both sorted and disjoint)."""
    (ab, ae), (bb, be) = a, b
    if len(ab) == 0 or len(bb) == 0:
        return ab, ae
    cuts = np.unique(np.concatenate([ab, ae, bb, be]))
    left = cuts[:-1]

    def inside(sb, se):  # is [left, next cut) inside the segments?
        i = np.searchsorted(sb, left, side="right")
        return (i > 0) & (left < se[np.maximum(i - 1, 0)])

    keep = inside(ab, ae) & ~inside(bb, be)
    if not keep.any():
        return ab[:0], ae[:0]
    lb, le = left[keep], cuts[1:][keep]
    head = np.ones(len(lb), bool)
    head[1:] = lb[1:] != le[:-1]  # rejoin pieces that touch
    idx = np.flatnonzero(head)
    tail = np.append(idx[1:] - 1, len(lb) - 1)
    return lb[idx], le[tail]


def classify(g0, g1, launch, has_next, lam, act: HostActivity,
             qa=None, qb=None, engine: str = "numba", after_sync=None) -> np.ndarray:
    """(n, 5) int64 ns of each gap by ``Cause`` (see the module doc).

    ``g0, g1``: the gaps; ``launch``: launch time of the work that ends each
    gap (NONE if unknown); ``has_next``: False for a tail gap; ``lam``: the
    latency λ of each gap's stream. ``qa, qb`` (default the gap itself)
    clip each gap to part of it: the amounts are those of [qa, qb) only,
    with the causes of the whole gap. ``after_sync`` (bool per gap) marks
    gaps whose preceding work was a sync op's own: they are post-sync
    whatever their distance from the sync's end.
    """
    g0, g1, launch, lam = (np.asarray(x, np.int64) for x in (g0, g1, launch, lam))
    has_next = np.asarray(has_next, bool)
    qa = g0 if qa is None else np.maximum(np.asarray(qa, np.int64), g0)
    qb = g1 if qb is None else np.minimum(np.asarray(qb, np.int64), g1)
    qb = np.maximum(qb, qa)
    out = np.zeros((len(g0), len(Cause)), np.int64)
    if len(g0) == 0:
        return out
    unknown = has_next & (launch == NONE)
    queued = has_next & ~unknown & (launch <= g0)
    h = np.where(has_next, np.minimum(launch + np.maximum(lam, 0), g1), g1)
    h = np.where(unknown | queued, g0, h)
    # post-sync rule: the gap began in (or just after) a sync, not in a fetch
    db, de = act.data
    sb, se = act.sync
    if len(sb):
        j = iv.count_le(sb, g0, engine)
        near = (j > 0) & (g0 <= se[np.maximum(j - 1, 0)] + act.slack_ns)
    else:
        near = np.zeros(len(g0), bool)
    if after_sync is not None:
        near = near | np.asarray(after_sync, bool)
    if len(db):
        i = iv.count_le(db, g0, engine)
        in_data = (i > 0) & (g0 < de[np.maximum(i - 1, 0)])
        nxt = np.where(i < len(db), db[np.minimum(i, len(db) - 1)], I64_MAX)
    else:
        in_data = np.zeros(len(g0), bool)
        nxt = np.full(len(g0), I64_MAX, np.int64)
    cut = np.where(near & ~in_data, np.minimum(nxt, h), g0)
    hb = np.minimum(qb, h)
    out[:, Cause.SYNC] = np.maximum(np.minimum(cut, hb) - qa, 0)
    ra = np.maximum(qa, cut)
    rb = np.maximum(hb, ra)
    data = iv.coverage(db, de, ra, rb, engine)
    sync = iv.coverage(*act.sync_only, ra, rb, engine)
    out[:, Cause.DATA] = data
    out[:, Cause.SYNC] += sync
    out[:, Cause.DISPATCH] = rb - ra - data - sync
    out[:, Cause.DEPENDENCY] = np.maximum(qb - np.maximum(qa, h), 0)
    out[unknown] = 0
    out[unknown, Cause.UNKNOWN] = (qb - qa)[unknown]
    return out
