"""One-off host costs: op calls that take far longer than the same op's other calls.

The first call of an op often pays for what its later calls reuse: CUDA's
lazy context creation (at the first allocation on a device), cuDNN's
algorithm search under ``torch.backends.cudnn.benchmark``, lazy loading of
kernel modules, a ``torch.compile`` compile, the caching allocator's first
``cudaMalloc``. A profile that includes them reads its window through
them: the host sits inside one op for seconds while the GPU idles, and the
gap reads as the launch path's. They are not what the loop costs per step,
and no launch-side fix (CUDA graphs, fewer kernels) removes them, so the
report names them and the what-if replay keeps them (``replay/edits.py``).

A call is *one-off* when it is the first call of its signature (name and
shapes: warm-up is paid by the first call; without recorded shapes any
call of the name, as a name then stands for several), is no sync (a sync's time is
its wait for the device), and its self time (``nesting.self_ns``: without
the ops nested in it, so a chain ``conv2d → … → cudnn_convolution`` names
the op that spent the time) is at least ``FACTOR`` times the typical self
time of its signature's calls (their lower median: with two calls, the
other one) and exceeds it by at least ``SHARE`` of the window. A
signature called once has nothing to be compared with and is never
flagged: a lone slow op may be the work itself.
"""

from __future__ import annotations

import numpy as np

from ...text import fmt_ns, pct
from ...timeline.schema import NONE, OpFlag
from ...timeline.timeline import Timeline
from ..thresholds import THRESHOLDS
from .nesting import parents, self_ns

__all__ = ["FACTOR", "SHARE", "ONE_OFF_DTYPE", "one_offs", "one_off_text"]

FACTOR = THRESHOLDS.oneoff_factor  # why: analysis/thresholds.py
SHARE = THRESHOLDS.oneoff_share  # why: analysis/thresholds.py

ONE_OFF_DTYPE = [("op", np.int64), ("name", object), ("outer", object),
                 ("begin_ns", np.int64), ("self_ns", np.int64),
                 ("typical_ns", np.int64), ("calls", np.int64)]


def one_offs(tl: Timeline, w0: int, w1: int, own: np.ndarray | None = None) -> np.ndarray:
    """The one-off calls that begin in [w0, w1) (see the module doc), longest
    first: op row, name, the outermost op holding it (its own name at top
    level), begin, self time, the typical self time of its signature, and
    how many calls the signature has in the Timeline."""
    o = tl.ops
    out = np.zeros(0, ONE_OFF_DTYPE)
    if len(o) < 2 or w1 <= w0:
        return out
    own = self_ns(tl) if own is None else own
    names = np.asarray(o["name"], np.int64)
    # a signature: the name and the shapes (a 64 MB copy is not a slow
    # call of the small copies beside it)
    key = (names << 32) | (np.asarray(o["shapes"], np.int64) & 0xFFFFFFFF)
    u, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    calls = np.bincount(inv, minlength=len(u))
    # the lower median of each signature's self times: sort by (key, self time)
    order = np.lexsort((own, inv))
    first = np.concatenate([[0], np.cumsum(calls)[:-1]])
    typical = own[order[first + (calls - 1) // 2]]
    t = typical[inv]
    begin = np.asarray(o.host_begin_ns, np.int64)
    # warm-up is paid by a signature's first call; a sync's time is its wait
    # for the device, which the sync cause accounts for
    by_time = np.lexsort((begin, inv))
    opening = np.zeros(len(o), bool)
    opening[by_time[first]] = True
    # without shapes (a trace recorded without record_shapes) a name stands
    # for several signatures, each with its own first call: any call counts
    shapes = np.asarray(o["shapes"], np.int64)
    opening |= (shapes == NONE) | (shapes == tl.string_id(""))
    waits = (np.asarray(o.flags) & int(OpFlag.SYNC)) != 0
    hit = np.flatnonzero(opening & ~waits & (calls[inv] >= 2) & (own >= FACTOR * t) &
                         (own - t >= SHARE * (w1 - w0)) & (begin >= w0) & (begin < w1))
    if len(hit) == 0:
        return out
    hit = hit[np.argsort(-own[hit], kind="stable")]
    par = parents(tl)
    outer = hit.copy()
    for _ in range(64):  # climb to the top-level op (nesting is shallow)
        up = par[outer]
        if not (up >= 0).any():
            break
        outer = np.where(up >= 0, up, outer)
    out = np.zeros(len(hit), ONE_OFF_DTYPE)
    out["op"], out["begin_ns"], out["self_ns"] = hit, begin[hit], own[hit]
    out["typical_ns"], out["calls"] = t[hit], calls[inv[hit]]
    out["name"] = tl.decode(names[hit])
    out["outer"] = tl.decode(names[outer])
    return out


def one_off_text(rows: np.ndarray, window_ns: int, k: int = 3) -> str | None:
    """The report's line on one-off costs, or None without any."""
    if not len(rows):
        return None
    parts = []
    for r in rows[:k]:
        where = f" in {r['outer']}" if r["outer"] != r["name"] else ""
        others = "its other call" if r["calls"] == 2 else f"its other {r['calls'] - 1} calls"
        parts.append(f"{r['name']}{where} {fmt_ns(r['self_ns'])} once ({others} "
                     f"typically {fmt_ns(r['typical_ns'])})")
    more = f" and {len(rows) - k} more" if len(rows) > k else ""
    total = int(rows["self_ns"].sum() - rows["typical_ns"].sum())
    return (f"one-off host costs: {'; '.join(parts)}{more} — {pct(total / max(window_ns, 1))} "
            f"of the window, likely warm-up (lazy CUDA/cuDNN initialisation, "
            f"autotuning, compilation) rather than what each step costs; profile after a few "
            f"steps (torch.profiler's schedule wait/warmup) to leave it out")
