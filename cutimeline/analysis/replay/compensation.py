"""Overhead compensation: the timeline replayed without the recorder's cost.

The recorder measures at start what it costs the host (``selfcost.py``);
``costs.py`` prices each op and module call by it. The replay's model
(its engine, on arrays only, is ``replaying.py``; what it reads of a
Timeline, ``engine_inputs``):

* host time t maps to t + Δ(t), Δ the recorder's cost spent so far, all
  threads in time order (``hostmap.py``);
* each gpu row, in launch order, starts at max(its stream's replayed free
  time, replayed launch + λ), λ the stream's smallest observed launch
  latency, and keeps its duration. A row that waited on something else
  as recorded also starts no earlier than its recorded begin moved as the
  row it waited for was (``waited_on``: the last to end before it on
  another stream of its device, within ``replaying.WAIT_LATENCY_NS``),
  else as its own launch: moved by its own launch alone, it could begin
  before that work ended;
* a host-blocking sync returns at max(replayed begin, replayed completion
  of the work it covers) plus its recorded wake-up latency, and Δ jumps;
* a DataLoader fetch that waited for a worker is a sync on the workers
  (``fetch_waits``);
* a launch into a full launch queue returns when the oldest row ends
  (``launch_queue``);
* a row may wait for another stream's row (``after``: what-if's copies
  on a side stream).

Not modelled: a wait on something the Timeline does not show (an event
recorded late, another rank) beyond the row's recorded begin moved as its
own launch, and a queue filled by commands that are not gpu rows (event
records, memsets the Timeline lacks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...numeric.columns import column_facts, facts_of
from ...numeric.engines import as_i64
from ...timeline.gpus import LAUNCH_QUEUE  # CUDA's, named here as before
from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from .costs import costs, merge2_nb, mix_scale
from .hostmap import HostShift, shifted
from .replaying import FAR_PAST, held, replay_args, replay_breaks, replay_nb, waited_on

__all__ = ["compensate", "Compensation", "engine_inputs", "launch_queue", "LAUNCH_QUEUE",
           "fetch_waits", "with_fetches",
           "kept_waits"]


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
    # the recorded column's facts are remembered (``numeric.columns``): no pass
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


def fetch_waits(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The DataLoader fetches that waited for a worker's batch, on the
    thread that launches the device work: (begin, end, when the batch was
    ready: begin + the wait its span's ``number`` holds, at most its
    end), sorted by begin. A fetch of the loop's own thread (no workers)
    and one whose wait the recording did not measure (an imported trace)
    hold ``NONE`` and are not among them: their time is the host's own.

    The replay makes each a sync on the workers, which run as they did:
    it returns no earlier than the batch was ready as recorded, plus the
    host's own time in it after that, so a faster host finds the batch
    no sooner and waits longer (exact while the workers are busy
    throughout, as they are when the host waits for them; a fetch that
    did not wait moves with its host)."""
    s = tl.spans
    m = (s.kind == SpanKind.DATA) & (s.number > 0)
    if m.any():
        th = _launching_thread(tl.ops)
        if th is not None:  # a fetch on another thread holds back no launch
            m &= s.thread == th
    b = np.asarray(s.begin_ns[m], np.int64)
    e = np.asarray(s.end_ns[m], np.int64)
    r = b + np.minimum(np.asarray(s.number[m], np.int64), e - b)  # no overflow
    order = np.argsort(b, kind="stable")
    return b[order], e[order], r[order]


def _launching_thread(o) -> int | None:
    """The thread that launched most device work (None: none did),
    remembered by the ops table: every replay of a report asks."""
    def find(thread: np.ndarray) -> int | None:
        launched = (o.flags & OpFlag.LAUNCH) != 0
        if not launched.any():
            return None
        th, n = np.unique(thread[launched], return_counts=True)
        return int(th[np.argmax(n)])
    return o.remember("thread", "the launching thread", find)


def with_fetches(sb, se, s_grp, covers, waits):
    """The replay's syncs (begin-sorted ``sb``, ``se``, ``s_grp`` rows of
    ``covers``) with the fetch ``waits`` (``fetch_waits``: begin, end,
    ready) merged in as syncs that cover no stream and return no earlier
    than their batch was ready: (sb, se, s_grp, covers, ready), ``ready``
    None when there are none (a sync before a fetch at its time)."""
    fb, fe, fr = waits
    if not len(fb):
        return sb, se, s_grp, covers, None
    n_s = covers.shape[1]
    covers = np.concatenate([covers, np.zeros((1, n_s), bool)])
    sb = np.concatenate([np.asarray(sb, np.int64), fb])
    se = np.concatenate([np.asarray(se, np.int64), fe])
    s_grp = np.concatenate([np.asarray(s_grp, np.int64),
                            np.full(len(fb), len(covers) - 1, np.int64)])
    ready = np.concatenate([np.full(len(sb) - len(fb), FAR_PAST, np.int64), fr])
    order = np.argsort(sb, kind="stable")
    return sb[order], se[order], s_grp[order], covers, ready[order]


def launch_queue(tl: Timeline) -> int:
    """The launch queue depth the replay gives each stream of ``tl``: what
    its device recorded in ``meta["launch_queue"]`` (a SimGPU its own, 0
    when unbounded), else CUDA's ``LAUNCH_QUEUE`` (1024: CUDA blocks the
    host at about 1,024 pending launches). A launch into a stream holding
    that many unfinished replayed rows returns when the oldest ends, and
    Δ jumps: a host the replay lets run ahead stops where CUDA would stop
    it."""
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


@dataclass(frozen=True)
class Compensation:
    """What ``compensate`` found: the recorder's cost it removed
    (``overhead_ns_per_op``: the mean per op; ``overhead_ns_per_launch``;
    ``mix_scale``, ``costs.mix_scale``; ``removed_ns``: the total), the gpu
    rows' replayed ``begin_ns`` and ``end_ns`` (None without gpu rows), the
    times ``compensate`` was asked to map, mapped (``at``, None when none
    were), and ``shift``, the map of any host time into the replay (made
    on first use). ``comp["removed_ns"]`` reads it as the dict it was."""
    overhead_ns_per_op: int
    overhead_ns_per_launch: int
    mix_scale: float
    removed_ns: int
    at: np.ndarray | None
    begin_ns: np.ndarray | None
    end_ns: np.ndarray | None
    _shift: Callable[[], HostShift] = field(repr=False, compare=False)

    @property
    def shift(self) -> HostShift:
        """The map of host times into the replay (``hostmap.shifted``)."""
        return self._shift()

    def __getitem__(self, key: str):
        """The fields and the shift's tables by name, as the dict
        ``Report.compensation`` was: ``rep.compensation["removed_ns"]``."""
        if key in _SHIFT_KEYS:
            return getattr(self.shift, key)
        if key.startswith("_") or key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)


_SHIFT_KEYS = ("cost_t", "cost_cum", "sync_t", "jumps")


class _LazyShift:
    """``Compensation.shift``, made on first use and its inputs then let go.
    With Numba ``compensate``'s fused replay maps the times it is asked
    for on its way, and the table of breaks (a sorted break per launch
    under a full queue) waits until someone maps another time; the NumPy
    twin makes it at once (``make``) and takes the replayed begins from it."""

    def __init__(self, replay_in: tuple, depth: int, engine: str, more: tuple,
                 waits: tuple = (None, None), ready: np.ndarray | None = None):
        self._in, self._depth, self._engine, self._more = replay_in, depth, engine, more
        self._hold, self._dep = waits
        self._ready = ready
        self._shift: HostShift | None = None

    def __call__(self) -> HostShift:
        if self._shift is None:
            self.make()
        return self._shift

    def make(self) -> np.ndarray:
        """Make the map (once); returns the replayed begins of the gpu rows."""
        cost_t, cost = self._in[:2]
        xt, xc = self._more
        if xt is not None and len(xt):  # the costs priced apart, merged in
            cost_t, cost = merge2_nb(as_i64(cost_t), as_i64(cost), xt, xc)
            self._in = (cost_t, cost) + self._in[2:]
        b_r, sync_t, jumps = replay_breaks(*self._in, self._engine, depth=self._depth,
                                           hold=self._hold, dep=self._dep, ready=self._ready)
        cum = np.zeros(len(cost) + 1, np.int64)  # one pass, no concatenated copy
        np.cumsum(cost, out=cum[1:])
        self._shift = HostShift(cost_t, cum, sync_t, jumps)
        self._in = None
        return b_r


def kept_waits(ln, g: dict, engine: str = "numba"):
    """(hold, dep) of the replay's gpu rows ``g`` (``engine_inputs``'):
    the recorded waits between streams it keeps (``replaying.held``) and
    the row each was for (``replaying.waited_on``); (None, None) on one
    stream, where no row waits on another (the kernel finds the waits
    itself then)."""
    if ln is None or len(g["lam"]) < 2:
        return None, None
    hold = held(g["g_launch"], g["g_grp"], g["g_begin"], g["g_end"], g["lam"], engine)
    dep = waited_on(hold, g["g_launch"], g["g_grp"], g["g_begin"], g["g_end"],
                    ln.stream_device)
    return hold, dep


def compensate(tl: Timeline, ln=None, engine: str = "numba",
               at=None) -> Compensation | None:
    """Replay ``tl`` without the recorder's overhead (see the module doc).

    ``ln``: the Timeline's ``lanes.Lanes`` (None when it has no gpu rows).
    ``at``: host times to map into the replay (``Compensation.at``).
    Returns None when meta holds no measured overhead. With Numba the
    replay maps ``at`` on its way and makes the map of other times on
    first use (``Compensation.shift``)."""
    spent = costs(tl, engine, apart=engine == "numba")
    if spent is None:
        return None
    cost_t, cost, xt, xc = spent if engine == "numba" else spent + (None, None)
    per_launch = tl.meta.get("overhead_ns_per_launch") or 0
    y = tl.syncs
    sy = np.argsort(y.host_begin_ns, kind="stable")
    rows, g, s_grp, covers = engine_inputs(tl, ln, sy, engine=engine)
    sb, se, s_grp, covers, ready = with_fetches(
        np.asarray(y.host_begin_ns[sy], np.int64), y.host_end_ns[sy], s_grp, covers,
        fetch_waits(tl))
    replay_in = (cost_t, cost, sb, se, s_grp, g["g_launch"], g["g_grp"],
                 g["g_begin"], g["g_end"], g["lam"], covers)
    depth = launch_queue(tl)
    hold, dep = kept_waits(ln, g, engine)
    lazy = _LazyShift(replay_in, depth, engine, (xt, xc), (hold, dep), ready)
    q = None if at is None else np.atleast_1d(np.asarray(at, np.int64))
    mapped = e_r = begin = end = None
    if engine == "numba":
        none = np.zeros(0, np.int64)
        qo = None if q is None else np.argsort(q, kind="stable")
        qt = none if q is None else q[qo]
        b_r, _, _, e_r, q_jump, q_cost, total = replay_nb(
            *replay_args(*replay_in, depth), none if hold is None else hold, none, depth, 1,
            qt, xt, xc, none if dep is None else dep, none if ready is None else ready)
        removed = int(total)
        if q is not None:
            mapped = np.empty(len(q), np.int64)
            mapped[qo] = qt + q_jump - q_cost
    else:
        b_r = lazy.make()
        removed = int(lazy().cost_cum[-1])
        if q is not None:
            mapped = shifted(q, lazy(), engine)
    if ln is not None:
        if rows is None:
            begin = b_r
        else:
            begin = np.empty(len(rows), np.int64)
            begin[rows] = b_r
        if rows is None and e_r is not None and g["g_end"] is ln.end:
            end = e_r  # the kernel's: begin + (end − begin), the same rows
        else:
            end = ln.end - ln.begin  # in place: one fresh array, not two
            end += begin
    return Compensation(int(tl.meta["overhead_ns_per_op"]), int(per_launch),
                        mix_scale(tl.meta), removed, mapped, begin, end, lazy)
