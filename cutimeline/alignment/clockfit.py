"""One device's clock fit: the line ``host = offset + slope·raw`` between
lower- and upper-bound points, with a bound on its error.

Lower points say ``host(raw_ns) ≥ host_ns`` (an event cannot run before
the host enqueued it), upper points ``host(raw_ns) ≤ host_ns`` (a sync
returned after the events it covered had run). The feasible lines lie
between the two hulls (the convex-hull method of offline clock
synchronisation; ``_Band``). Which points a Timeline gives, and applying
the fit to it: ``aligner``. The chosen line passes through the middle of
the band at the middle of the trace (``bound_ns`` there is the band's
half-width) with the slope that least widens the bound at the trace's
ends (``bound_max_ns``, the worst over the span).

Slopes are limited to 1 ± ``MAX_DRIFT`` (1000 ppm, ten times a crystal's
tolerance): that only matters when the data leave the slope open (a
single upper bound), and then keeps the bound finite and honest. With no
upper bound nothing limits the offset, and ``fit_clock`` raises.

A raw time is a reading, not the instant: the device clock ticks (0.5 µs
for CUDA events) and is read as float32 elapsed times. Each device
states how far a reading may lie from its instant (``resolution_ns``);
lower points are lowered and upper points raised by it before the hulls
are built, and an event's own reading adds it once more, so ``bound_ns``
and ``bound_max_ns`` bound an aligned event time, not only the line.
When the bounds still contradict (a reading further off than stated: a
link read over a quiet spell of minutes, float32 errors of many chained
anchors, or no stated resolution), every bound is relaxed by the
smallest ``relax_ns`` that restores a feasible line (exactly: the
largest gap over slopes), which the bounds then include.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CutimelineError
from . import hull

__all__ = ["MAX_DRIFT", "ClockFit", "fit_clock", "check_backend"]

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


def check_backend(backend: str) -> None:
    """Raise for a ``backend=`` that is none of ``hull.BACKENDS``."""
    if backend not in hull.BACKENDS:
        raise CutimelineError(f"backend={backend!r} is not known; use 'auto' (by "
                              f"size), 'numba' (compiled) or 'numpy' (its "
                              f"reference twin).")


class _Band:
    """The feasible set of lines v = a + b·u over two hull chains (sheared
    coordinates, ns): L the upper hull of lower points, U the lower hull of
    upper points, both with u ascending.

    Only the hull vertices are used. For a slope b the feasible offsets
    are ``[a_lo(b), a_hi(b)]``, a_lo convex and a_hi concave piecewise
    linear with kinks at hull-edge slopes, so the feasible slopes are one
    interval and the band ``[lo(x), hi(x)]`` of all feasible lines at any
    x comes from one clipped hull edge. The error bound is convex in x,
    so its worst over a span is at an end."""

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
              backend: str = "auto") -> ClockFit:
    """Fit one device clock to lower-bound points ``host(lower_raw) ≥
    lower_host`` and upper-bound points ``host(upper_raw) ≤ upper_host``
    (int64 ns columns), each raw reading within ``resolution_ns`` of the
    instant it marks (see the module doc)."""
    check_backend(backend)
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
