"""Clock alignment: join each device's event clock to the host clock.

Every event gives a *lower* bound: it cannot run before the host enqueued
it, ``host(raw_ns) ≥ host_record_ns``. Every sync gives an *upper* bound:
when the host returned, the events it covered had run,
``host(raw_ns) ≤ host_end_ns``; a device-wide sync (stream NONE) covers
every event of its device up to ``last_event``, so its binding point is the
latest raw time among them; a stream sync covers its stream, whose newest
event is its latest. Calibration pings are syncs and events, so they give
both. With ``host = offset + slope·raw`` the feasible lines lie above the
upper hull of the lower points and below the lower hull of the upper points
(the convex-hull method of offline clock synchronisation).

The fit works on the hull vertices only. For a slope b the feasible
offsets are ``[A_lo(b), A_hi(b)]``, A_lo convex and A_hi concave piecewise
linear with kinks at hull-edge slopes, so the feasible slopes are one
interval and the band ``[lo(x), hi(x)]`` of all feasible lines at any x
comes from one clipped hull edge. The chosen line passes through the
middle of the band at the middle of the trace (so ``bound_ns`` there is
the band's half-width); among such lines it takes the slope that least
widens the error bound at the trace's ends (``bound_max_ns``, the worst
over the span: the bound is convex in x).

Slopes are limited to 1 ± ``MAX_DRIFT`` (1000 ppm, ten times a crystal's
tolerance): that only matters when the data leave the slope open (a single
upper bound), and then it keeps the bound finite and honest. With no upper
bound at all nothing limits the offset, and ``align`` raises.

A raw time is a reading, not the instant itself: the device clock ticks
(0.5 µs for CUDA events) and the recorder reads it as float32 elapsed
times. Each device states how far a reading may lie from the instant it
marks (``meta["clock_resolution_ns"]``, keyed by device index, see
``simclock.read_error_ns``; 0 when a Timeline does not say), and the fit
takes that in twice: every lower point is lowered and every upper point
raised by it before the hulls are built, so the true line lies in the
band, and an event's own reading adds it once more. So ``bound_ns`` and
``bound_max_ns`` bound the error of an aligned event time, not only of
the line. When the bounds still contradict (a reading further off than
stated: a link read over a quiet spell of minutes, the float32 errors of
many chained anchors adding up, or no stated resolution), every bound is
relaxed by the smallest ``relax_ns`` that restores a feasible line (found
exactly, as the largest gap over slopes); ``bound_ns`` and
``bound_max_ns`` then include ``relax_ns``. Aligned event times are
finally clamped into their bounds (host_record_ns and the earliest
covering sync's host_end_ns), so no aligned event breaks causality; the
clamp moves an event by at most ``relax_ns`` (plus rounding).

Raw columns are never rewritten: ``align`` adds the ``clocks`` table and
fills ``gpu.begin_ns/end_ns`` from ``gpu.begin_event/end_event``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import hull
from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.table import Table
from ..timeline.timeline import Timeline

__all__ = ["MAX_DRIFT", "ClockFit", "fit_clock", "align", "event_host_ns",
           "ping_offset_ns", "launch_delay_ns", "resolution_ns"]

#: the largest |slope − 1| a device clock may have against the host clock
MAX_DRIFT = 1e-3


@dataclass(frozen=True)
class ClockFit:
    """One device's clock: ``host_ns = offset_ns + slope·(raw_ns − ref_raw_ns)``.

    ``bound_ns``: error bound of an aligned time at the trace's middle
    (half the band's width, plus ``relax_ns`` and ``resolution_ns``);
    ``bound_max_ns``: the worst over the trace's span; ``relax_ns``: how
    far the bounds had to be relaxed to be consistent (0 when they were);
    ``resolution_ns``: how far a raw reading may lie from its instant, as
    the device stated it; ``n_lower``/``n_upper``: bound points used. All ns.
    """
    ref_raw_ns: int
    offset_ns: int
    slope: float
    bound_ns: float
    bound_max_ns: float
    relax_ns: float
    n_lower: int
    n_upper: int
    resolution_ns: int = 0


def _check_backend(backend: str) -> None:
    if backend not in hull.BACKENDS:
        raise CutimelineError(f"backend={backend!r} is not known; use 'numba' "
                              f"(compiled) or 'numpy' (its reference twin).")


class _Band:
    """The feasible set of lines v = a + b·u over two hull chains (sheared
    coordinates, ns): L the upper hull of lower points, U the lower hull of
    upper points, both with u ascending."""

    def __init__(self, lu, lv, uu, uv):
        self.lu, self.lv, self.uu, self.uv = lu, lv, uu, uv
        self.sl = np.diff(lv) / np.diff(lu)  # decreasing
        self.su = np.diff(uv) / np.diff(uu)  # increasing
        # gap(b) = A_hi(b) − A_lo(b) is concave with kinks at edge slopes
        b = np.unique(np.clip(np.concatenate([self.sl, self.su, [-MAX_DRIFT, MAX_DRIFT]]),
                              -MAX_DRIFT, MAX_DRIFT))
        g = self.a_hi(b) - self.a_lo(b)
        k = int(np.argmax(g))
        self.relax = max(0.0, -g[k] / 2)
        t = min(g[k], 0.0)  # the relaxed gap A_hi − A_lo + 2·relax ≥ 0 ⇔ g ≥ t
        self.b_min, self.b_max = b[0], b[-1]
        left = np.flatnonzero(g[:k] < t)
        if len(left):
            i = left[-1]
            self.b_min = b[i] + (t - g[i]) * (b[i + 1] - b[i]) / (g[i + 1] - g[i])
        right = np.flatnonzero(g[k + 1:] < t)
        if len(right):
            i = k + 1 + right[0]
            self.b_max = b[i - 1] + (t - g[i - 1]) * (b[i] - b[i - 1]) / (g[i] - g[i - 1])
        self.b_min = min(self.b_min, b[k])
        self.b_max = max(self.b_max, b[k])

    def a_lo(self, b):
        """Lowest offset above every lower point, for slopes b."""
        i = np.searchsorted(-self.sl, -np.asarray(b), "left")
        return self.lv[i] - b * self.lu[i]

    def a_hi(self, b):
        """Highest offset below every upper point, for slopes b."""
        j = np.searchsorted(self.su, np.asarray(b), "left")
        return self.uv[j] - b * self.uu[j]

    def lo(self, u: float) -> float:
        """Lowest feasible line at u (relaxed)."""
        k = int(np.searchsorted(self.lu, u, "right")) - 1
        b = self.b_max if k < 0 else self.b_min if k >= len(self.sl) else self.sl[k]
        b = min(max(b, self.b_min), self.b_max)
        return float(self.a_lo(b) + b * u - self.relax)

    def hi(self, u: float) -> float:
        """Highest feasible line at u (relaxed)."""
        k = int(np.searchsorted(self.uu, u, "right")) - 1
        b = self.b_min if k < 0 else self.b_max if k >= len(self.su) else self.su[k]
        b = min(max(b, self.b_min), self.b_max)
        return float(self.a_hi(b) + b * u + self.relax)

    def slopes_through(self, c: float) -> tuple[float, float]:
        """The slopes of feasible lines through (0, c)."""
        lo, hi, e = self.b_min, self.b_max, self.relax
        for u, w, below in ((self.lu, self.lv - e, True), (self.uu, self.uv + e, False)):
            r, l = u > 0, u < 0
            # a lower point bounds the slope from below on the right of 0 and
            # from above on the left; an upper point the other way round
            if r.any():
                s = (w[r] - c) / u[r]
                lo, hi = (max(lo, s.max()), hi) if below else (lo, min(hi, s.min()))
            if l.any():
                s = (w[l] - c) / u[l]
                lo, hi = (lo, min(hi, s.min())) if below else (max(lo, s.max()), hi)
        if lo > hi:  # only by rounding, when the band is one line
            lo = hi = (lo + hi) / 2
        return float(lo), float(hi)


def _fit_band(band: _Band, u_first: float, u_last: float) -> tuple[float, float, float, float]:
    """(offset at u=0, slope, bound at 0, worst bound over [u_first, u_last])."""
    lo0, hi0 = band.lo(0.0), band.hi(0.0)
    c = (lo0 + hi0) / 2
    b_lo, b_hi = band.slopes_through(c)
    # the error bound at an end x is max(hi(x) − f(x), f(x) − lo(x)), each
    # linear in the slope; take the slope minimising the worst of the four
    terms = []
    for u in (u_first, u_last):
        terms += [(band.hi(u) - c, -u), (c - band.lo(u), u)]
    cands = [(b_lo + b_hi) / 2, b_lo, b_hi]
    for i, (a1, s1) in enumerate(terms):
        for a2, s2 in terms[i + 1:]:
            if s1 != s2:
                x = (a2 - a1) / (s1 - s2)
                if b_lo <= x <= b_hi:
                    cands.append(x)
    worst = [max(a + s * b for a, s in terms) for b in cands]
    k = int(np.argmin(worst))
    return c, cands[k], (hi0 - lo0) / 2, max(worst[k], 0.0)


def fit_clock(lower_raw: np.ndarray, lower_host: np.ndarray, upper_raw: np.ndarray,
              upper_host: np.ndarray, *, resolution_ns: int = 0,
              backend: str = "numba") -> ClockFit:
    """Fit one device clock to lower-bound points ``host(lower_raw) ≥
    lower_host`` and upper-bound points ``host(upper_raw) ≤ upper_host``
    (int64 ns columns), each raw reading within ``resolution_ns`` of the
    instant it marks (see the module doc)."""
    _check_backend(backend)
    if isinstance(resolution_ns, bool) or not isinstance(resolution_ns, (int, np.integer)) \
            or resolution_ns < 0:
        raise CutimelineError(f"fit_clock(resolution_ns={resolution_ns!r}) must be a "
                              f"whole number of ns ≥ 0.")
    res = int(resolution_ns)
    lower_raw, lower_host, upper_raw, upper_host = (
        np.asarray(a, np.int64) for a in (lower_raw, lower_host, upper_raw, upper_host))
    if len(lower_raw) != len(lower_host) or len(upper_raw) != len(upper_host):
        raise CutimelineError("fit_clock needs equally long raw and host columns "
                              "for each kind of bound.")
    if not len(upper_raw) or not len(lower_raw):
        raise CutimelineError("fit_clock needs at least one lower and one upper "
                              "bound point; without both the clock is unbounded.")
    raw_min, raw_max = int(lower_raw.min()), int(lower_raw.max())
    ref_raw = (raw_min + raw_max) // 2
    ref_off = int(lower_host[0]) - int(lower_raw[0])
    # the hulls of the widened points (a constant shift of a chain keeps its
    # vertices: shifting the vertices alone is the same)
    lu, lv = hull.upper_hull(lower_raw, lower_host, ref_raw, ref_off, 1.0, backend)
    uu, uv = hull.upper_hull(upper_raw, upper_host, ref_raw, ref_off, -1.0, backend)
    band = _Band(lu, lv - res, uu, -uv + res)
    c, b, bound, worst = _fit_band(band, float(raw_min - ref_raw), float(raw_max - ref_raw))
    return ClockFit(ref_raw_ns=ref_raw,
                    offset_ns=ref_raw + ref_off + int(np.floor(c + 0.5)),
                    slope=1.0 + b, bound_ns=bound + band.relax + res,
                    bound_max_ns=max(worst, bound) + band.relax + res,
                    relax_ns=band.relax, n_lower=len(lower_raw), n_upper=len(upper_raw),
                    resolution_ns=res)


# -- Timelines ----------------------------------------------------------------------

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


def event_host_ns(tl: Timeline, *, method: str = "fit", backend: str = "numba") -> np.ndarray:
    """Aligned host time (int64 ns) of every event.

    ``method="fit"``: through the clocks table (fitted now if the Timeline
    has none), clamped into each event's bounds; ``method="ping"``: the
    plain offset-only estimate ``raw + ping_offset`` (for comparison; not
    clamped)."""
    _check_backend(backend)
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


def align(tl: Timeline, *, backend: str = "numba") -> Timeline:
    """The Timeline with its device clocks fitted: a ``clocks`` row per
    device, ``gpu.begin_ns/end_ns`` on the host clock, ``meta["aligned"]``.

    Idempotent: an aligned Timeline is returned as it is. A Timeline with no
    events (an imported trace, already on the host clock) is only marked
    aligned. Raises ``CutimelineError`` when a device's events are bounded
    by no sync or ping."""
    _check_backend(backend)
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
    return tl.replace(meta=meta, clocks=clocks, gpu=g.replace(**cols))


def launch_delay_ns(tl: Timeline) -> np.ndarray:
    """Per gpu row, how long its work waited after the host launched it:
    ``begin_ns − launch_ns`` (float64 ns; NaN where a row has no launch
    time). Aligns the Timeline first if it is not aligned."""
    g = align(tl).gpu
    have = (g.launch_ns != NONE) & (g.begin_ns != NONE)
    return np.where(have, (g.begin_ns - g.launch_ns).astype(np.float64), np.nan)
