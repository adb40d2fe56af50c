"""Across ranks: who waited for whom, as the collectives table, the
stragglers per step and each rank's activity.

    tl = ctl.merge("runs/")
    from cutimeline.dist.straggler import collectives, stragglers, rank_activity
    stragglers(tl)[:3]          # step NONE (the whole run) first, worst rank first

A collective's *arrival* on a rank is the host begin of its op there
(when the rank called it), its *completion* the ``done_ns`` the recorder
measured. Rows are matched into instances across ranks by ``matching``;
the ranks' clocks are fitted by ``rankclock`` when they are merged.

Tables are numpy structured arrays; times are ns on the merged clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CutimelineError
from ..text import fmt_ns, fmt_runs
from ..timeline.collectives import KINDS
from ..timeline.metakeys import STRAGGLER_COLUMNS
from ..timeline.ranks import rank_of_device, rank_of_thread
from ..timeline.schema import NONE, SpanKind
from ..timeline.timeline import Timeline
from .matching import collective_rows, roles

__all__ = ["collectives", "stragglers", "slowest", "rank_activity", "describe",
           "COLLECTIVE_DTYPE", "STRAGGLER_DTYPE", "ACTIVITY_DTYPE"]

COLLECTIVE_DTYPE = [
    ("instance", np.int64), ("group", object), ("number", np.int64), ("name", object),
    ("kind", object), ("rank", np.int64), ("step", np.int64), ("arrival_ns", np.int64),
    ("done_ns", np.int64), ("wait_ns", np.int64), ("late_ns", np.float64),
    ("held_ns", np.int64), ("last", bool), ("n_ranks", np.int64), ("group_size", np.int64)]
STRAGGLER_DTYPE = [
    ("step", np.int64), ("rank", np.int64), ("order", np.int64), ("collectives", np.int64),
    ("last", np.int64), ("held_ns", np.int64), ("late_mean_ns", np.float64),
    ("wait_ns", np.int64)]
ACTIVITY_DTYPE = [
    ("rank", np.int64), ("begin_ns", np.int64), ("end_ns", np.int64), ("ops", np.int64),
    ("busy_ns", np.int64), ("collective_ns", np.int64), ("wait_ns", np.int64),
    ("idle_ns", np.int64), ("busy_frac", np.float64), ("gpu_busy_ns", np.int64)]


def collectives(tl: Timeline) -> np.ndarray:
    """One row per (collective instance, rank), sorted by instance then
    rank (``COLLECTIVE_DTYPE``): ``arrival_ns`` (the op's host begin),
    ``done_ns`` (NONE unknown), ``wait_ns`` (the instance's last arrival −
    this arrival: how long this rank waited for the others), ``last`` (this
    rank arrived last), ``held_ns`` (for the last: its arrival − the
    second-last one, how long it alone held the others up; else 0),
    ``late_ns`` (arrival − the median arrival of the other ranks; NaN
    alone), ``step`` (the rank's step around its arrival), ``n_ranks`` (ranks
    that recorded it) of ``group_size``. Unmatched rows are left out."""
    _check(tl)
    groups: dict[tuple, int] = {}
    r = collective_rows([(int(tl.meta.get("rank", 0)), tl)], groups)
    inst, _, _ = roles(r)
    keep = inst != NONE
    r = {k: v[keep] for k, v in r.items()}
    inst = inst[keep]
    order = np.lexsort((r["rank"], inst))
    r = {k: v[order] for k, v in r.items()}
    inst = inst[order]
    out = np.zeros(len(inst), COLLECTIVE_DTYPE)
    if not len(inst):
        return out
    _, first, count = np.unique(inst, return_index=True, return_counts=True)
    out["instance"] = np.repeat(np.arange(len(first)), count)
    a = r["arrival"]
    by = np.lexsort((a, out["instance"]))        # arrivals sorted within instances
    pos = np.empty(len(a), np.int64)
    pos[by] = np.arange(len(a)) - np.repeat(first, count)
    n = np.repeat(count, count)
    sa = a[by]
    last_at = first + count - 1
    last = np.repeat(sa[last_at], count)
    second = np.repeat(np.where(count > 1, sa[np.maximum(last_at - 1, first)], sa[last_at]), count)
    out["wait_ns"] = last - a
    out["last"] = pos == n - 1
    out["held_ns"] = np.where(out["last"], a - second, 0)
    out["late_ns"] = a - _median_of_others(sa, first, count, pos, n)
    names = {v: k for k, v in groups.items()}
    out["group"] = [names[g][0] for g in r["group"]]
    out["group_size"] = [len(names[g][1]) for g in r["group"]]
    out["number"], out["rank"], out["arrival_ns"] = r["number"], r["rank"], a
    out["done_ns"], out["n_ranks"] = r["done"], n
    out["kind"] = np.array(KINDS, object)[r["kind"]]
    out["name"] = tl.decode(tl.ops["name"][r["op"]])
    out["step"] = _steps_at(tl, r["rank"], a)
    return out


def _median_of_others(sa: np.ndarray, first: np.ndarray, count: np.ndarray,
                      pos: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows' arrivals in its instance
    (``sa`` sorted within instances; ``pos`` a row's place there)."""
    m = n - 1
    start = np.repeat(first, count)

    def other(k):  # the k-th smallest of the others: skip the row itself
        k = np.clip(k, 0, np.maximum(m - 1, 0))
        return sa[np.minimum(start + k + (k >= pos), start + n - 1)].astype(np.float64)

    med = (other((m - 1) // 2) + other(m // 2)) / 2
    return np.where(m > 0, med, np.nan)


def _steps_at(tl: Timeline, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    s = tl.spans
    is_step = s.kind == SpanKind.STEP
    owner = rank_of_thread(tl)
    srank = owner[s.thread[is_step]] if len(owner) else np.zeros(0, np.int64)
    out = np.full(len(t), NONE, np.int64)
    b, e, num = s.begin_ns[is_step], s.end_ns[is_step], s.number[is_step]
    for rk in np.unique(rank):
        mine, rows = srank == rk, np.flatnonzero(rank == rk)
        o = np.argsort(b[mine], kind="stable")
        bb, ee, nn = b[mine][o], e[mine][o], num[mine][o]
        i = np.searchsorted(bb, t[rows], "right") - 1
        if not len(bb):
            continue
        inside = (i >= 0) & (t[rows] < ee[np.maximum(i, 0)])
        out[rows[inside]] = nn[i[inside]]
    return out


def stragglers(tl: Timeline) -> np.ndarray:
    """Who held the others up (``STRAGGLER_DTYPE``): per step, and for the
    whole Timeline (step NONE, first), one row per rank, ``order`` 1 for
    the worst: ``last`` (collectives it arrived at last), ``held_ns``
    (their summed ``held_ns``), ``late_mean_ns`` (its mean ``late_ns``: how
    much later than the median of the others it arrives), ``wait_ns`` (its
    summed waits), ranked by held_ns, then late_mean_ns."""
    c = collectives(tl)
    rows = []
    for step in [NONE] + sorted(set(c["step"][c["step"] != NONE].tolist())):
        sel = c if step == NONE else c[c["step"] == step]
        ranks = np.unique(sel["rank"])
        block = np.zeros(len(ranks), STRAGGLER_DTYPE)
        for i, rk in enumerate(ranks):
            m = sel[sel["rank"] == rk]
            late = m["late_ns"][~np.isnan(m["late_ns"])]
            block[i] = (step, rk, 0, len(m), int(m["last"].sum()), int(m["held_ns"].sum()),
                        float(late.mean()) if len(late) else np.nan, int(m["wait_ns"].sum()))
        o = np.lexsort((-np.nan_to_num(block["late_mean_ns"], nan=-np.inf), -block["held_ns"]))
        block = block[o]
        block["order"] = np.arange(1, len(block) + 1)
        rows.append(block)
    return np.concatenate(rows) if rows else np.zeros(0, STRAGGLER_DTYPE)


def slowest(tl: Timeline) -> dict[str, Any]:
    """The straggler finding ``merge`` stores as ``meta["stragglers"]`` for
    ``ctl.analyze``'s summary (``analysis/ranks_report.py``): for the whole
    run (step NONE, first) and per step, the rank ``stragglers`` ranks
    first, where it held the others up (``held_ns`` > 0), as columns
    ``metakeys.STRAGGLER_COLUMNS`` (``late_mean_ns`` None: unknown);
    ``steps``: how many steps had collectives."""
    s = stragglers(tl)
    top = s[(s["order"] == 1) & (s["held_ns"] > 0)]
    out: dict[str, Any] = {c: top[c].tolist() for c in STRAGGLER_COLUMNS
                           if c != "late_mean_ns"}
    out["late_mean_ns"] = [None if np.isnan(x) else float(x) for x in top["late_mean_ns"]]
    out["steps"] = len(np.unique(s["step"][s["step"] != NONE]))
    return out


def rank_activity(tl: Timeline) -> np.ndarray:
    """Per rank (``ACTIVITY_DTYPE``), over its own span (first to last host
    op): ``busy_ns`` (union of its host ops), ``collective_ns`` (union of
    its collectives from arrival to completion, where known), ``wait_ns``
    (summed waits for later ranks), ``idle_ns`` (span − union of both),
    ``busy_frac`` (busy_ns / span), ``gpu_busy_ns`` (union of its devices'
    gpu rows)."""
    _check(tl)
    o, g = tl.ops, tl.gpu
    op_rank = rank_of_thread(tl)[o.thread] if len(o) else np.zeros(0, np.int64)
    g_rank = rank_of_device(tl)[g.device] if len(g) else np.zeros(0, np.int64)
    c = collectives(tl)
    done = c[c["done_ns"] != NONE]
    ranks = np.unique(np.concatenate([op_rank, g_rank]))
    out = np.zeros(len(ranks), ACTIVITY_DTYPE)
    for i, rk in enumerate(ranks):
        m, d = op_rank == rk, done[done["rank"] == rk]
        b, e = o.host_begin_ns[m], o.host_end_ns[m]
        cb, ce = d["arrival_ns"], np.maximum(d["done_ns"], d["arrival_ns"])
        lo, hi = (int(b.min()), int(e.max())) if len(b) else (0, 0)
        busy = _union_ns(b, e)
        both = _union_ns(np.concatenate([b, cb]), np.concatenate([e, ce]))
        out[i] = (rk, lo, hi, int(m.sum()), busy, _union_ns(cb, ce),
                  int(c["wait_ns"][c["rank"] == rk].sum()), max(hi - lo - both, 0),
                  busy / max(hi - lo, 1),
                  _union_ns(g.begin_ns[g_rank == rk], g.end_ns[g_rank == rk]))
    return out


def _union_ns(b: np.ndarray, e: np.ndarray) -> int:
    """Total length of the union of intervals [b, e) (ns)."""
    if not len(b):
        return 0
    o = np.argsort(b, kind="stable")
    b, e = b[o], np.maximum.accumulate(e[o])
    gap = np.maximum(b[1:] - e[:-1], 0)  # uncovered time between merged runs
    return int(e[-1] - b[0] - gap.sum())


def describe(tl: Timeline) -> str:
    """A few lines on a merged Timeline: each rank's clock and its bound,
    whether it raised or was cut short, the missing ranks, and the worst
    straggler over the whole run."""
    lines = []
    for r in tl.meta.get("ranks") or []:
        c = r.get("clock") or {}
        b = c.get("bound_ns")
        lines.append(f"rank {r['rank']}: clock {c.get('method', '?')}, shift "
                     f"{fmt_ns(c.get('shift_ns', 0))}" + (f" ± {fmt_ns(b)}" if b is not None
                                                         else " (bound unknown)")
                     + (f"; raised {r['error']}" if r.get("error") else "")
                     + (f"; partial ({r['partial']})" if r.get("partial") else ""))
    missing = sorted(tl.meta.get("missing_ranks") or [])
    if missing:
        lines.append(f"rank{'s' * (len(missing) > 1)} {fmt_runs(missing)}: missing (no file; "
                     f"the world size is {tl.meta.get('world_size')})")
    s = stragglers(tl)
    whole = s[s["step"] == NONE]
    if len(whole) and whole["held_ns"][0] > 0:
        w = whole[0]
        lines.append(f"straggler: rank {w['rank']}, last to arrive at {w['last']} of "
                     f"{w['collectives']} collectives, each time "
                     f"{fmt_ns(w['held_ns'] / w['last'])} after the next rank on average "
                     f"({fmt_ns(w['held_ns'])} in all)")
    return "\n".join(lines)


def _check(tl: Any) -> None:
    if not isinstance(tl, Timeline):
        raise CutimelineError(f"Cross-rank analysis needs a Timeline (from ctl.merge "
                              f"or a rank file), not {type(tl).__name__}.")
