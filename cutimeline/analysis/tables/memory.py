"""Device memory from the ``memory`` table: each device's peak, what held
the bytes in use at it, and per step the peak and the bytes allocated.

A ``memory`` row is an op that changed a device's memory: the bytes it
allocated, the bytes freed since the device's previous row, and the bytes
in use after it (``in_use``), at host time ``host_ns``. ``in_use`` is taken
as the truth; a row's level before its own allocation is ``in_use −
allocated``, and the level before the first row (bytes allocated before the
recording began) is that of the first row.

Who held the peak: the rows carry only totals per op, not which tensor a
free released, so the bytes in use at the peak are attributed *last in,
first out* — memory as a stack whose frees take the newest bytes first. A
row's allocation sits at [in_use − allocated, in_use) just after it, and
what survives of it to the peak is its part below every later level before
an allocation (and below the peak). LIFO is exact for the two patterns that
make a training step's peak: temporaries freed soon after they are made,
and activations freed in backward in the reverse of their forward order;
it misreads a tensor kept while newer ones are freed (the loss across the
activations' frees), whose bytes it gives to the newer ones. Bytes
allocated before the recording are "before the recording". Besides the
holders, the ops that allocated the most in the peak's step are named:
those totals are exact.
"""

from __future__ import annotations

import numpy as np

from ...text import fmt_bytes, fmt_ns
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline

__all__ = ["MEMORY_STEP_DTYPE", "memory_device", "device_rows", "step_memory", "peak",
           "report_memory", "memory_text"]

#: ``Report.memory()["steps"]``: per step (and the steps table's
#: ``mem_peak_bytes`` / ``mem_allocated_bytes``): the most bytes in use on
#: the device during the step's host window (NONE before the first reading),
#: bytes allocated and bytes freed in it
MEMORY_STEP_DTYPE = [("number", np.int64), ("device", np.int64), ("peak_bytes", np.int64),
                     ("allocated_bytes", np.int64), ("freed_bytes", np.int64)]


def memory_device(tl: Timeline, preferred: int | None = None) -> int:
    """The device whose memory the step table shows: ``preferred`` (the
    report's primary device) when it has readings, else the one with the
    highest reading."""
    m = tl.memory
    dev = np.asarray(m.device, np.int64)
    if preferred is not None and bool((dev == preferred).any()):
        return int(preferred)
    return int(dev[np.argmax(np.asarray(m.in_use))])


def device_rows(tl: Timeline, device: int) -> np.ndarray:
    """The memory rows of ``device``, in host-time order."""
    m = tl.memory
    rows = np.flatnonzero(np.asarray(m.device) == device)
    return rows[np.argsort(np.asarray(m.host_ns)[rows], kind="stable")]


def _levels(tl: Timeline, rows: np.ndarray):
    """(host_ns, allocated, in_use, level before each allocation) of rows."""
    m = tl.memory
    t = np.asarray(m.host_ns, np.int64)[rows]
    a = np.asarray(m.allocated, np.int64)[rows]
    u = np.asarray(m.in_use, np.int64)[rows]
    return t, a, u, np.maximum(u - a, 0)


def step_memory(tl: Timeline, device: int, h0, h1) -> dict[str, np.ndarray]:
    """Per host window [h0, h1): ``peak_bytes`` (the most in use: the level
    it began with or a reading inside; NONE with no reading yet),
    ``allocated_bytes``, ``freed_bytes`` on ``device``."""
    h0, h1 = np.asarray(h0, np.int64), np.asarray(h1, np.int64)
    rows = device_rows(tl, device)
    t, a, u, _ = _levels(tl, rows)
    freed = np.asarray(tl.memory.freed, np.int64)[rows]
    i0, i1 = np.searchsorted(t, h0, side="left"), np.searchsorted(t, h1, side="left")
    ca = np.concatenate([[0], np.cumsum(a)])
    cf = np.concatenate([[0], np.cumsum(freed)])
    top = np.full(len(h0), NONE, np.int64)
    for k, (i, j) in enumerate(zip(i0.tolist(), i1.tolist())):
        lo = max(i - 1, 0)  # the level the window began with counts too
        if j > lo:
            top[k] = int(u[lo:j].max())
    return {"peak_bytes": top, "allocated_bytes": ca[i1] - ca[i0],
            "freed_bytes": cf[i1] - cf[i0]}


def _held(a: np.ndarray, u: np.ndarray, pre: np.ndarray, p: int) -> tuple[np.ndarray, int]:
    """(bytes of rows 0..p still held at row p, bytes from before the first
    row still held), last in first out (see the module doc)."""
    u_p = u[p]
    later = np.full(p + 1, np.iinfo(np.int64).max, np.int64)  # min level after j
    if p > 0:
        later[:p] = np.minimum.accumulate(pre[1:p + 1][::-1])[::-1]
    top = np.minimum(np.minimum(u[:p + 1], later), u_p)
    held = np.clip(top - (u[:p + 1] - a[:p + 1]), 0, a[:p + 1])
    before = max(int(min(pre[:p + 1].min(), u_p)), 0)
    return held, before


def _by_op(tl: Timeline, ops: np.ndarray, amount: np.ndarray, k: int) -> list[dict]:
    """The k (op name, module) pairs with the most bytes, most first; rows
    without an op count as "(unknown op)"."""
    keep = amount > 0
    ops, amount = ops[keep], amount[keep]
    if len(ops) == 0:
        return []
    o = tl.ops
    name = np.where(ops != NONE, np.asarray(o["name"], np.int64)[np.maximum(ops, 0)], NONE)
    mod = np.where(ops != NONE, np.asarray(o.module, np.int64)[np.maximum(ops, 0)], NONE)
    width = len(tl.strings) + 1
    uniq, inv = np.unique((name + 1) * width + (mod + 1), return_inverse=True)
    tot = np.bincount(inv.reshape(-1), weights=amount, minlength=len(uniq))
    best = np.argsort(-tot, kind="stable")[:k]
    return [{"op": tl.string(int(uniq[i] // width - 1)) or "(unknown op)",
             "module": tl.string(int(uniq[i] % width - 1)), "bytes": int(tot[i])}
            for i in best]


def peak(tl: Timeline, device: int, w0: int, w1: int, steps: np.ndarray | None = None,
         k: int = 3) -> dict | None:
    """The most bytes in use on ``device`` in the host window [w0, w1):
    ``{"device", "peak_bytes", "peak_ns" (host time it was reached, or
    w0 when the window began at it), "step" (the step number whose host
    window holds it, None outside steps), "op" (the op whose reading it
    is), "holders" (the k (op, module) pairs holding the most of it, with
    bytes, LIFO), "before_bytes" (held from before the recording),
    "step_allocators" (the k (op, module) pairs that allocated the most
    in that step)}``; None without readings up to w1. ``steps``: rows of
    the step table (their host windows name the step)."""
    rows = device_rows(tl, device)
    t, a, u, pre = _levels(tl, rows)
    i, j = np.searchsorted(t, w0, side="left"), np.searchsorted(t, w1, side="left")
    lo = max(i - 1, 0)  # the level the window began with counts too
    if j <= lo:
        return None
    p = lo + int(np.argmax(u[lo:j]))  # first of equal maxima
    held, before = _held(a, u, pre, p)
    ops = np.asarray(tl.memory.op, np.int64)[rows]
    at = max(int(t[p]), int(w0))
    out = {"device": int(device), "peak_bytes": int(u[p]), "peak_ns": at,
           "step": None, "op": tl.string(int(tl.ops["name"][ops[p]])) if ops[p] != NONE
           else "", "holders": _by_op(tl, ops[:p + 1], held, k),
           "before_bytes": before, "step_allocators": []}
    if steps is not None and len(steps):
        hb, he = steps["host_begin_ns"], steps["host_end_ns"]
        inside = np.flatnonzero((hb <= at) & (at < he))
        if len(inside):
            s = steps[inside[0]]
            out["step"] = int(s["number"])
            a0, a1 = np.searchsorted(t, [s["host_begin_ns"], s["host_end_ns"]], side="left")
            out["step_allocators"] = _by_op(tl, ops[a0:a1], a[a0:a1], k)
    return out


def report_memory(tl: Timeline, window: tuple[int, int], steps: np.ndarray, device: int,
                  k: int = 3) -> dict:
    """``Report.memory()``: each device's ``peak`` in the host window, and
    per step (rows of the step table) ``step_memory`` on ``device``."""
    devs = np.unique(np.asarray(tl.memory.device, np.int64)).tolist()
    peaks = [peak(tl, d, window[0], window[1], steps, k) for d in devs]
    m = step_memory(tl, device, steps["host_begin_ns"], steps["host_end_ns"])
    per = np.zeros(len(steps), MEMORY_STEP_DTYPE)
    per["number"], per["device"] = steps["number"], device
    for c in ("peak_bytes", "allocated_bytes", "freed_bytes"):
        per[c] = m[c]
    return {"devices": [p for p in peaks if p is not None], "device": int(device),
            "steps": per}


def _pair(h: dict) -> str:
    return f"{h['op']}" + (f" in {h['module']}" if h["module"] else "") + \
        f" {fmt_bytes(h['bytes'])}"


def memory_text(peaks: list[dict], start_ns: int) -> list[str]:
    """One summary line per device: "Memory: peak 3.2 GiB on device 0 at
    step 4, 1.23 s in, held by aten::addmm in fc1 1 GiB, … (newest freed
    first); step 4 allocated most in aten::mm 2 GiB, …"."""
    out = []
    for d in peaks:
        sec = f"{fmt_ns(d['peak_ns'] - start_ns)} in"
        when = f"at step {d['step']}, {sec}" if d["step"] is not None else sec
        line = f"Memory: peak {fmt_bytes(d['peak_bytes'])} on device {d['device']} {when}"
        held = [_pair(h) for h in d["holders"]]
        if d["before_bytes"]:
            held.append(f"{fmt_bytes(d['before_bytes'])} from before the recording")
        if held:
            line += ", held by " + ", ".join(held) + " (newest freed first)"
        if d["step_allocators"]:
            line += (f"; step {d['step']} allocated most in "
                     + ", ".join(_pair(h) for h in d["step_allocators"]))
        out.append(line)
    return out
