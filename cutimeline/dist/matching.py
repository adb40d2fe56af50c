"""Collectives matched across ranks: each rank's collective rows, the
instance each belongs to, and what its arrival and completion prove.

A collective *instance* is the k-th collective of a process group (p2p:
the k-th message from one rank to another); each rank that recorded it
has one row (the Timeline's ``collectives`` table, from the recorder's
``CollectiveLog``). Its *arrival* on a rank is the host begin of its op
there (when the rank called it), its *completion* the ``done_ns`` the
recorder measured.

Which ranks must have arrived before which may complete (``roles``):
all-to-all kinds (all_reduce, all_gather, reduce_scatter, all_to_all,
barrier) — every rank's completion follows every rank's arrival; a
broadcast or scatter completes nowhere before its root arrived; a reduce
or gather completes at its root only after every rank arrived; a receive
completes after its send began. Each such fact ``done_a ≥ arrival_b``,
in true time, bounds the offset between the clocks of ranks a and b;
``rankclock.fit_rank_clocks`` turns them into one clock line per rank.
"""

from __future__ import annotations

import numpy as np

from ..timeline.collectives import ALL, FROM_ROOT, RECV, SEND, TO_ROOT
from ..timeline.ranks import rank_of_thread
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline

__all__ = ["roles", "collective_rows"]


def collective_rows(items: list[tuple[int, Timeline]],
                    groups: dict[tuple, int]) -> dict[str, np.ndarray]:
    """The collective rows of Timelines (``rank``: a single rank's; a
    merged Timeline's rows are on their op's thread's rank), with their ops
    row and times; groups numbered across the Timelines in ``groups``."""
    out: dict[str, list] = {k: [] for k in ("rank", "group", "kind", "number", "peer",
                                            "done", "arrival", "op")}
    for rank, tl in items:
        c = tl.collectives
        keep = np.flatnonzero(c.op != NONE)  # none in a checked Timeline
        if not len(keep):
            continue
        g_lut = np.array([groups.setdefault((g["name"], tuple(g["ranks"])), len(groups))
                          for g in tl.meta.get("groups") or []] + [NONE], np.int64)
        op = c.op[keep]
        g = c.group[keep].astype(np.int64)
        out["group"].append(g_lut[np.where((g >= 0) & (g < len(g_lut) - 1), g, -1)])
        out["rank"].append(rank_of_thread(tl)[tl.ops.thread[op]] if "thread_rank" in tl.meta
                           else np.full(len(op), rank, np.int64))
        for col, src in (("kind", "kind"), ("number", "number"), ("peer", "peer"),
                         ("done", "done_ns")):
            out[col].append(c[src][keep].astype(np.int64))
        out["op"].append(op)
        out["arrival"].append(tl.ops.host_begin_ns[op])
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}


def roles(r: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(instance id per row, joins: the instance waits for this row's
    arrival, finishes: this row's completion follows those arrivals).
    Rows that cannot be matched (no group or number) get instance NONE."""
    kind, rank, peer = r["kind"], r["rank"], r["peer"]
    p2p = (kind == SEND) | (kind == RECV)
    src = np.where(kind == SEND, rank, np.where(kind == RECV, peer, NONE))
    dst = np.where(kind == SEND, peer, np.where(kind == RECV, rank, NONE))
    ok = (r["group"] != NONE) & (r["number"] != NONE) & (~p2p | (peer != NONE))
    inst = np.full(len(kind), NONE, np.int64)
    if ok.any():
        key = np.stack([r["group"], r["number"], src, dst], 1)[ok]
        _, inv = np.unique(key, axis=0, return_inverse=True)
        inst[ok] = inv.reshape(-1)
    joins = (kind == ALL) | (kind == TO_ROOT) | (kind == SEND) | \
        ((kind == FROM_ROOT) & (rank == peer))
    finishes = (kind == ALL) | (kind == FROM_ROOT) | (kind == RECV) | \
        ((kind == TO_ROOT) & (rank == peer))
    return inst, joins & ok, finishes & ok
