"""What the host was doing, as the gap-cause rules (``gaps.py``) read it:
DataLoader fetches, host-blocking syncs and dispatching, each as sorted
disjoint segments of host time over all threads (``HostActivity``, made
by ``host_activity``).

* a fetch is a DATA span or a user span named like torch.profiler's
  fetches (``fetch_spans``: the one statement of it, which the offenders
  and the figures ask too);
* a sync is a syncs row, a SYNC span or an op flagged SYNC; reads one
  after another chain (``sync_chains``);
* dispatching is each thread's ops joined across op-free stretches
  shorter than ``HOST_GAP_NS`` (``launching``), less the host-only ops
  that compute rather than dispatch (``host_compute``).

The segments hold the rules' precedence: fetches before syncs before
dispatching (``sync_only``, ``launch_only``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...numeric import intervals as iv
from ...numeric.engines import as_i64, empty_i64
from ...numeric.ordering import sorted_copy
from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from ..thresholds import THRESHOLDS

__all__ = ["HOST_GAP_NS", "SYNC_SLACK_NS", "FETCH_WORD", "HostActivity", "fetch_spans",
           "host_activity", "launching", "host_compute", "sync_chains", "subtract"]

HOST_GAP_NS = THRESHOLDS.host_gap_ns  # why: analysis/thresholds.py
SYNC_SLACK_NS = THRESHOLDS.sync_slack_ns  # why: analysis/thresholds.py
#: names its fetches "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FETCH_WORD = "DataLoader"


@dataclass(frozen=True)
class HostActivity:
    """The host's activity as sorted disjoint segments (ns), the precedence
    of the rules (``gaps.py``) built in: data fetches (rule 4), syncs (all of them: rule 3
    asks whether a gap begins in one), syncs outside data fetches (rule 5),
    launching (ops on any thread and the short stretches between a
    thread's ops) and launching outside data fetches and syncs (rule 6)."""
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
              engine: str = "numba", breaks=None) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint segments where some thread was dispatching: each
    thread's ops joined across op-free stretches shorter than
    ``host_gap_ns``, then all threads' segments joined. ``breaks``:
    (begin, thread) of the host's own work between ops (``host_compute``'s
    ops): a stretch that holds one is not joined, whatever its length,
    since the glue around host work is host time too. One thread's ops in
    time order (a recording's) without breaks take one pass of
    ``_launch_nb``."""
    begin, end = np.asarray(begin, np.int64), np.asarray(end, np.int64)
    thread = np.asarray(thread)
    has_breaks = breaks is not None and len(breaks[0]) > 0
    one = len(thread) == 0 or thread.min() == thread.max()  # np.unique sorts all
    if one and not has_breaks and engine == "numba" and len(begin):
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
        if has_breaks and len(ub) > 1:
            bb = np.sort(np.asarray(breaks[0], np.int64)[np.asarray(breaks[1]) == t])
            held = np.searchsorted(bb, ub[1:], side="left") > \
                np.searchsorted(bb, ue[:-1], side="left")
            keep |= held  # host work inside: the stretch is the host's
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
    threads); see the module doc. ``slack_ns`` and ``host_gap_ns``: the
    rules' thresholds (``SYNC_SLACK_NS``, ``HOST_GAP_NS``), kept with the
    segments."""
    s, y, o = tl.spans, tl.syncs, tl.ops
    data = fetch_spans(tl)
    sync_ops = (o.flags & OpFlag.SYNC) != 0  # rule 5's host-blocking ops
    span_sync = s.kind == SpanKind.SYNC
    d = iv.union(s.begin_ns[data], s.end_ns[data], engine)
    sy = iv.union(np.concatenate([y.host_begin_ns, s.begin_ns[span_sync],
                                  o.host_begin_ns[sync_ops]]),
                  np.concatenate([y.host_end_ns, s.end_ns[span_sync],
                                  o.host_end_ns[sync_ops]]), engine)
    cpu = host_compute(o.host_begin_ns, o.host_end_ns, o.device, o.flags, engine)
    keep = ~cpu if cpu.any() else slice(None)  # mostly none: no copies
    la = launching(o.host_begin_ns[keep], o.host_end_ns[keep], o.thread[keep], host_gap_ns,
                   engine, (o.host_begin_ns[cpu], o.thread[cpu]) if cpu.any() else None)
    chain = None  # one sync segment or none: each its own length
    if len(sy[0]) > 1:  # launch begins come sorted from one launching thread
        work = ((o.flags & OpFlag.LAUNCH) != 0) & ~sync_ops
        chain = sync_chains(*sy, sorted_copy(o.host_begin_ns[work], engine))
    # precedence: a fetch's instants are data (rule 4) before they are a
    # sync's (5), both before they are launching (6)
    return HostActivity(d, sy, subtract(sy, d), int(slack_ns), la,
                        subtract(subtract(la, d), sy), int(host_gap_ns), chain)


def host_compute(begin, end, device, flags, engine: str = "numba") -> np.ndarray:
    """Ops that were the host computing, not dispatching (bool per op):
    host-only ops (no device) that are neither views, syncs, collectives
    nor launches, and have no launching op beginning inside them (a parent
    op around a launch, an annotation, stays dispatch). A CPU-tensor op is
    the host's own work at any length (a normalisation of a batch on the
    training thread, the optimizer's CPU step counter): fewer or larger
    kernels would not make it faster, so counting it as launch overhead
    would send a loop that preprocesses on the host to CUDA graphs. Views
    of device tensors stay with the dispatch around them: they are part of
    running the device program, and a captured graph drops them too."""
    begin, end = as_i64(begin), as_i64(end)
    device, flags = np.asarray(device), np.asarray(flags)  # their own dtypes: no copies
    out = np.zeros(len(begin), bool)
    busy = int(OpFlag.VIEW | OpFlag.SYNC | OpFlag.COLLECTIVE | OpFlag.LAUNCH)
    i = np.flatnonzero((device == NONE) & ((flags & busy) == 0))
    if len(i) == 0:  # the common case: every op touches a device tensor
        return out
    launch = int(OpFlag.LAUNCH)
    starts = sorted_copy(begin[(flags & launch) != 0], engine)
    # a launching op begins inside [begin, end): the op is a parent of dispatch
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
