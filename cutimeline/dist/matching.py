"""Collectives matched across ranks: each rank's collective rows, the
instance each belongs to, and what its arrival and completion prove.

A collective *instance* is the k-th collective of a process group (p2p:
the k-th message from one rank to another); each rank that recorded it
has one row (``meta["collectives"]``, kept by the recorder's
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
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline

__all__ = ["roles", "collective_rows"]


def collective_rows(items: list[tuple[int, Timeline]],
                    groups: dict[tuple, int]) -> dict[str, np.ndarray]:
    """The collective rows of Timelines (single ranks or merged), with their
    ops row (NONE where the op is not in the Timeline) and times."""
    out: dict[str, list] = {k: [] for k in ("rank", "group", "kind", "number", "peer",
                                            "done", "arrival", "op")}
    for rank, tl in items:
        c = tl.meta.get("collectives") or {}
        if not len(c.get("seq", ())):
            continue
        g_lut = np.array([groups.setdefault((g["name"], tuple(g["ranks"])), len(groups))
                          for g in tl.meta.get("groups") or []] + [NONE], np.int64)
        seq = np.asarray(c["seq"], np.int64)
        row = _row_of_seq(tl.ops.seq, seq)
        keep = row != NONE
        g = np.asarray(c["group"], np.int64)
        out["group"].append(g_lut[np.where((g >= 0) & (g < len(g_lut) - 1), g, -1)][keep])
        r = np.asarray(c["rank"], np.int64) if "rank" in c else np.full(len(seq), rank)
        out["rank"].append(r[keep])
        for col, src in (("kind", "kind"), ("number", "number"), ("peer", "peer"),
                         ("done", "done_ns")):
            out[col].append(np.asarray(c[src], np.int64)[keep])
        out["op"].append(row[keep])
        out["arrival"].append(tl.ops.host_begin_ns[row[keep]])
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}


def _row_of_seq(seq: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Rows of ``seq`` holding the values ``wanted``; NONE where none does
    (a collective whose op a slice left out)."""
    if not len(seq):
        return np.full(len(wanted), NONE, np.int64)
    order = None
    if np.any(seq[1:] < seq[:-1]):  # ops are in seq order unless built by hand
        order = np.argsort(seq, kind="stable")
        seq = seq[order]
    i = np.minimum(np.searchsorted(seq, wanted), len(seq) - 1)
    hit = seq[i] == wanted
    return np.where(hit, i if order is None else order[i], NONE)


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
