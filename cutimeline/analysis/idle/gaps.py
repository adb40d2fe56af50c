"""Why the GPU was idle: the cause of every gap in a stream's (or device's) work.

A *gap* on a stream (or a device: the union of its streams) is a stretch
[g0, g1) with no work. The work that ends it was launched by the host at
L; λ is the stream's smallest observed launch latency (``begin − launch``
over its rows). The gap's *host part* is [g0, h): h = min(L + λ, g1) when
L > g0 (had the host launched at g0, the work would have started λ
later), h = g0 when L ≤ g0 (already queued), h = g1 for a tail gap.
Times are int ns on the host clock.

The rules, by precedence, each taking only time no rule above took
(``RULES`` in code; ``classify`` in NumPy, with the details;
``attribution.gap_amounts_nb`` in Numba):

==  ==============  ==========  ==============================================
 #  rule            cause       takes
==  ==============  ==========  ==============================================
 1  no launch time  unknown     the whole gap, if its work has no launch time
 2  queued          dependency  the gap outside its host part
 3  after a sync    sync        [g0, cut) of a gap beginning in or just after
                                a sync, not in a fetch
 4  in a fetch      data        instants in a DataLoader fetch
 5  blocked         sync        instants in a host-blocking op
 6  dispatching     launch      instants in ops that run the device program,
                                and short op-free stretches between them
 7  launch latency  launch      [L, L + λ), whatever the thread did after
 8  otherwise       host        the rest of the host part
==  ==============  ==========  ==============================================

Rules 4 to 8 split the host part instant by instant, so a gap spent
loading data and then launching counts both.

Why ``host_gap_ns`` (``activity.HOST_GAP_NS``, 200 µs) divides launch
from host: it sits above any framework glue between ops (~5–30 µs per
module call on current CPUs), so an op-free stretch that long is not the
cost of launching, and an imported trace whose host sat idle blames the
host.

Why rule 3: a sync drains the queue, so the host time right after it is
time the GPU would not have lost without it (dispatching then is the
refill). A gap that began before the sync does not qualify: the GPU was
idle before the host started to wait.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from ...numeric import intervals as iv
from ...numeric.engines import I64_MAX
from ...text import Word
from ...timeline.schema import NONE
from .activity import HostActivity

__all__ = ["Cause", "CauseName", "CAUSES", "Rule", "RULES", "classify"]


class Cause(enum.IntEnum):
    """Columns of the amounts ``classify`` returns, and ``gaps.cause``."""
    DATA = 0
    SYNC = 1
    LAUNCH = 2
    HOST = 3
    DEPENDENCY = 4
    UNKNOWN = 5


class CauseName(Word):
    """An idle cause's name, as every surface prints it (the step table's
    ``<name>_ns`` columns, ``Report.to_dict()``'s ``idle_ns`` keys, the
    CLI): the six gap causes of ``Cause``, in its order, then exposed
    communication (``communication.py``), which the verdicts rank beside
    them. A member equals, hashes and formats as its name."""
    DATA = "data"
    SYNC = "sync"
    LAUNCH = "launch"
    HOST = "host"
    DEPENDENCY = "dependency"
    UNKNOWN = "unknown"
    COMMUNICATION = "communication"


#: the gap causes' names (plain ``str``), indexed by ``Cause``
CAUSES = tuple(CauseName[c.name].value for c in Cause)


class Rule(NamedTuple):
    """A row of the module doc's table of gap-cause rules."""
    number: int  # its precedence: it takes only time that no lower number took
    name: str
    cause: Cause
    takes: str   # what it takes of a gap


#: the gap-cause rules in precedence order, as the module doc's table says
#: them; the comments "rule n" in ``classify`` and in the Numba kernels
#: (``attribution.py``, ``overlap.py``) mark where each is applied
RULES = (
    Rule(1, "no launch time", Cause.UNKNOWN,
         "the whole gap, when the work that ends it has no launch time"),
    Rule(2, "queued", Cause.DEPENDENCY,
         "the gap outside its host part: all of it when L ≤ g0, else [L + λ, g1)"),
    Rule(3, "after a sync", Cause.SYNC,
         "[g0, cut) of a gap that begins in or just after a sync, not in a fetch"),
    Rule(4, "in a fetch", Cause.DATA, "instants of the host part in a DataLoader fetch"),
    Rule(5, "blocked", Cause.SYNC, "instants of the host part in a host-blocking op"),
    Rule(6, "dispatching", Cause.LAUNCH,
         "instants inside ops, or in short op-free stretches between a thread's ops, "
         "that run the device program (not CPU-tensor work)"),
    Rule(7, "launch latency", Cause.LAUNCH, "[L, L + λ), the launch's own latency"),
    Rule(8, "otherwise", Cause.HOST, "the rest of the host part"),
)


def classify(g0, g1, launch, has_next, lam, act: HostActivity,
             qa=None, qb=None, engine: str = "numba", after_sync=None) -> np.ndarray:
    """(n, 6) int64 ns of each gap by ``Cause``, by ``RULES`` (the
    comments below say where each rule applies). L, λ, h: the module doc.

    Each rule takes only time no rule above it took (the module doc's
    table). Rule 1 is a trace that missed the launch call; rule 2's L ≤ g0
    is work that waited on another stream, an event or latency. Rule 3
    takes [g0, cut) of a gap that begins in a sync, within ``slack_ns`` of
    its end or right after the sync op's own gpu row, and not in a fetch;
    cut is the next fetch's begin, h, or the sync's budget. Rule 4 reads
    ``activity.fetch_spans``; rule 5 the syncs table, SYNC spans and ops
    flagged SYNC. Rule 6 takes instants inside an op on any thread, or in
    an op-free stretch shorter than ``host_gap_ns`` between two ops of
    one thread, but not in or beside a host-only op that launches nothing
    (``activity.host_compute``: CPU-tensor work). Rule 8 is the host busy
    elsewhere (user Python, logging, checkpointing) or idle.

    Data wins where a fetch contains a sync, and both win over launch.
    Rule 3: ``slack_ns`` (``activity.SYNC_SLACK_NS``) absorbs clock
    alignment error; a sync op's own gpu row counts because the recorder
    brackets a sync op with events too and its closing event runs when
    the host is back. The sync's *budget*: where the host left for
    op-free Python (``host_gap_ns`` or more) before launching the next
    work, the sync takes no more than the host spent blocked in it and in
    the syncs right before it with no launch between
    (``activity.sync_chains``); the GPU would have waited for the rest
    anyway (1 ms of Python after a 10 µs read is host-bound, not
    sync-bound).

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
    unknown = has_next & (launch == NONE)  # rule 1 (applied last: it overrides all)
    queued = has_next & ~unknown & (launch <= g0)
    # the host part [g0, h); rule 2 takes the rest of the gap
    h = np.where(has_next, np.minimum(launch + np.maximum(lam, 0), g1), g1)
    h = np.where(unknown | queued, g0, h)
    # rule 3: the gap began in (or just after) a sync, not in a fetch
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
    # rules 4 to 8 split the rest of the host part, [ra, rb), instant by
    # instant (``HostActivity``'s segments hold their precedence)
    ra = np.maximum(qa, cut)
    rb = np.maximum(hb, ra)
    data = iv.coverage(db, de, ra, rb, engine)  # rule 4
    sync = iv.coverage(*act.sync_only, ra, rb, engine)  # rule 5
    launch_t = launch
    launch = iv.coverage(*act.launch_only, ra, rb, engine)  # rule 6
    out[:, Cause.DATA] = data
    out[:, Cause.SYNC] += sync
    # rule 7: [L, L + λ) is the launch's own latency: launching, whatever
    # the thread did after the op (only data and syncs keep their instants)
    t = np.where(has_next, np.clip(launch_t, ra, rb), rb)
    tail = (rb - t) - iv.coverage(db, de, t, rb, engine) - \
        iv.coverage(*act.sync_only, t, rb, engine) - \
        iv.coverage(*act.launch_only, t, rb, engine)
    launch = launch + tail
    out[:, Cause.LAUNCH] = launch
    out[:, Cause.HOST] = rb - ra - data - sync - launch  # rule 8
    out[:, Cause.DEPENDENCY] = np.maximum(qb - np.maximum(qa, h), 0)  # rule 2
    out[unknown] = 0  # rule 1
    out[unknown, Cause.UNKNOWN] = (qb - qa)[unknown]
    return out
