"""The device side of a Kineto import: GPU rows and syncs as Timeline
columns, linked to their ops, and the op flags that work implies.
"""

from __future__ import annotations

import numpy as np

from ...timeline.schema import NONE, GpuKind, OpFlag
from ...timeline.table import Strings
from .schema import (DEVICES, GPU_CATEGORIES, KIND_ARG, NO_STREAM, NON_BLOCKING_SYNCS,
                     RUNTIME_SYNCS, STREAMS, SYNC_STREAM_ARG, gpu_stream, int_arg)

__all__ = ["read_gpu", "read_syncs", "runtime_syncs", "flag_ops"]


def read_gpu(gpu_ev: dict, links: dict, strings: Strings, warnings: list[str],
         name: str, ours: bool) -> dict:
    """One gpu row per kernel/memcpy/memset, in begin order (export_chrome's
    files keep theirs)."""
    args = gpu_ev["args"]
    n = len(args)
    intern = strings.intern
    kinds = {k.name.lower(): int(k) for k in GpuKind}
    kind = np.empty(n, np.uint8)
    for i, (nm, cat, a) in enumerate(zip(gpu_ev["name"], gpu_ev["cat"], args)):
        given = a.get(KIND_ARG)
        k = kinds.get(given, GPU_CATEGORIES[cat]) if type(given) is str else GPU_CATEGORIES[cat]
        if k == GpuKind.KERNEL and "nccl" in nm.lower():
            k = GpuKind.COLLECTIVE   # NCCL (and RCCL) communication kernels
        kind[i] = k
    link = [links.get(c, (NONE, NONE)) for c in gpu_ev["corr"]]
    op = np.array([lk[0] for lk in link], np.int64)
    unlinked = int(sum(lk == (NONE, NONE) for lk in link))
    if unlinked:
        warnings.append(
            f"{unlinked} of {n} GPU rows in {name} have no launch call in the "
            f"trace (most likely launched before the profiler started), so "
            f"their op is NONE.")
    rows = {"op": op, "launch_ns": np.array([lk[1] for lk in link], np.int64),
            "device": _devices(args, gpu_ev["pid"], 0, warnings, "GPU rows", name),
            "stream": np.array([gpu_stream(a.get("stream"), t)
                                for a, t in zip(args, gpu_ev["tid"])], np.int64),
            "name": np.array([intern(s) for s in gpu_ev["name"]], np.int32),
            "kind": kind, "begin_ns": gpu_ev["begin"], "end_ns": gpu_ev["end"]}
    if ours:   # correlation ids are row numbers + 1 there
        order = np.argsort(np.array([int_arg(c, 0) for c in gpu_ev["corr"]], np.int64),
                           kind="stable")
    else:
        order = np.lexsort((rows["stream"], rows["device"], rows["begin_ns"]))
    return {k: v[order] for k, v in rows.items()}


def _devices(args: list[dict], pids: list, default: int, warnings: list[str],
             what: str, name: str, unknown: bool = False) -> np.ndarray:
    """Each event's ``args.device``, else its pid, else ``default``; a
    device arg that is no int in ``DEVICES`` is noted in ``warnings`` and
    not used. ``unknown``: a device of NONE (-1) stands for "not known" (a
    sync read from a runtime call, as export_chrome writes it) and is kept."""
    given = [a.get("device") for a in args]
    dev = [int_arg(d, NONE, DEVICES) for d in given]
    if unknown and NONE in given:
        keep = [d == NONE and type(d) is int for d in given]
        return np.where(keep, NONE, _devices(
            [{} if k else a for k, a in zip(keep, args)], pids, default, warnings, what,
            name)).astype(np.int64)
    bad = sum(v == NONE and d is not None for v, d in zip(dev, given))
    if bad:
        warnings.append(f"{bad} {what} in {name} have a 'device' that is no integer "
                        f"in {DEVICES[0]}..{DEVICES[1]}; their device is read from "
                        f"their pid.")
    return np.array([v if v != NONE else int_arg(p, default, DEVICES)
                     for v, p in zip(dev, pids)], np.int64)


def read_syncs(sync_ev: dict, links: dict, strings: Strings, ours: bool,
           warnings: list[str], name: str) -> dict:
    """One syncs row per cuda_sync event; kind is its name ("Stream Sync")."""
    args = sync_ev["args"]
    stream = np.array([int_arg(a.get(SYNC_STREAM_ARG, a.get("stream")), NONE, STREAMS)
                       for a in args], np.int64)
    rows = {"op": np.array([links.get(c, (NONE,))[0] for c in sync_ev["corr"]], np.int64),
            "kind": np.array([strings.intern(s) for s in sync_ev["name"]], np.int32),
            "device": _devices(args, sync_ev["pid"], NONE, warnings, "syncs", name, True),
            "stream": np.where(np.isin(stream, NO_STREAM), NONE, stream),
            "host_begin_ns": sync_ev["begin"], "host_end_ns": sync_ev["end"]}
    order = np.arange(len(args)) if ours else np.argsort(rows["host_begin_ns"],
                                                          kind="stable")
    return {k: v[order] for k, v in rows.items()}


def runtime_syncs(launch_ev: dict, sync_corr: list) -> dict:
    """cuda_sync-shaped columns for the host-blocking runtime calls
    (``RUNTIME_SYNCS``) that no cuda_sync event of ``sync_corr`` stands for:
    name is the sync kind, times the call's (the host waited that long).
    Their device and stream are unknown (a runtime call names neither), so
    a sync covers all streams: pid None reads as device NONE."""
    names = launch_ev["name"]
    if RUNTIME_SYNCS.keys().isdisjoint(names):
        return {k: v[:0] for k, v in launch_ev.items()}
    known = set(sync_corr)
    corr = launch_ev["corr"]
    rows = [i for i, (nm, c) in enumerate(zip(names, corr))
            if nm in RUNTIME_SYNCS and c is not None and c not in known]
    return {"name": [RUNTIME_SYNCS[names[i]] for i in rows], "cat": ["cuda_sync"] * len(rows),
            "args": [{} for _ in rows], "pid": [None] * len(rows),
            "tid": [launch_ev["tid"][i] for i in rows],
            "begin": launch_ev["begin"][rows], "end": launch_ev["end"][rows],
            "corr": [corr[i] for i in rows]}


def flag_ops(ops: dict, gpu: dict, syncs: dict, strings: Strings) -> None:
    """LAUNCH (and device, stream of the first work), COLLECTIVE and SYNC."""
    flags = ops["flags"]
    linked = gpu["op"] >= 0
    op, first = np.unique(gpu["op"][linked], return_index=True)
    flags[op] |= int(OpFlag.LAUNCH)
    ops["device"][op] = gpu["device"][linked][first]
    ops["stream"][op] = gpu["stream"][linked][first]
    coll = gpu["op"][linked & (gpu["kind"] == GpuKind.COLLECTIVE)]
    flags[coll] |= int(OpFlag.COLLECTIVE)
    waits = [strings.ids[s] for s in NON_BLOCKING_SYNCS if s in strings.ids]
    blocking = (syncs["op"] >= 0) & ~np.isin(syncs["kind"], waits)
    flags[syncs["op"][blocking]] |= int(OpFlag.SYNC)
