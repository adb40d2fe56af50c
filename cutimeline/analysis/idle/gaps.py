"""Why the GPU was idle: the cause of every gap in a stream's (or device's) work.

A *gap* on a stream (or a device: the union of its streams) is a stretch with
no work between two busy intervals, or before the first / after the last.
It ends when the next work begins; call that work's host launch time L, the
gap [g0, g1), and λ the stream's smallest observed launch latency
(``begin − launch`` over its rows). Then:

* **dependency** — L ≤ g0: the work was queued before the gap began, yet
  started only at g1 (it waited on another stream or an event, or on
  latency). The whole gap is dependency.
* **host side** — L > g0: nothing was queued, the GPU waited for the host. The
  host part is [g0, min(L + λ, g1)): had the host launched at g0 the work
  would have started λ later. Any rest, [L + λ, g1), is dependency. A gap
  with no next work (the tail) is host-side time throughout.
* **unknown** — the next work has no launch time (imported traces whose
  launch call was not captured).

The host part is split by what the host was doing, instant by instant
(apportioned, so a gap spent first loading data and then launching counts
both): **data** while in a DataLoader fetch (DATA spans, and user spans
whose name contains "DataLoader", as torch.profiler names its fetches);
**sync** while blocked in a host-blocking op (the syncs table, SYNC spans
and ops flagged SYNC); **launch** while dispatching ops: inside an op on
any thread, or in a short op-free stretch between two consecutive ops of
one thread (framework glue: module calls, autograd, the Python lines
between ops), except inside a host-only op of ``host_gap_ns`` or more that
launches nothing (``host_compute``: the host computing on CPU tensors,
which is host time); **host** otherwise: the host was busy elsewhere (user
Python, logging, checkpointing) or idle, in op-free stretches of at least
``host_gap_ns`` (200 µs), before a thread's first op or after its last.
The threshold sits above any framework glue between ops, which costs
~5–30 µs per module call on current CPUs: a stretch that long without
any op is not the cost of launching. So an imported trace whose host sat
idle blames the host, not launch overhead. The host part's last stretch,
[L, L + λ), is the launch's own latency and so launch, whatever the
thread did after the op. Data wins where a fetch
contains a sync, and both win over launch. One more rule makes a sync's
cost visible: a sync drains the queue, so the host time right after it is
time the GPU would not have lost without it. When a gap begins while the
host is in a sync (or within ``slack_ns``, 100 µs, of its end, which
absorbs clock alignment error), or right after the sync op's own gpu row
(the recorder brackets a sync op with events too; its closing event runs
when the host is back, after the recorder's bookkeeping), the host part up
to the next data fetch counts as sync, but no more of it than the host
spent blocked in that sync (and in the syncs right before it with no work
launched between: reads one after another) where the host left for
op-free Python (a stretch of ``host_gap_ns`` or more) before launching
the next work: without the syncs the host would have been that much
earlier, and the next work with it, so that much of the gap is the
sync's; the rest the GPU would have waited anyway (a loop whose host runs
1 ms of Python after reading a value that took 10 µs to come back is
host-bound, not sync-bound). Dispatching right after a sync is the
refill of the queue it emptied, and stays the sync's. A gap that began before the sync
did not qualify by time: the GPU was idle before the host started to wait,
so the sync is not what emptied the queue.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numba import njit

from ...numeric import intervals as iv
from ...numeric.engines import I64_MAX, as_i64, empty_i64
from ...numeric.ordering import is_sorted, sorted_copy
from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.timeline import Timeline

__all__ = ["Cause", "CAUSES", "HOST_GAP_NS", "SYNC_SLACK_NS", "FETCH_WORD", "HostActivity",
           "fetch_spans", "host_activity", "launching", "host_compute", "sync_chains",
           "classify"]


class Cause(enum.IntEnum):
    """Columns of the amounts ``classify`` returns, and ``gaps.cause``."""
    DATA = 0
    SYNC = 1
    LAUNCH = 2
    HOST = 3
    DEPENDENCY = 4
    UNKNOWN = 5


CAUSES = tuple(c.name.lower() for c in Cause)
HOST_CAUSES = (Cause.DATA, Cause.SYNC, Cause.LAUNCH, Cause.HOST)
#: op-free host stretches this long are the host's own time (cause "host"),
#: shorter ones between a thread's ops are the cost of launching: it sits
#: above any framework glue between ops (~5–30 µs per module call on
#: current CPUs), so a host that sat idle is not read as launch overhead
HOST_GAP_NS = 200_000
#: a gap that begins this soon after a sync returned is still the sync's
#: (rule 3): it absorbs the clock alignment error between host and device
SYNC_SLACK_NS = 100_000
#: a user span whose name holds this is a DataLoader fetch: torch.profiler
#: names its fetches "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FETCH_WORD = "DataLoader"


@dataclass(frozen=True)
class HostActivity:
    """The host's activity as sorted disjoint segments (ns): data fetches,
    syncs (all of them), syncs outside data fetches, launching (ops on any
    thread and the short stretches between a thread's ops) and launching
    outside data fetches and syncs."""
    data: tuple[np.ndarray, np.ndarray]
    sync: tuple[np.ndarray, np.ndarray]
    sync_only: tuple[np.ndarray, np.ndarray]
    slack_ns: int
    launching: tuple[np.ndarray, np.ndarray]
    launch_only: tuple[np.ndarray, np.ndarray]
    host_gap_ns: int
    # per sync segment: the host's time blocked in it and in the syncs
    # before it with no work launched between (reads one after another)
    sync_chain: np.ndarray | None = None

    def chain(self) -> np.ndarray:
        """``sync_chain``, or each sync segment's own length without it."""
        sb, se = self.sync
        return np.asarray(se - sb, np.int64) if self.sync_chain is None else \
            self.sync_chain


def launching(begin, end, thread, host_gap_ns: int = HOST_GAP_NS,
              engine: str = "numba") -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint segments where some thread was dispatching: each
    thread's ops joined across op-free stretches shorter than
    ``host_gap_ns``, then all threads' segments joined. One thread's ops
    in time order (a recording's) take one pass of ``_launch_nb``."""
    begin, end = np.asarray(begin, np.int64), np.asarray(end, np.int64)
    thread = np.asarray(thread)
    one = len(thread) == 0 or thread.min() == thread.max()  # np.unique sorts all
    if one and engine == "numba" and len(begin):
        ub, ue, ok = _launch_nb(begin, end, np.int64(host_gap_ns))
        if ok:
            return ub, ue
    end = np.maximum(end, begin)
    parts_b, parts_e = [], []
    threads = thread[:1] if one else np.unique(thread)
    for t in threads:  # a handful of threads: per-thread unions, vectorised
        mine = thread == t if len(threads) > 1 else slice(None)
        ub, ue = iv.union(begin[mine], end[mine], engine)
        keep = (ub[1:] - ue[:-1]) >= host_gap_ns  # stretches that stay open
        parts_b.append(ub[np.concatenate([[True], keep])])
        parts_e.append(ue[np.concatenate([keep, [True]])])
    if not parts_b:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(parts_b) == 1:
        return parts_b[0], parts_e[0]
    return iv.union(np.concatenate(parts_b), np.concatenate(parts_e), engine)


@njit(cache=True)
def _launch_nb(begin, end, host_gap_ns):
    """``launching`` of one thread's ops sorted by begin, in one pass: the
    union of [begin, max(end, begin)) with stretches shorter than
    ``host_gap_ns`` joined (ok False, when an op begins before the one
    before it: the caller sorts)."""
    n = len(begin)
    ub = empty_i64(n)
    ue = empty_i64(n)
    k = 0
    b, top = begin[0], max(end[0], begin[0])
    for r in range(1, n):
        x = begin[r]
        if x < begin[r - 1]:
            return ub[:0], ue[:0], False
        e = max(end[r], x)
        if x > top and x - top >= host_gap_ns:
            ub[k], ue[k] = b, top
            k += 1
            b, top = x, e
        elif e > top:
            top = e
    ub[k], ue[k] = b, top
    return ub[:k + 1].copy(), ue[:k + 1].copy(), True


def fetch_spans(tl: Timeline) -> np.ndarray:
    """Which spans are DataLoader fetches (bool per span, read-only): DATA
    spans, and USER spans whose name contains ``FETCH_WORD``. The one
    statement of what a fetch is, for the data cause, the offenders of an
    input-bound verdict and the figure's span rows; remembered by the spans
    table, so each asks for free."""
    s = tl.spans

    def find(names: np.ndarray) -> np.ndarray:
        out = s.kind == SpanKind.DATA
        user = np.flatnonzero(s.kind == SpanKind.USER)
        if len(user):
            out[user[[FETCH_WORD in str(n) for n in tl.decode(names[user])]]] = True
        out.flags.writeable = False
        return out
    return s.remember("name", "DataLoader fetch", find)


def host_activity(tl: Timeline, slack_ns: int = SYNC_SLACK_NS, engine: str = "numba",
                  host_gap_ns: int = HOST_GAP_NS) -> HostActivity:
    """Data, sync and launching segments of a Timeline's host side (all
    threads); see the module doc."""
    s, y, o = tl.spans, tl.syncs, tl.ops
    data = fetch_spans(tl)
    sync_ops = (o.flags & OpFlag.SYNC) != 0
    span_sync = s.kind == SpanKind.SYNC
    d = iv.union(s.begin_ns[data], s.end_ns[data], engine)
    sy = iv.union(np.concatenate([y.host_begin_ns, s.begin_ns[span_sync],
                                  o.host_begin_ns[sync_ops]]),
                  np.concatenate([y.host_end_ns, s.end_ns[span_sync],
                                  o.host_end_ns[sync_ops]]), engine)
    cpu = host_compute(o.host_begin_ns, o.host_end_ns, o.device, o.flags, host_gap_ns,
                       engine)
    keep = ~cpu if cpu.any() else slice(None)  # mostly none: no copies
    la = launching(o.host_begin_ns[keep], o.host_end_ns[keep], o.thread[keep], host_gap_ns,
                   engine)
    chain = None  # one sync segment or none: each its own length
    if len(sy[0]) > 1:  # launch begins come sorted from one launching thread
        work = ((o.flags & OpFlag.LAUNCH) != 0) & ~sync_ops
        chain = sync_chains(*sy, sorted_copy(o.host_begin_ns[work], engine))
    return HostActivity(d, sy, subtract(sy, d), int(slack_ns), la,
                        subtract(subtract(la, d), sy), int(host_gap_ns), chain)


def host_compute(begin, end, device, flags, host_gap_ns: int = HOST_GAP_NS,
                 engine: str = "numba") -> np.ndarray:
    """Ops that were the host computing, not dispatching (bool per op):
    host-only ops (no device) that are neither views, syncs, collectives
    nor launches, last ``host_gap_ns`` or more, and have no launching op
    beginning inside them (a parent op around a launch, an annotation,
    stays dispatch). A CPU-tensor op of 200 µs or more is CPU work (a
    normalisation, a flip of a batch on the training thread), like an
    op-free stretch that long: counting it as launch overhead would send
    a loop that preprocesses on the host to CUDA graphs. Shorter ones stay
    with the dispatch around them, as short op-free stretches do."""
    begin, end = as_i64(begin), as_i64(end)
    device, flags = np.asarray(device), np.asarray(flags)  # their own dtypes: no copies
    out = np.zeros(len(begin), bool)
    busy = int(OpFlag.VIEW | OpFlag.SYNC | OpFlag.COLLECTIVE | OpFlag.LAUNCH)
    i = np.flatnonzero(end - begin >= host_gap_ns)  # few; the rest tested on them only
    i = i[(device[i] == NONE) & ((flags[i] & busy) == 0)]
    if len(i) == 0:  # the common case
        return out
    launch = int(OpFlag.LAUNCH)
    if len(i) <= 1024 and is_sorted(begin, engine):  # the ops inside each, by slices
        lo = np.searchsorted(begin, begin[i], side="left")
        hi = np.searchsorted(begin, end[i], side="left")
        inside = np.array([bool((flags[a:z] & launch).any()) for a, z in zip(lo, hi)])
    else:
        starts = sorted_copy(begin[(flags & launch) != 0], engine)
        inside = np.searchsorted(starts, end[i], side="left") > \
            np.searchsorted(starts, begin[i], side="left")
    out[i[~inside]] = True
    return out


def sync_chains(sb, se, launched) -> np.ndarray:
    """Per sync segment [sb, se) (sorted, disjoint): the time blocked in it
    and in the segments before it back to the last one after which the
    host launched work (``launched``: sorted launch-op begins). Two reads
    in a row (``pred.cpu()``, then ``y.cpu()``) delay the host by the first
    one's wait too: the second finds the queue already empty."""
    sb, se = np.asarray(sb, np.int64), np.asarray(se, np.int64)
    dur = se - sb
    if len(sb) < 2:
        return dur
    between = np.searchsorted(launched, sb[1:]) - np.searchsorted(launched, se[:-1])
    fresh = np.concatenate([[True], between > 0])  # a chain starts here
    total = np.cumsum(dur)
    first = np.flatnonzero(fresh)
    base = total[first] - dur[first]  # blocked time before each chain
    return total - base[np.cumsum(fresh) - 1]


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
    """(n, 6) int64 ns of each gap by ``Cause`` (see the module doc).

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
        k = np.maximum(j - 1, 0)
        near = (j > 0) & (g0 <= se[k] + act.slack_ns)
        # the host went on dispatching after the sync up to the next launch:
        # the refill of the queue the sync emptied, all the sync's. If it
        # left for op-free Python first, the sync (and any read just before
        # it) delayed that by as long as it blocked, and no more of the gap
        # is the sync's: the GPU would have idled the rest anyway
        lb, le = act.launch_only
        t = np.maximum(g0, se[k])
        c = iv.count_le(lb, t, engine) if len(lb) else np.zeros(len(g0), np.int64)
        inside = (c > 0) & (t < le[np.maximum(c - 1, 0)] if len(le) else False)
        run = np.where(inside, le[np.maximum(c - 1, 0)] if len(le) else t, t)
        budget = np.where((j > 0) & (run < launch),
                          np.maximum(g0 + act.chain()[k], run), I64_MAX)
    else:
        near = np.zeros(len(g0), bool)
        budget = np.full(len(g0), I64_MAX, np.int64)
    if after_sync is not None:
        near = near | np.asarray(after_sync, bool)
    if len(db):
        i = iv.count_le(db, g0, engine)
        in_data = (i > 0) & (g0 < de[np.maximum(i - 1, 0)])
        nxt = np.where(i < len(db), db[np.minimum(i, len(db) - 1)], I64_MAX)
    else:
        in_data = np.zeros(len(g0), bool)
        nxt = np.full(len(g0), I64_MAX, np.int64)
    cut = np.where(near & ~in_data, np.minimum(np.minimum(nxt, h), budget), g0)
    hb = np.minimum(qb, h)
    out[:, Cause.SYNC] = np.maximum(np.minimum(cut, hb) - qa, 0)
    ra = np.maximum(qa, cut)
    rb = np.maximum(hb, ra)
    data = iv.coverage(db, de, ra, rb, engine)
    sync = iv.coverage(*act.sync_only, ra, rb, engine)
    launch_t = launch
    launch = iv.coverage(*act.launch_only, ra, rb, engine)
    out[:, Cause.DATA] = data
    out[:, Cause.SYNC] += sync
    # [L, L + λ) is the launch's own latency: launching, whatever the thread
    # did after the op (only data and syncs keep their instants there)
    t = np.where(has_next, np.clip(launch_t, ra, rb), rb)
    tail = (rb - t) - iv.coverage(db, de, t, rb, engine) - \
        iv.coverage(*act.sync_only, t, rb, engine) - \
        iv.coverage(*act.launch_only, t, rb, engine)
    launch = launch + tail
    out[:, Cause.LAUNCH] = launch
    out[:, Cause.HOST] = rb - ra - data - sync - launch
    out[:, Cause.DEPENDENCY] = np.maximum(qb - np.maximum(qa, h), 0)
    out[unknown] = 0
    out[unknown, Cause.UNKNOWN] = (qb - qa)[unknown]
    return out
