"""Across ranks: collectives matched between ranks, rank clocks, stragglers.

    tl = ctl.merge("runs/")
    from cutimeline.dist.straggler import collectives, stragglers, rank_activity
    stragglers(tl)[:3]          # step NONE (the whole run) first, worst rank first

A collective *instance* is the k-th collective of a process group (p2p:
the k-th message from one rank to another); each rank that recorded it
has one row (``meta["collectives"]``, see ``dist.py``). Its *arrival* on
a rank is the host begin of its op there (when the rank called it), its
*completion* the ``done_ns`` the recorder measured.

Which ranks must have arrived before which may complete (``roles``):
all-to-all kinds (all_reduce, all_gather, reduce_scatter, all_to_all,
barrier) — every rank's completion follows every rank's arrival; a
broadcast or scatter completes nowhere before its root arrived; a reduce
or gather completes at its root only after every rank arrived; a receive
completes after its send began. Each such fact ``done_a ≥ arrival_b``,
in true time, bounds the offset between the clocks of ranks a and b;
``fit_rank_clocks`` turns them into one clock line per rank (``merge``).

Tables are numpy structured arrays; times are ns on the merged clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..recording.ranks import ALL, FROM_ROOT, KINDS, RECV, SEND, TO_ROOT, rank_of_thread
from ..errors import CutimelineError
from ..timeline.schema import NONE, SpanKind
from ..timeline.timeline import Timeline

__all__ = ["collectives", "stragglers", "rank_activity", "describe",
           "fit_rank_clocks", "COLLECTIVE_DTYPE", "STRAGGLER_DTYPE", "ACTIVITY_DTYPE"]

_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max

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


# -- matching ------------------------------------------------------------------------

def _rows(items: list[tuple[int, Timeline]], groups: dict[tuple, int]) -> dict[str, np.ndarray]:
    """The collective rows of Timelines (single ranks or merged), with their
    ops row (NONE where the op is not in the Timeline) and times."""
    out: dict[str, list] = {k: [] for k in ("rank", "group", "kind", "number", "peer",
                                            "done", "arrival", "op")}
    for rank, tl in items:
        c = tl.meta.get("collectives") or {}
        if not len(c.get("seq", ())):
            continue
        g_lut = np.array([groups.setdefault((g["name"], tuple(g["ranks"])), len(groups))
                          for g in tl.meta.get("groups") or []] + [NONE], np.int64)
        seq = np.asarray(c["seq"], np.int64)
        row = _row_of_seq(tl.ops.seq, seq)
        keep = row != NONE
        g = np.asarray(c["group"], np.int64)
        out["group"].append(g_lut[np.where((g >= 0) & (g < len(g_lut) - 1), g, -1)][keep])
        r = np.asarray(c["rank"], np.int64) if "rank" in c else np.full(len(seq), rank)
        out["rank"].append(r[keep])
        for col, src in (("kind", "kind"), ("number", "number"), ("peer", "peer"),
                         ("done", "done_ns")):
            out[col].append(np.asarray(c[src], np.int64)[keep])
        out["op"].append(row[keep])
        out["arrival"].append(tl.ops.host_begin_ns[row[keep]])
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}


def _row_of_seq(seq: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Rows of ``seq`` holding the values ``wanted``; NONE where none does
    (a collective whose op a slice left out)."""
    if not len(seq):
        return np.full(len(wanted), NONE, np.int64)
    order = None
    if np.any(seq[1:] < seq[:-1]):  # ops are in seq order unless built by hand
        order = np.argsort(seq, kind="stable")
        seq = seq[order]
    i = np.minimum(np.searchsorted(seq, wanted), len(seq) - 1)
    hit = seq[i] == wanted
    return np.where(hit, i if order is None else order[i], NONE)


def roles(r: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(instance id per row, joins: the instance waits for this row's
    arrival, finishes: this row's completion follows those arrivals).
    Rows that cannot be matched (no group or number) get instance NONE."""
    kind, rank, peer = r["kind"], r["rank"], r["peer"]
    p2p = (kind == SEND) | (kind == RECV)
    src = np.where(kind == SEND, rank, np.where(kind == RECV, peer, NONE))
    dst = np.where(kind == SEND, peer, np.where(kind == RECV, rank, NONE))
    ok = (r["group"] != NONE) & (r["number"] != NONE) & (~p2p | (peer != NONE))
    inst = np.full(len(kind), NONE, np.int64)
    if ok.any():
        key = np.stack([r["group"], r["number"], src, dst], 1)[ok]
        _, inv = np.unique(key, axis=0, return_inverse=True)
        inst[ok] = inv.reshape(-1)
    joins = (kind == ALL) | (kind == TO_ROOT) | (kind == SEND) | \
        ((kind == FROM_ROOT) & (rank == peer))
    finishes = (kind == ALL) | (kind == FROM_ROOT) | (kind == RECV) | \
        ((kind == TO_ROOT) & (rank == peer))
    return inst, joins & ok, finishes & ok


# -- rank clocks ---------------------------------------------------------------------

def _epoch_shift(meta: dict) -> int | None:
    """wall − host of a Timeline (ns), from its stored clock pair."""
    e, h = meta.get("start_epoch_ns"), meta.get("start_host_ns")
    if isinstance(e, int) and isinstance(h, int):
        return e - h
    off = meta.get("epoch_offset_ns")  # imported traces: wall = host + offset
    return off if isinstance(off, int) else None


def fit_rank_clocks(items: list[tuple[int, Timeline]]) -> dict[int, dict[str, Any]]:
    """One clock line per rank onto the first (lowest) rank's host clock
    (see ``merger.merge`` for what each dict holds). Ranks are fitted against
    the reference's collectives first; a rank that shares none with it is
    fitted against the ranks already fitted, their bounds added."""
    from ..alignment.aligner import fit_clock
    ref_rank, ref_tl = items[0]
    e_ref = _epoch_shift(ref_tl.meta)
    r = _rows(items, {})
    inst, joins, finishes = roles(r)
    n_inst = int(inst.max()) + 1 if len(inst) else 0
    have_done = (r["done"] != NONE) & finishes
    clocks: dict[int, dict[str, Any]] = {ref_rank: {
        "offset_ns": 0, "ref_ns": 0, "slope": 1.0, "shift_ns": 0, "bound_ns": 0.0,
        "relax_ns": 0.0, "n_lower": 0, "n_upper": 0, "method": "reference",
        "epoch_shift_ns": 0, "epoch_ns": ref_tl.meta.get("start_epoch_ns"),
        "host_ns": ref_tl.meta.get("start_host_ns")}}
    todo = [(rank, tl) for rank, tl in items[1:]]
    while todo:
        lo = np.full(n_inst, _MIN, np.int64)
        hi = np.full(n_inst, _MAX, np.int64)
        for rank, c in clocks.items():
            mine = (r["rank"] == rank) & (inst != NONE)
            pad = int(np.ceil(c["bound_ns"]))
            j, f = mine & joins, mine & have_done
            np.maximum.at(lo, inst[j], _line(c, r["arrival"][j]) - pad)
            np.minimum.at(hi, inst[f], _line(c, r["done"][f]) + pad)
        fitted = {}
        for rank, tl in todo:
            mine = (r["rank"] == rank) & (inst != NONE)
            low = mine & have_done & (lo[np.maximum(inst, 0)] != _MIN)
            up = mine & joins & (hi[np.maximum(inst, 0)] != _MAX)
            if low.any() and up.any():
                fit = fit_clock(r["done"][low], lo[inst[low]], r["arrival"][up],
                                hi[inst[up]], backend="numpy")
                e = _epoch_shift(tl.meta)
                fitted[rank] = _choose(fit, r["done"][low], lo[inst[low]], r["arrival"][up],
                                       hi[inst[up]], None if e is None or e_ref is None
                                       else e - e_ref, tl.meta.get("start_host_ns"))
        if not fitted:
            break
        clocks.update(fitted)
        todo = [(rank, tl) for rank, tl in todo if rank not in fitted]
    for rank, tl in todo:  # no two-sided bounds: the epochs alone relate them
        e = _epoch_shift(tl.meta)
        if e is None or e_ref is None:
            raise CutimelineError(
                f"Rank {rank} shares no completed collective with the other ranks "
                f"and its file stores no wall-clock epoch, so nothing relates its "
                f"clock to rank {ref_rank}'s; record every rank with ctl.record.")
        clocks[rank] = {"offset_ns": e - e_ref, "ref_ns": 0, "slope": 1.0,
                        "shift_ns": e - e_ref, "bound_ns": None, "relax_ns": 0.0,
                        "n_lower": 0, "n_upper": 0, "method": "epoch",
                        "epoch_shift_ns": e - e_ref}
    return clocks


def _line(c: dict, t: np.ndarray) -> np.ndarray:
    """A fitted clock line applied to host times of its rank (int64 ns)."""
    d = t - c["ref_ns"]
    return c["offset_ns"] + (d if c["slope"] == 1.0 else np.rint(d * c["slope"]).astype(np.int64))


def _choose(fit: Any, lo_raw, lo_host, up_raw, up_host, epoch: int | None,
            start: int | None) -> dict[str, Any]:
    """The first line that satisfies every bound of: the epoch line (slope
    1, then the fitted slope, through the rank's start), the fit's middle
    with slope 1, the fit itself. A consistent straggler leaves a band as
    wide as its delay, and there the epoch (exact on one machine, NTP-close
    across machines) says more than the middle; hosts' clocks drift by ppm,
    so slope 1 is kept unless the bounds refuse it. The bound is the fit's
    plus how far the line strays from the fit over the points' span (the
    band lies within fit ± its bound)."""
    ref = fit.ref_raw_ns
    ends = np.array([lo_raw.min(), lo_raw.max()]) - ref
    cands = []
    if epoch is not None:
        pivot = ref if start is None else int(start)
        cands = [(ref + int(round((pivot - ref) + epoch + s * (ref - pivot))), s,
                  "epoch+collectives") for s in (1.0, fit.slope)]
    cands.append((fit.offset_ns, 1.0, "collectives"))

    def line(off: int, s: float, method: str) -> dict[str, Any]:
        stray = float(np.abs((off - fit.offset_ns) + (s - fit.slope) * ends).max())
        return {"offset_ns": int(off), "ref_ns": int(ref), "slope": float(s),
                "shift_ns": int(off) - int(ref), "method": method,
                "bound_ns": float(fit.bound_max_ns) + stray, "relax_ns": float(fit.relax_ns),
                "n_lower": int(fit.n_lower), "n_upper": int(fit.n_upper),
                "epoch_shift_ns": epoch}

    for off, s, method in cands if fit.relax_ns == 0 else ():
        if np.all((off - ref) + s * (lo_raw - ref) >= lo_host - ref) and \
                np.all((off - ref) + s * (up_raw - ref) <= up_host - ref):
            return line(off, s, method)
    return line(fit.offset_ns, fit.slope, "collectives")


# -- analysis ------------------------------------------------------------------------

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
    r = _rows([(int(tl.meta.get("rank", 0)), tl)], groups)
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


def rank_activity(tl: Timeline) -> np.ndarray:
    """Per rank (``ACTIVITY_DTYPE``), over its own span (first to last host
    op): ``busy_ns`` (union of its host ops), ``collective_ns`` (union of
    its collectives from arrival to completion, where known), ``wait_ns``
    (summed waits for later ranks), ``idle_ns`` (span − union of both),
    ``busy_frac`` (busy_ns / span), ``gpu_busy_ns`` (union of its devices'
    gpu rows)."""
    from ..recording.ranks import rank_of_device
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
    and the worst straggler over the whole run."""
    from ..analysis.summary import fmt_ns
    lines = []
    for r in tl.meta.get("ranks") or []:
        c = r.get("clock") or {}
        b = c.get("bound_ns")
        lines.append(f"rank {r['rank']}: clock {c.get('method', '?')}, shift "
                     f"{fmt_ns(c.get('shift_ns', 0))}" + (f" ± {fmt_ns(b)}" if b is not None
                                                         else " (bound unknown)")
                     + (f"; raised {r['error']}" if r.get("error") else ""))
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
