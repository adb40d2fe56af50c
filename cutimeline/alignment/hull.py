"""The aligner's O(n) passes: convex hulls of clock-bound points, and
aligned event times clamped by the syncs that cover them.

Each pass is a Numba kernel (``@njit(cache=True)``, compiled on first call,
never at import) with a NumPy twin that does the same float64 arithmetic in
the same order, so both give equal results; ``backend`` picks one, and
"auto" picks by size (``numeric.engines.resolve_engine``: a recording of a
few steps aligns with the twins and compiles nothing).

Points are clock readings in *sheared* coordinates relative to a reference:
``u = raw − ref_raw`` and ``v = sign·(host − raw − ref_off)`` (ns, float64).
Subtracting raw from host removes the slope-1 part, so v stays small (µs to
ms) and products u·slope keep sub-ns precision for traces of hours; the
shear maps lines to lines, so hulls are unchanged.

Sorting 10^7 points costs more than the rest of alignment, so the hull is
found without sorting them all: the top point of each of up to 16384 device
time buckets gives a coarse hull H' that lies on or below the true one; a
point strictly below H' cannot be a vertex, which leaves a few points per
bucket to sort and chain.
"""

from __future__ import annotations

import numba
import numpy as np

from ..numeric.engines import AUTO, ENGINES, readonly, resolve_engine

__all__ = ["BACKENDS", "upper_hull", "deadlines", "host_times"]

BACKENDS = (AUTO,) + ENGINES
_TOL = 1.0        # ns: keep points this close below H' (float rounding)
_MAX_BUCKETS = 1 << 14
_NO_DEADLINE = np.iinfo(np.int64).max


def _n_buckets(n: int) -> int:
    return int(min(_MAX_BUCKETS, max(1, n // 64)))


# -- the monotone chain on sorted points ----------------------------------------

@numba.njit(cache=True)
def _chain_nb(u, v, order):
    """Upper hull of points (u[order[i]], v[order[i]]), order sorted by u:
    vertex positions in ``order``. Of points with equal u only the highest
    can be a vertex; collinear points are dropped."""
    st = np.empty(len(order), np.int64)
    m = 0
    for i in range(len(order)):
        p = order[i]
        if m > 0 and u[st[m - 1]] == u[p]:
            if v[p] <= v[st[m - 1]]:
                continue
            m -= 1
        while m >= 2:
            o, a = st[m - 2], st[m - 1]
            if (u[a] - u[o]) * (v[p] - v[o]) - (v[a] - v[o]) * (u[p] - u[o]) >= 0.0:
                m -= 1
            else:
                break
        st[m] = p
        m += 1
    return st[:m]


def _chain_np(u, v, order):
    st: list[int] = []
    for p in order.tolist():
        if st and u[st[-1]] == u[p]:
            if v[p] <= v[st[-1]]:
                continue
            st.pop()
        while len(st) >= 2:
            o, a = st[-2], st[-1]
            if (u[a] - u[o]) * (v[p] - v[o]) - (v[a] - v[o]) * (u[p] - u[o]) >= 0.0:
                st.pop()
            else:
                break
        st.append(p)
    return np.asarray(st, np.int64)


# -- the bucket prefilter ---------------------------------------------------------

@numba.njit(cache=True)
def _tops_nb(raw, host, raw_min, scale, ref_raw, ref_off, sign, k):
    """Index of the highest point (first on ties) in each of k buckets of
    device time, -1 where a bucket is empty."""
    top = np.full(k, -1, np.int64)
    best = np.full(k, -np.inf)
    for i in range(len(raw)):
        b = min(int(np.float64(raw[i] - raw_min) * scale), k - 1)
        v = sign * np.float64(host[i] - raw[i] - ref_off)
        if v > best[b]:
            best[b] = v
            top[b] = i
    return top


def _tops_np(raw, host, raw_min, scale, ref_raw, ref_off, sign, k):
    b = np.minimum(((raw - raw_min).astype(np.float64) * scale).astype(np.int64), k - 1)
    v = sign * (host - raw - ref_off).astype(np.float64)
    best = np.full(k, -np.inf)
    np.maximum.at(best, b, v)
    cand = np.flatnonzero(v == best[b])
    filled, first = np.unique(b[cand], return_index=True)
    top = np.full(k, -1, np.int64)
    top[filled] = cand[first]
    return top


@numba.njit(cache=True)
def _survivors_nb(raw, host, raw_min, scale, ref_raw, ref_off, sign, k, hu, hv, hs, hb):
    """Indices of points not strictly below the coarse hull (hu, hv), with
    edge slopes hs and vertices in buckets hb."""
    m = len(hu)
    # first[b]: last vertex in a bucket before b (a start for the walk)
    first = np.zeros(k + 1, np.int64)
    for j in range(m):
        first[hb[j] + 1] += 1
    for b in range(k):
        first[b + 1] += first[b]
    keep = np.empty(len(raw), np.int64)
    n = 0
    j = 0
    for i in range(len(raw)):
        u = np.float64(raw[i] - ref_raw)
        v = sign * np.float64(host[i] - raw[i] - ref_off)
        if m < 2 or u < hu[0] or u > hu[m - 1]:
            keep[n] = i
            n += 1
            continue
        # j: the last vertex at or left of u (at most m − 2); events come
        # nearly in device-time order, so the previous point's j mostly fits
        if not (hu[j] <= u and (j == m - 2 or u < hu[j + 1])):
            b = min(int(np.float64(raw[i] - raw_min) * scale), k - 1)
            j = min(max(first[b] - 1, 0), m - 2)
            while j + 1 < m - 1 and hu[j + 1] <= u:
                j += 1
        val = hv[j] + hs[j] * (u - hu[j])
        if v >= val - _TOL:
            keep[n] = i
            n += 1
    return keep[:n]


def _survivors_np(raw, host, raw_min, scale, ref_raw, ref_off, sign, k, hu, hv, hs, hb):
    u = (raw - ref_raw).astype(np.float64)
    v = sign * (host - raw - ref_off).astype(np.float64)
    m = len(hu)
    if m < 2:
        return np.arange(len(raw), dtype=np.int64)
    j = np.clip(np.searchsorted(hu, u, side="right") - 1, 0, m - 2)
    val = hv[j] + hs[j] * (u - hu[j])
    return np.flatnonzero((u < hu[0]) | (u > hu[m - 1]) | (v >= val - _TOL))


@numba.njit(cache=True)
def _sorted_nb(u):
    return np.argsort(u, kind="mergesort")


def _sorted_np(u):
    return np.argsort(u, kind="mergesort")


_KERNELS = {"numba": (_tops_nb, _survivors_nb, _chain_nb, _sorted_nb),
            "numpy": (_tops_np, _survivors_np, _chain_np, _sorted_np)}


def upper_hull(raw: np.ndarray, host: np.ndarray, ref_raw: int, ref_off: int,
               sign: float, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Upper convex hull of the points (u, v) = (raw − ref_raw,
    sign·(host − raw − ref_off)) of int64 ns columns: vertex coordinates
    (u ascending), float64. ``sign=-1`` gives the lower hull, negated."""
    raw, host = readonly(raw), readonly(host)  # read-only: one compile of each kernel
    tops, survivors, chain, sort = _KERNELS[resolve_engine(backend, len(raw))]
    if not len(raw):
        return np.zeros(0), np.zeros(0)
    raw_min = np.int64(raw.min())
    k = _n_buckets(len(raw))
    scale = k / (float(raw.max() - raw_min) + 1.0)
    args = (raw, host, raw_min, scale, np.int64(ref_raw), np.int64(ref_off),
            float(sign))
    top = tops(*args, k)
    top = top[top >= 0]  # bucket order is device-time order
    cu = (raw[top] - ref_raw).astype(np.float64)
    cv = sign * (host[top] - raw[top] - ref_off).astype(np.float64)
    coarse = chain(cu, cv, np.arange(len(top), dtype=np.int64))
    cb = np.minimum(((raw[top[coarse]] - raw_min).astype(np.float64) * scale)
                    .astype(np.int64), k - 1)
    hu, hv = cu[coarse], cv[coarse]
    keep = survivors(*args, k, hu, hv, np.diff(hv) / np.diff(hu), cb)
    su = (raw[keep] - ref_raw).astype(np.float64)
    sv = sign * (host[keep] - raw[keep] - ref_off).astype(np.float64)
    hull = chain(su, sv, sort(su))
    return su[hull], sv[hull]


# -- aligned event times, clamped into their bounds --------------------------------

@numba.njit(cache=True)
def _host_times_nb(raw, device, stream, floor_ns, ref_raw, offset, slope,
                   last, sy_device, end, sy_pair, pair_device, pair_stream):
    """One backwards pass: the earliest host_end of the syncs covering each
    event (those with last event ≥ it on its device, or on its (device,
    stream) pair; pairs sorted by stream) caps the event's line time."""
    out = np.empty(len(raw), np.int64)
    dev_min = np.full(len(ref_raw), _NO_DEADLINE, np.int64)
    pair_min = np.full(len(pair_device), _NO_DEADLINE, np.int64)
    order = np.argsort(-last, kind="mergesort")  # newest last event first
    q = 0
    for e in range(len(raw) - 1, -1, -1):
        while q < len(order) and last[order[q]] >= e:
            s = order[q]
            if sy_pair[s] < 0:
                dev_min[sy_device[s]] = min(dev_min[sy_device[s]], end[s])
            else:
                pair_min[sy_pair[s]] = min(pair_min[sy_pair[s]], end[s])
            q += 1
        d = device[e]
        ceil = dev_min[d]
        if len(pair_stream):
            j = np.searchsorted(pair_stream, stream[e])
            while j < len(pair_stream) and pair_stream[j] == stream[e]:
                if pair_device[j] == d:
                    ceil = min(ceil, pair_min[j])
                j += 1
        u = np.float64(raw[e] - ref_raw[d])
        h = offset[d] + np.int64(np.floor(slope[d] * u + 0.5))
        out[e] = min(max(h, floor_ns[e]), ceil)
    return out


def _host_times_np(raw, device, stream, floor_ns, ref_raw, offset, slope,
                   last, sy_device, end, sy_pair, pair_device, pair_stream):
    ceil = _deadlines_np(device, stream, last, sy_device, end, sy_pair,
                         pair_device, pair_stream, len(ref_raw))
    u = (raw - ref_raw[device]).astype(np.float64)
    h = offset[device] + np.floor(slope[device] * u + 0.5).astype(np.int64)
    return np.minimum(np.maximum(h, floor_ns), ceil)


def _deadlines_np(device, stream, last, sy_device, end, sy_pair,
                  pair_device, pair_stream, n_dev):
    n = len(device)
    out = np.full(n, _NO_DEADLINE, np.int64)
    groups = [(device == d, (sy_pair < 0) & (sy_device == d)) for d in range(n_dev)]
    groups += [((device == pd) & (stream == ps), sy_pair == j)
               for j, (pd, ps) in enumerate(zip(pair_device, pair_stream))]
    for on, mine in groups:
        if not mine.any():
            continue
        at = np.full(n, _NO_DEADLINE, np.int64)
        np.minimum.at(at, last[mine], end[mine])
        suffix = np.minimum.accumulate(at[::-1])[::-1]
        out[on] = np.minimum(out[on], suffix[on])
    return out


def _sync_args(last, sy_device, sy_stream, end):
    """Syncs that cover something, with stream syncs numbered by their
    (device, stream) pair, pairs sorted by stream."""
    use = last >= 0
    last, sy_device = last[use].astype(np.int64), sy_device[use].astype(np.int64)
    sy_stream, end = sy_stream[use].astype(np.int64), end[use].astype(np.int64)
    on_stream = sy_stream >= 0
    pairs = np.unique(np.stack([sy_stream[on_stream], sy_device[on_stream]]), axis=1) \
        if on_stream.any() else np.zeros((2, 0), np.int64)
    pair_stream, pair_device = pairs[0].copy(), pairs[1].copy()
    sy_pair = np.full(len(last), -1, np.int64)
    for j in range(pairs.shape[1]):
        sy_pair[on_stream & (sy_stream == pair_stream[j]) &
                (sy_device == pair_device[j])] = j
    return last, sy_device, end, sy_pair, pair_device, pair_stream


def deadlines(device: np.ndarray, stream: np.ndarray, last: np.ndarray,
              sy_device: np.ndarray, sy_stream: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event, the earliest ``host_end_ns`` of a sync covering it (int64
    max where none does): a sync with ``last`` ≥ 0 covers the events up to
    ``last`` on its device (``sy_stream`` NONE) or on its stream. NumPy."""
    n_dev = int(max(np.max(device, initial=-1), np.max(sy_device, initial=-1))) + 1
    return _deadlines_np(np.asarray(device), np.asarray(stream),
                         *_sync_args(last, sy_device, sy_stream, end), n_dev)


def host_times(raw: np.ndarray, device: np.ndarray, stream: np.ndarray,
               floor_ns: np.ndarray, ref_raw: np.ndarray, offset: np.ndarray,
               slope: np.ndarray, last: np.ndarray, sy_device: np.ndarray,
               sy_stream: np.ndarray, end: np.ndarray,
               backend: str = "auto") -> np.ndarray:
    """Host time (int64 ns) of each raw reading through its device's line
    ``offset + slope·(raw − ref_raw)`` (arrays indexed by device id),
    clamped into [floor_ns, earliest host_end of a covering sync] (the
    syncs given by last event, device, stream, host_end; see ``deadlines``)."""
    compiled = resolve_engine(backend, len(raw)) == "numba"
    fn = _host_times_nb if compiled else _host_times_np
    return fn(readonly(raw), readonly(device), readonly(stream), readonly(floor_ns), readonly(ref_raw),
              readonly(offset), readonly(slope, np.float64),
              *(readonly(a) for a in _sync_args(last, sy_device, sy_stream, end)))
