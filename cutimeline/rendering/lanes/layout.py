"""Which lane each row of a Timeline is drawn on, and what the lanes are called.

Top to bottom (y = lane index; the plot's y axis is inverted): a row of host
spans, one lane per CPU thread that dispatched ops, one lane per GPU stream,
grouped by device. A merged Timeline of several ranks (``ctl.merge``) gets
that arrangement once per rank, ranks in order, each lane's label prefixed
with its rank, so a rank's spans, threads and streams sit together.

Lanes are bounded like the GPU rows of a dense window are (``overview.py``):
past ``THREAD_LANES`` threads or ``STREAM_LANES`` streams in a rank, the
busiest keep their lanes and the rest share one more lane ("CPU: 2,984
more threads"), drawn with their work merged and no idle shading, so a
figure's height stays bounded whatever the Timeline holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...timeline.ranks import rank_of_device, rank_of_thread
from ...timeline.timeline import Timeline

__all__ = ["Layout", "lay_out", "thread_label", "THREAD_LANES", "STREAM_LANES"]

#: thread and stream lanes per rank before the rest share one lane: 48
#: lanes at 0.42 in each is a figure some 2,000 px tall
THREAD_LANES = 16
STREAM_LANES = 32


@dataclass
class Layout:
    labels: list[str]
    threads: np.ndarray        # thread ids with a lane, sorted
    thread_y: np.ndarray       # lane of each of ``threads``
    stream_y: np.ndarray       # lane of each stream group (``keys`` row)
    span_rows: list[tuple[int, int | None]]  # (lane, rank or None: every rank)
    groups: list[tuple[int, int]] = field(default_factory=list)  # rank lanes [a, b)
    host_gpu: list[float] = field(default_factory=list)   # host/GPU boundaries
    devices: list[float] = field(default_factory=list)    # device boundaries
    thread_rank: np.ndarray | None = None   # rank of each thread id, if grouped
    folded: np.ndarray | None = None   # per stream group: on a shared "more streams" lane


def lay_out(tl: Timeline, keys: np.ndarray, stream_of: np.ndarray | None = None) -> Layout:
    """Lanes for ``tl``; ``keys``: (device, stream) of each stream group,
    ``stream_of``: the group of each gpu row (which streams are busiest)."""
    threads = np.unique(tl.ops.thread)
    t_rank = _lut(rank_of_thread(tl), max(_top(threads), _top(tl.spans.thread)))
    d_rank = _lut(rank_of_device(tl), _top(keys[:, 0]) if len(keys) else 0)
    span_rank = t_rank[tl.spans.thread] if len(tl.spans) else np.zeros(0, np.int64)
    ranks = np.unique(np.concatenate([t_rank[threads], d_rank[keys[:, 0]],
                                      span_rank]).astype(np.int64))
    grouped = len(ranks) > 1
    order = np.lexsort((keys[:, 1], keys[:, 0])) if len(keys) else np.zeros(0, np.int64)
    lay = Layout([], threads, np.empty(len(threads), np.int64),
                 np.empty(len(keys), np.int64), [],
                 thread_rank=t_rank if grouped else None, folded=np.zeros(len(keys), bool))
    ops_of = np.bincount(np.searchsorted(threads, tl.ops.thread), minlength=len(threads))
    rows_of = np.bincount(stream_of, minlength=len(keys)) if stream_of is not None else \
        np.zeros(len(keys), np.int64)
    for r in ranks if grouped else [None]:
        first = len(lay.labels)
        prefix = f"rank {r} · " if grouped else ""
        if len(tl.spans) and (r is None or (span_rank == r).any()):
            lay.span_rows.append((len(lay.labels), None if r is None else int(r)))
            lay.labels.append(prefix + "host spans")
        mine = np.flatnonzero(t_rank[threads] == r) if grouped else np.arange(len(threads))
        shown, rest = _fold(mine, ops_of[mine], THREAD_LANES)
        lay.thread_y[shown] = len(lay.labels) + np.arange(len(shown))
        lay.labels += [prefix + thread_label(tl, int(threads[i]), prefix) for i in shown]
        if len(rest):
            lay.thread_y[rest] = len(lay.labels)
            lay.labels.append(f"{prefix}CPU: {len(rest):,} more threads")
        k = order[d_rank[keys[order, 0]] == r] if grouped else order
        if len(k) and len(lay.labels) > first:
            lay.host_gpu.append(len(lay.labels) - 0.5)
        k, rest = _fold(k, rows_of[k], STREAM_LANES)
        dev = keys[k, 0]
        lay.devices += (len(lay.labels) + np.flatnonzero(dev[1:] != dev[:-1]) + 0.5).tolist()
        lay.stream_y[k] = len(lay.labels) + np.arange(len(k))
        lay.labels += [f"{prefix}GPU{keys[i, 0]} stream {keys[i, 1]}" for i in k]
        if len(rest):
            lay.stream_y[rest] = len(lay.labels)
            lay.folded[rest] = True
            lay.labels.append(f"{prefix}GPU: {len(rest):,} more streams")
        lay.groups.append((first, len(lay.labels)))
    return lay


def _fold(ids: np.ndarray, weight: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """(shown, rest) of ``ids`` (in their order): all shown when they are
    ``most`` or fewer, else the ``most - 1`` of largest ``weight`` (ties:
    the first) shown and the rest on one shared lane."""
    if len(ids) <= most:
        return ids, ids[:0]
    top = np.sort(np.argsort(-weight, kind="stable")[:most - 1])
    keep = np.zeros(len(ids), bool)
    keep[top] = True
    return ids[keep], ids[~keep]


def _top(ids: np.ndarray) -> int:
    return int(ids.max()) + 1 if len(ids) else 0


def _lut(lut: np.ndarray, n: int) -> np.ndarray:
    """``lut`` long enough to index ids below ``n`` (missing ones rank 0)."""
    if len(lut) >= n:
        return lut
    return np.concatenate([lut, np.zeros(n - len(lut), np.int64)])


def thread_label(tl: Timeline, t: int, strip: str = "") -> str:
    """"CPU thread 0 (MainThread)": meta["threads"] lists names (recorder)
    or {"name": ...} dicts (Kineto import, "thread 2910249 (pt_main)");
    ``strip``: a prefix to drop from the name (merge names threads
    "rank 1 · MainThread", and the lane label says the rank already)."""
    names = tl.meta.get("threads") or []
    name = None
    if 0 <= t < len(names):
        name = names[t].get("name") if isinstance(names[t], dict) else names[t]
    if not name:
        return f"CPU thread {t}"
    name = str(name)
    if strip and name.startswith(strip):
        name = name[len(strip):]
    if name.startswith("thread "):
        return "CPU " + name
    return f"CPU thread {t} ({name})"
