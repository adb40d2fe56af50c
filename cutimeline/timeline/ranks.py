"""Ranks in a Timeline: which rank each row belongs to, and a rank's host clock moved.

A recording's rows are all its rank's (``meta["rank"]``); a merged
Timeline says which rank each thread and device came from in
``meta["thread_rank"]`` and ``meta["device_rank"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .schema import NONE
from .timeline import Timeline

__all__ = ["shift_host", "warp_host", "piecewise", "HOST_COLUMNS", "apply",
           "rank_of_thread", "rank_of_device"]


def _map_host(tl: Timeline, f: Any) -> tuple[dict, dict]:
    """(tables, meta) of ``tl`` with every host time ``t`` made ``f(t)``
    (NONE stays NONE): the HOST_COLUMNS (the collectives' completion times
    among them) and the overhead calibrations."""
    tables = {name: tl.table(name).replace(**{c: apply(f, tl.table(name)[c]) for c in cols})
              for name, cols in HOST_COLUMNS.items()}
    meta = dict(tl.meta)
    if meta.get("overhead_calibrations"):
        c = np.asarray(meta["overhead_calibrations"], np.int64).reshape(-1, 3)
        c[:, 0], c[:, 1] = f(c[:, 0]), f(c[:, 1])
        meta["overhead_calibrations"] = c.tolist()
    return tables, meta


def shift_host(tl: Timeline, ns: int, *, epoch: bool = False) -> Timeline:
    """``tl`` with every host time moved by ``ns`` (NONE stays NONE), and
    ``start_epoch_ns`` too with ``epoch=True``."""
    def f(t):
        return t + ns
    tables, meta = _map_host(tl, f)
    tables["clocks"] = tables["clocks"].replace(
        ping_offset_ns=apply(f, tl.clocks.ping_offset_ns))  # host − raw
    for key in ("start_host_ns",) + (("start_epoch_ns",) if epoch else ()):
        if isinstance(meta.get(key), int):
            meta[key] += ns
    return tl.replace(meta=meta, **tables)


def warp_host(tl: Timeline, real: np.ndarray, virtual: np.ndarray) -> Timeline:
    """``tl`` with every host time mapped through the piecewise-linear map
    with knots (real, virtual) (see ``piecewise``): a simulator's virtual
    host clock (``devices/sim/host.py``). Done before alignment, so there
    are no clock fits yet whose offsets a non-shift map would garble."""
    tables, meta = _map_host(tl, lambda t: piecewise(t, real, virtual))
    return tl.replace(meta=meta, **tables)


def piecewise(t: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``t`` mapped through the piecewise-linear map with knots (x, y), x
    non-decreasing; beyond the ends the map shifts by the end knots'
    difference. Integer ns in and out."""
    t = np.asarray(t, np.int64)
    if len(x) == 0 or len(t) == 0:
        return t.copy()
    i = np.searchsorted(x, t, side="right") - 1
    below, above = i < 0, i >= len(x) - 1
    j = np.clip(i, 0, max(len(x) - 2, 0))
    out = t + np.where(below, y[0] - x[0], y[-1] - x[-1])
    mid = ~below & ~above
    if mid.any():
        jm = j[mid]
        dx = (x[jm + 1] - x[jm]).astype(np.float64)
        dy = (y[jm + 1] - y[jm]).astype(np.float64)
        frac = np.where(dx > 0, (t[mid] - x[jm]) / np.where(dx > 0, dx, 1.0), 1.0)
        out[mid] = y[jm] + np.rint(frac * dy).astype(np.int64)
    return out


HOST_COLUMNS = {"ops": ("host_begin_ns", "host_end_ns"), "spans": ("begin_ns", "end_ns"),
                "syncs": ("host_begin_ns", "host_end_ns"),
                "gpu": ("launch_ns", "begin_ns", "end_ns"),
                "events": ("host_record_ns",), "clocks": ("offset_ns",),
                "truth": ("host_ns",), "memory": ("host_ns",), "collectives": ("done_ns",)}


def apply(f: Any, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.int64)
    out = f(a)
    return np.where(a == NONE, NONE, out) if len(a) and (a == NONE).any() else out


# -- rows of a merged Timeline ---------------------------------------------------

def rank_of_thread(tl: Timeline) -> np.ndarray:
    """The rank of each thread id (index) of ``tl``: from ``meta["thread_rank"]``
    in a merged Timeline, else every thread is ``meta["rank"]`` (0)."""
    lut = tl.meta.get("thread_rank")
    if lut is not None:
        return np.asarray(lut, np.int64)
    n = int(tl.ops.thread.max()) + 1 if len(tl.ops) else 0
    n = max(n, int(tl.spans.thread.max()) + 1 if len(tl.spans) else 0)
    return np.full(n, int(tl.meta.get("rank", 0)), np.int64)


def rank_of_device(tl: Timeline) -> np.ndarray:
    """The rank of each device index of ``tl`` (see ``rank_of_thread``)."""
    lut = tl.meta.get("device_rank")
    if lut is not None:
        return np.asarray(lut, np.int64)
    n = max([int(tl.table(t).device.max()) + 1 for t in ("gpu", "events", "clocks")
             if len(tl.table(t))] + [int(tl.ops.device.max()) + 1 if len(tl.ops) else 0])
    return np.full(max(n, 0), int(tl.meta.get("rank", 0)), np.int64)
