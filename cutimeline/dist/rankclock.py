"""Rank clocks: one clock line per rank onto the reference rank's host
clock, fitted to the bounds the collectives give.

Each fact ``done_a ≥ arrival_b`` of ``matching.roles``, in true time,
bounds the offset between the clocks of ranks a and b. ``fit_rank_clocks``
fits them with the aligner's convex-hull method (``clockfit.fit_clock``)
and keeps the wall-clock epoch line where every bound allows it
(``_choose``); ``merge`` maps each rank's times through its line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..alignment.clockfit import fit_clock
from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .matching import collective_rows, roles

__all__ = ["fit_rank_clocks"]

_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


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
    ref_rank, ref_tl = items[0]
    e_ref = _epoch_shift(ref_tl.meta)
    r = collective_rows(items, {})
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
