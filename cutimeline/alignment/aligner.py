"""Clock alignment: join each device's event clock in a Timeline to the host clock.

Every event gives a *lower* bound: it cannot run before the host enqueued
it, ``host(raw_ns) ≥ host_record_ns``. Every sync gives an *upper* bound:
when the host returned, the events it covered had run, ``host(raw_ns) ≤
host_end_ns``; a device-wide sync (stream NONE) covers every event of its
device up to ``last_event``, a stream sync its stream. Calibration pings
are both. Each device's clock is fitted to its points by
``clockfit.fit_clock``, each raw reading widened by the device's stated
``meta["clock_resolution_ns"]`` (``resolution_ns``; see
``devices/clockread.py``'s ``read_error_ns``). With no upper bound for a
device nothing limits its offset, and ``align`` raises.

Invariants: aligned event times are clamped into their bounds, so no
aligned event breaks causality (the clamp moves one by at most the fit's
``relax_ns``, plus rounding); raw columns are never rewritten (``align``
adds the ``clocks`` table and fills ``gpu.begin_ns/end_ns``); an op's gpu
row begins no earlier than the op's return from dispatch (``_launched``
says why).
"""

from __future__ import annotations

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE, GpuKind, OpFlag
from ..timeline.table import Table
from ..timeline.timeline import Timeline
from . import hull
from .clockfit import check_backend, fit_clock

__all__ = ["align", "event_host_ns", "ping_offset_ns", "launch_delay_ns", "resolution_ns"]


def _devices(tl: Timeline) -> np.ndarray:
    dev = tl.events.device
    lo, hi = int(dev.min()), int(dev.max())
    if lo < 0:
        raise CutimelineError(f"events.device holds {lo}; every event must "
                              f"name the device (0, 1, ...) whose clock it read.")
    if lo == hi:  # the common case, without a pass over a copy
        return np.array([lo])
    return np.flatnonzero(np.bincount(dev))


def _prefix_max_at(raw: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """max(raw[:p + 1]) for each p in pos, without a full-length scan result."""
    at = np.unique(pos)
    seg = np.maximum.reduceat(raw[:at[-1] + 1], np.concatenate([[0], at[:-1] + 1]))
    return np.maximum.accumulate(seg)[np.searchsorted(at, pos)]


def _sync_points(tl: Timeline, devices: np.ndarray) -> dict[str, np.ndarray]:
    """The syncs that cover an event, with the device of that event and
    their binding raw time."""
    ev, sy = tl.events, tl.syncs
    use = np.flatnonzero(sy.last_event >= 0)
    last = sy.last_event[use]
    dev = ev.device[last].astype(np.int64)
    stated = sy.device[use]
    bad = (stated >= 0) & (stated != dev)
    if bad.any():
        i = use[np.flatnonzero(bad)[0]]
        raise CutimelineError(f"Sync {i} is on device {sy.device[i]} but its "
                              f"last_event {sy.last_event[i]} is on device "
                              f"{ev.device[sy.last_event[i]]}; a sync can only "
                              f"cover events of its own device.")
    end = sy.host_end_ns[use]
    early = end < ev.host_record_ns[last]
    if early.any():
        i = use[np.flatnonzero(early)[0]]
        raise CutimelineError(f"Sync {i} returned at host {end[np.flatnonzero(early)[0]]} "
                              f"ns, before its last_event {sy.last_event[i]} was "
                              f"recorded; the syncs table is inconsistent.")
    x = ev.raw_ns[last].copy()
    wide = sy.stream[use] < 0
    if wide.any():  # a device-wide sync binds at the latest event it covers
        if len(devices) == 1:
            x[wide] = _prefix_max_at(ev.raw_ns, last[wide])
        else:
            for d in np.unique(dev[wide]):
                at = np.flatnonzero(ev.device == d)
                w = wide & (dev == d)
                x[w] = _prefix_max_at(ev.raw_ns[at], np.searchsorted(at, last[w]))
    return {"index": use, "device": dev, "raw": x, "end": end}


def ping_offset_ns(tl: Timeline) -> dict[int, int]:
    """The plain offset-only estimate per device: the mean over calibration
    pings (syncs of kind "ping") of host midpoint − raw time of the ping,
    ns, so ``host ≈ raw + offset``. Devices without pings are left out."""
    ev, sy = tl.events, tl.syncs
    ping = (sy.kind == tl.string_id("ping")) & (sy.last_event >= 0) \
        if tl.string_id("ping") != NONE else np.zeros(len(sy), bool)
    last = sy.last_event[ping]
    mid = sy.host_begin_ns[ping] // 2 + sy.host_end_ns[ping] // 2
    off = mid - ev.raw_ns[last]
    dev = ev.device[last]
    return {int(d): int(np.round(off[dev == d].mean())) for d in np.unique(dev)}


def resolution_ns(tl: Timeline, device: int) -> int:
    """How far a raw reading of ``device``'s clock may lie from the instant
    it marks (ns), as the recording device stated it in
    ``meta["clock_resolution_ns"]``; 0 where it said nothing (files
    written before, hand-made Timelines)."""
    stated = (tl.meta.get("clock_resolution_ns") or {}).get(str(device), 0)
    if isinstance(stated, bool) or not isinstance(stated, (int, float)) \
            or not np.isfinite(stated) or stated < 0:
        raise CutimelineError(f"meta['clock_resolution_ns'] gives {stated!r} for device "
                              f"{device}; it must be a number of ns ≥ 0 (or be left "
                              f"out), so fix or drop that entry.")
    return int(np.ceil(stated))


def _fit_clocks(tl: Timeline, devices: np.ndarray, pts: dict[str, np.ndarray],
                backend: str) -> Table:
    ev = tl.events
    pings = ping_offset_ns(tl)
    rows = []
    for d in devices:
        on = slice(None) if len(devices) == 1 else ev.device == d
        up = pts["device"] == d
        if not up.any():
            raise CutimelineError(
                f"Device {d} has {int(np.sum(ev.device == d)):,} events but no "
                f"sync or calibration ping covers any of them, so nothing bounds "
                f"its clock from above and no alignment exists; record with "
                f"calibration pings (the recorder lays them at start and stop) or "
                f"end the work with torch.cuda.synchronize().")
        f = fit_clock(ev.raw_ns[on], ev.host_record_ns[on], pts["raw"][up],
                      pts["end"][up], resolution_ns=resolution_ns(tl, int(d)),
                      backend=backend)
        rows.append((d, f.ref_raw_ns, f.offset_ns, f.slope, f.bound_ns,
                     f.bound_max_ns, f.relax_ns, f.n_lower, f.n_upper,
                     pings.get(int(d), NONE)))
    names = ("device", "ref_raw_ns", "offset_ns", "slope", "bound_ns",
             "bound_max_ns", "relax_ns", "n_lower", "n_upper", "ping_offset_ns")
    return Table("clocks", {n: np.array(c) for n, c in zip(names, zip(*rows))})


def _lookup(clocks: Table, n_dev: int) -> tuple[np.ndarray, ...]:
    ref = np.zeros(n_dev, np.int64)
    off = np.zeros(n_dev, np.int64)
    slope = np.full(n_dev, np.nan)
    d = clocks.device.astype(np.int64)
    keep = d < n_dev
    ref[d[keep]], off[d[keep]] = clocks.ref_raw_ns[keep], clocks.offset_ns[keep]
    slope[d[keep]] = clocks.slope[keep]
    return ref, off, slope


def event_host_ns(tl: Timeline, *, method: str = "fit", backend: str = "auto") -> np.ndarray:
    """Aligned host time (int64 ns) of every event.

    ``method="fit"``: through the clocks table (fitted now if the Timeline
    has none), clamped into each event's bounds; ``method="ping"``: the
    plain offset-only estimate ``raw + ping_offset`` (for comparison; not
    clamped)."""
    check_backend(backend)
    ev = tl.events
    if method not in ("fit", "ping"):
        raise CutimelineError(f"method={method!r} is not known; use 'fit' (the "
                              f"convex-hull clock fit) or 'ping' (offset only).")
    if not len(ev):
        return np.zeros(0, np.int64)
    devices = _devices(tl)
    if method == "ping":
        pings = ping_offset_ns(tl)
        missing = [int(d) for d in devices if int(d) not in pings]
        if missing:
            raise CutimelineError(f"Device {missing[0]} has no calibration ping, so "
                                  f"there is no offset-only estimate; use method='fit'.")
        lut = np.zeros(int(devices.max()) + 1, np.int64)
        for d, o in pings.items():
            lut[d] = o
        return ev.raw_ns + lut[ev.device]
    pts = _sync_points(tl, devices)
    clocks = tl.clocks if len(tl.clocks) else _fit_clocks(tl, devices, pts, backend)
    return _host_ns(tl, clocks, devices, pts, backend)


def _host_ns(tl: Timeline, clocks: Table, devices: np.ndarray,
             pts: dict[str, np.ndarray], backend: str) -> np.ndarray:
    ev = tl.events
    missing = np.setdiff1d(devices, clocks.device)
    if len(missing):
        raise CutimelineError(f"The clocks table has no row for device "
                              f"{missing[0]}; drop the clocks table and align again.")
    return hull.host_times(ev.raw_ns, ev.device, ev.stream, ev.host_record_ns,
                           *_lookup(clocks, int(devices.max()) + 1),
                           tl.syncs.last_event[pts["index"]], pts["device"],
                           tl.syncs.stream[pts["index"]], pts["end"], backend)


def align(tl: Timeline, *, backend: str = "auto") -> Timeline:
    """The Timeline with its device clocks fitted: a ``clocks`` row per
    device, ``gpu.begin_ns/end_ns`` on the host clock, ``meta["aligned"]``.

    Idempotent: an aligned Timeline is returned as it is. A Timeline with no
    events (an imported trace, already on the host clock) is only marked
    aligned. Raises ``CutimelineError`` when a device's events are bounded
    by no sync or ping."""
    check_backend(backend)
    if tl.meta.get("aligned"):
        return tl
    meta = {**tl.meta, "aligned": True}
    if not len(tl.events):
        return tl.replace(meta=meta)
    devices = _devices(tl)
    pts = _sync_points(tl, devices)
    clocks = _fit_clocks(tl, devices, pts, backend)
    host = _host_ns(tl, clocks, devices, pts, backend)
    g = tl.gpu
    cols = {}
    for ev_col, col in (("begin_event", "begin_ns"), ("end_event", "end_ns")):
        e = g[ev_col]
        if len(e) and e.min() >= 0:
            cols[col] = host[e]
        elif len(e):  # rows without an event keep what they had
            cols[col] = np.where(e >= 0, host[np.maximum(e, 0)], g[col])
    if "begin_ns" in cols and "end_ns" in cols:
        cols["begin_ns"] = _launched(tl, cols["begin_ns"], cols["end_ns"])
    return tl.replace(meta=meta, clocks=clocks, gpu=g.replace(**cols))


def _launched(tl: Timeline, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Rows' begins no earlier than their op's return from dispatch.

    On an idle stream a CUDA event executes as soon as the host records
    it, so an op's BEGIN event runs before the op has even been
    dispatched, and BEGIN to END would paint the op's whole dispatch as
    GPU work (a launch-bound loop would read GPU-bound). So the row of an
    op (``GpuKind.OP``, not a host-blocking or collective one) begins at
    the later of its BEGIN event and the op's ``host_end_ns`` (right after
    its launch call returned), never after its END. On a busy stream
    BEGIN is the later and nothing changes. An estimate: the work may
    start up to the launch call's return path (≲ 1 µs) before the op
    returns; the events keep their aligned times."""
    g, o = tl.gpu, tl.ops
    op = np.asarray(g.op, np.int64)
    mine = (g.kind == GpuKind.OP) & (op >= 0) & (begin != NONE) & (end != NONE)
    if not mine.any():
        return begin
    rows = np.flatnonzero(mine)
    back = o.host_end_ns[op[rows]]
    ok = (o.flags[op[rows]] & (OpFlag.SYNC | OpFlag.COLLECTIVE)) == 0
    out = begin.copy()
    out[rows] = np.where(ok, np.minimum(np.maximum(begin[rows], back), end[rows]),
                         begin[rows])
    return out


def launch_delay_ns(tl: Timeline) -> np.ndarray:
    """Per gpu row, how long its work waited after the host launched it:
    ``begin_ns − launch_ns`` (float64 ns; NaN where a row has no launch
    time). Aligns the Timeline first if it is not aligned."""
    g = align(tl).gpu
    have = (g.launch_ns != NONE) & (g.begin_ns != NONE)
    return np.where(have, (g.begin_ns - g.launch_ns).astype(np.float64), np.nan)
