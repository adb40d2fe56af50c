"""Overhead compensation: the timeline replayed without the recorder's cost.

The recorder measures at start what it costs the host (``selfcost.py``);
``costs.py`` prices each op and module call by it. The replay removes that
cost from the host side and lets the GPU work follow:

* host time shrinks by the recorder's cost spent so far (all threads, in
  time order): a host time t maps to t + Δ(t);
* each gpu row, in launch order, starts at max(its stream's replayed free
  time, replayed launch + λ) with λ the stream's smallest observed launch
  latency, and keeps its duration; a row that waited on something else
  as recorded (it began after both its stream's previous work and its
  launch + λ: another stream's work, an event) also starts no earlier
  than its recorded begin shifted as its launch was, so the wait between
  streams is kept (what it waited for was launched before it, and moved
  at least as far);
* a host-blocking sync waits for the replayed work it covers (its stream,
  or every stream of its device when device-wide): it returns at
  max(replayed begin, replayed completion) plus the wake-up latency it had
  (end − max(begin, completion) as recorded), and Δ jumps to match;
* a launch into a stream that already holds ``depth`` replayed rows not
  yet finished (``launch_queue``: the Timeline's ``meta["launch_queue"]``,
  1024 by default, as CUDA blocks the host at about 1,024 pending
  launches; 0 unbounded) returns when the oldest of them ends, and Δ
  jumps to match: a host that the replay lets run ahead stops where CUDA
  would stop it;
* a row may also wait for the replayed end of an earlier row on another
  stream (``after``: what-if's copies moved to a side stream, whose
  consumer waits for them).

What the replay reads of a Timeline's device side (``engine_inputs``): its
gpu rows in launch order with their streams, recorded times and launch
latencies, which streams each sync waits for, and the launch queue depth
(``launch_queue``); the engine itself (``replaying.py``) knows arrays only.

Not modelled: a wait that the replay would shorten further (its source
moved more than the waiting row's launch did), and a queue that fills with
other commands than gpu rows (event records, memsets the Timeline lacks).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric.engines import as_i64, readonly
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline
from ..facts import column_facts, facts_of
from .costs import costs, merge2_nb, mix_scale
from .replaying import replay_args, replay_breaks, replay_nb

__all__ = ["compensate", "shifted", "snapped", "moved", "moved_range", "engine_inputs",
           "launch_queue", "LAUNCH_QUEUE"]

LAUNCH_QUEUE = 1024  # pending launches per stream at which CUDA blocks the host


def shifted(t, comp: dict, engine: str = "numba") -> np.ndarray:
    """Host times t mapped into the replay: t + Δ just before t, where
    Δ = J_k − (the recorder's cost spent before t) with k the breaks
    (``breaks``: syncs begun, full-queue launches made) before t (an op that begins at t has not yet cost anything at t).
    ``engine`` is accepted for symmetry: this is two binary searches."""
    t = np.atleast_1d(np.asarray(t, np.int64))
    i = np.searchsorted(comp["cost_t"], t, side="left")
    k = np.searchsorted(comp["sync_t"], t, side="left")
    return t + comp["jumps"][k] - comp["cost_cum"][i]


def snapped(t, cut_b: np.ndarray, cut_e: np.ndarray) -> np.ndarray:
    """Host times inside a removed interval [b, e) (sorted, disjoint)
    moved to its e: what-if's cuts, all of whose time lands on b."""
    t = np.asarray(t, np.int64)
    if not len(cut_b):
        return t
    i = np.searchsorted(cut_b, t, side="right") - 1
    inside = (i >= 0) & (t < cut_e[np.maximum(i, 0)])
    return np.where(inside, cut_e[np.maximum(i, 0)], t)


def moved(t, cut_b, cut_e, comp: dict, engine: str = "numba",
          keep_none: bool = False) -> np.ndarray:
    """``shifted(snapped(t, cut_b, cut_e), comp)``: a what-if replay's map
    of a host column, NONE kept as NONE with ``keep_none``. The NumPy twin
    makes six passes and three binary searches of each time; the kernel
    one pass, each search starting where the last one ended (galloping: a
    column in time order, as a recording's mostly is, walks the tables
    once), from the front again where the column steps back."""
    t = np.asarray(t, np.int64)
    if not len(t):
        return t
    if engine == "numba":
        return _moved_nb(readonly(t), readonly(np.zeros(0, bool), bool), *_tables(cut_b, cut_e, comp),
                         keep_none, False)[0]
    out = shifted(snapped(t, cut_b, cut_e), comp)
    return np.where(t != NONE, out, NONE) if keep_none else out


def moved_range(t, keep, cut_b, cut_e, comp: dict,
                engine: str = "numba") -> tuple[int, int] | None:
    """The least and greatest of ``moved(t, ...)[keep]`` (None when
    ``keep`` keeps nothing), the kernel's without the moved column: a
    replay measured for its steps needs its ops' host times only for the
    Timeline's extent."""
    t, keep = np.asarray(t, np.int64), np.asarray(keep, bool)
    if not keep.any():
        return None
    if engine == "numba":
        _, lo, hi = _moved_nb(readonly(t), readonly(keep, bool), *_tables(cut_b, cut_e, comp),
                              False, True)
        return int(lo), int(hi)
    m = moved(t, cut_b, cut_e, comp, engine)[keep]
    return int(m.min()), int(m.max())


def _tables(cut_b, cut_e, comp):
    return (readonly(cut_b), readonly(cut_e), readonly(comp["cost_t"]), readonly(comp["cost_cum"]),
            readonly(comp["sync_t"]), readonly(comp["jumps"]))


@njit(cache=True)
def _first_at(a, x, lo, right):
    """The first i ≥ lo with a[i] ≥ x (a[i] > x with ``right``), where all
    of a[:lo] are below: np.searchsorted's answer, found by galloping."""
    n, step, hi = len(a), 1, lo
    while hi < n and (a[hi] <= x if right else a[hi] < x):
        lo = hi + 1
        hi += step
        step *= 2
    hi = min(hi, n)
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x if right else a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _moved_nb(t, keep, cut_b, cut_e, cost_t, cost_cum, sync_t, jumps, keep_none, extent):
    """(the moved column, least, greatest); with ``extent`` only the rows
    ``keep`` selects (all when it is empty) count, and no column is made."""
    out = np.empty(0 if extent else len(t), np.int64)
    lo, hi = np.int64(2 ** 62), np.int64(-(2 ** 62))
    pb = pc = pk = 0
    prev = t[0]
    for j in range(len(t)):
        x = t[j]
        if len(keep) and not keep[j]:
            continue
        if keep_none and x == NONE:
            out[j] = NONE
            continue
        if x < prev:  # stepped back: search from the front
            pb = pc = pk = 0
        prev = x
        pb = _first_at(cut_b, x, pb, True)
        if pb > 0 and x < cut_e[pb - 1]:
            x = cut_e[pb - 1]
        # x only grows with t (the snap is monotone), and when t steps back
        # the pointers restart; the snapped x may pass t's own pointers only
        # forwards, so both searches may start where they were
        pc = _first_at(cost_t, x, pc, False)
        pk = _first_at(sync_t, x, pk, False)
        y = x + jumps[pk] - cost_cum[pc]
        if extent:
            lo, hi = min(lo, y), max(hi, y)
        else:
            out[j] = y
    return out, lo, hi


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


def compensate(tl: Timeline, ln=None, engine: str = "numba", at=None) -> dict | None:
    """Replay ``tl`` without the recorder's overhead (see the module doc).

    ``ln``: the Timeline's ``lanes.Lanes`` (None when it has no gpu rows).
    Returns None when meta holds no measured overhead; else a dict with the
    costs used (``overhead_ns_per_op``: the mean per op, ``removed_ns``:
    the total), what ``shifted`` needs to map host times (``cost_t``,
    ``cost_cum``, ``sync_t``, ``jumps``), with gpu rows their replayed
    ``begin_ns``/``end_ns``, and ``shifted(at)`` as ``"at"``. With Numba
    the replay takes ``shifted``'s terms for ``at`` on its way, and makes
    its tables on first use: a full launch queue breaks at each launch,
    sorted in 12 ms a 10^6 rows, for the few times an analysis maps."""
    spent = costs(tl, engine, apart=engine == "numba")
    if spent is None:
        return None
    cost_t, cost, xt, xc = spent if engine == "numba" else spent + (None, None)
    per_launch = tl.meta.get("overhead_ns_per_launch") or 0
    y = tl.syncs
    sy = np.argsort(y.host_begin_ns, kind="stable")
    rows, g, s_grp, covers = engine_inputs(tl, ln, sy, engine=engine)
    sb = np.asarray(y.host_begin_ns[sy], np.int64)
    replay_in = (cost_t, cost, sb, y.host_end_ns[sy], s_grp, g["g_launch"], g["g_grp"],
                 g["g_begin"], g["g_end"], g["lam"], covers)
    depth = launch_queue(tl)
    out = _Replayed(replay_in, depth, engine, (xt, xc))
    out.update({"overhead_ns_per_op": int(tl.meta["overhead_ns_per_op"]),
                "overhead_ns_per_launch": int(per_launch), "mix_scale": mix_scale(tl.meta)})
    q = None if at is None else np.atleast_1d(np.asarray(at, np.int64))
    e_r = None
    if engine == "numba":
        none = np.zeros(0, np.int64)
        qo = None if q is None else np.argsort(q, kind="stable")
        qt = none if q is None else q[qo]
        b_r, _, _, e_r, q_jump, q_cost, total = replay_nb(
            *replay_args(*replay_in, depth), none, none, depth, 1, qt, xt, xc)
        out["removed_ns"] = int(total)
        if q is not None:
            out["at"] = np.empty(len(q), np.int64)
            out["at"][qo] = qt + q_jump - q_cost
    else:
        b_r = out.tables(need_begin=True)
        out["removed_ns"] = int(out["cost_cum"][-1])
        if q is not None:
            out["at"] = shifted(q, out, engine)
    if ln is not None:
        if rows is None:
            begin = b_r
        else:
            begin = np.empty(len(rows), np.int64)
            begin[rows] = b_r
        out["begin_ns"] = begin
        if rows is None and e_r is not None and g["g_end"] is ln.end:
            out["end_ns"] = e_r  # the kernel's: begin + (end − begin), the same rows
        else:
            out["end_ns"] = end = ln.end - ln.begin  # in place: one fresh array, not two
            end += begin
    return out


class _Replayed(dict):
    """``compensate``'s dict; ``shifted``'s tables made on first read."""

    _LAZY = ("cost_t", "cost_cum", "sync_t", "jumps")

    def __init__(self, replay_in: tuple, depth: int, engine: str, more: tuple):
        super().__init__()
        self._in, self._depth, self._engine, self._more = replay_in, depth, engine, more
        if more[0] is None or not len(more[0]):  # no entries apart: the series is whole
            self["cost_t"] = replay_in[0]

    def __missing__(self, key):
        if key not in self._LAZY or self._in is None:
            raise KeyError(key)
        self.tables()
        return self[key]

    def tables(self, need_begin: bool = False):
        """Make the lazy tables (once); the replayed begins when asked."""
        cost_t, cost, sb = self._in[:3]
        if self._more[0] is not None and len(self._more[0]):  # the entries apart, put in
            cost_t, cost = merge2_nb(as_i64(cost_t), as_i64(cost), *self._more)
            self._in = (cost_t, cost) + self._in[2:]
        self["cost_t"] = cost_t
        b_r, self["sync_t"], self["jumps"] = replay_breaks(*self._in, self._engine,
                                                           depth=self._depth)
        cum = np.zeros(len(cost) + 1, np.int64)  # one pass, no concatenated copy
        np.cumsum(cost, out=cum[1:])
        self["cost_cum"] = cum
        self._in = None
        return b_r if need_begin else None
