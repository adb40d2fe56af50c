"""The collectives table's words, and the collectives of files of formats 1–4.

Since file format 5 the collectives a rank recorded are a table of the
Timeline, ``collectives`` (``schema.SCHEMA``: one row per torch.distributed
collective, by its op's row, with its process group, kind, number, peer
and completion), written by ``recording/`` (``recording/measures/collectives.py``
logs them, ``recording/assembly.py`` makes the table) and ``dist/merger.py``,
and read across ranks by ``dist/`` (matching, clocks, stragglers). Their kinds are
``schema.CollectiveKind``, by what completing one proves
(``dist/matching.py``'s roles); ``KINDS`` names them as they read, ``ALL``
... ``WAIT`` are their codes. Declared here, below both ``recording/`` and
``dist/``, so that neither imports the other's definitions.

Files of formats 1–4 kept the collectives in ``meta["collectives"]``: an
object of equally long integer lists ``META_COLUMNS``, keyed by the op's
``ops.seq`` (a merged run's with a ``rank`` list too). ``from_meta`` makes
the table of such a file as it loads (``ctlfile/fileformat.py``), and the
loaded Timeline has no such key: one place for the collectives, so no
reader can see one spelling and miss the other (``metakeys.RETIRED``:
a Timeline made or loaded with the key is refused with a sentence).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CutimelineError
from .schema import MAX_RANKS, NONE, SCHEMA, CollectiveKind

__all__ = ["KINDS", "ALL", "FROM_ROOT", "TO_ROOT", "SEND", "RECV", "WAIT", "COLUMNS",
           "META_COLUMNS", "from_meta"]

#: the ``kind`` column's codes: all ranks take part; data from the root;
#: data to the root; a send; a receive; a functional collective's wait
KINDS = tuple(k.name.lower() for k in CollectiveKind)
ALL, FROM_ROOT, TO_ROOT, SEND, RECV, WAIT = (int(k) for k in CollectiveKind)
#: the table's columns (``schema.SCHEMA["collectives"]``)
COLUMNS = tuple(c for c, _ in SCHEMA["collectives"])
#: ``meta["collectives"]``'s lists in files of formats 1–4: the op's
#: ``ops.seq``, then the table's other columns; a merged run's had ``rank``
META_COLUMNS = ("seq", "group", "kind", "number", "peer", "done_ns")


def from_meta(value: Any, ops: Any, meta: Mapping[str, Any], source: str,
              version: int) -> dict[str, np.ndarray]:
    """The collectives table's columns from ``value``, the
    ``meta["collectives"]`` of a file (``source``) of format ``version``
    (before 5), whose ops table is ``ops``. Entries whose op the file does
    not hold (a slice's, or past ``max_ops``) are left out: nothing reads
    a collective without its op, whose begin is its arrival. A value that
    is not what those formats wrote raises CutimelineError."""
    cols = _columns(value, source, version)
    seq = cols["seq"]
    op = _row_of_seq(np.asarray(ops["seq"], np.int64), seq)
    keep = np.flatnonzero(op != NONE)
    keep = keep[np.argsort(op[keep], kind="stable")]
    if "rank" in cols:
        _same_ranks(cols["rank"][keep], op[keep], ops, meta, source)
    out = {"op": op[keep]}
    out.update({c: cols[c][keep] for c in META_COLUMNS[1:]})
    return out


def _columns(value: Any, source: str, version: int) -> dict[str, np.ndarray]:
    """``value``'s lists as int64 columns, checked as format 4 declared them."""
    def ints(x: list, lo: int, hi: int) -> bool:
        return all(type(v) is int and lo <= v <= hi for v in x)
    lists = value if isinstance(value, dict) else {}
    names = META_COLUMNS + (("rank",) if "rank" in lists else ())
    limits = {"kind": (0, len(KINDS) - 1), "peer": (NONE, MAX_RANKS - 1),
              "rank": (NONE, MAX_RANKS - 1), "group": (NONE, 2 ** 31 - 1)}
    good = all(isinstance(lists.get(c), list) for c in names) and \
        len({len(lists[c]) for c in names}) == 1 and \
        all(ints(lists[c], *limits.get(c, (-2 ** 63, 2 ** 63 - 1))) for c in names)
    if not good:
        text = json.dumps(value, default=lambda v: type(v).__name__)
        text = text if len(text) <= 60 else text[:57] + "..."
        raise CutimelineError(
            f"{source}: its meta['collectives'] (where files of format {version} keep "
            f"the collectives) is {text}, not an object of equally long lists of "
            f"integers {', '.join(META_COLUMNS)} (kind 0 to {len(KINDS) - 1}, peer a "
            f"rank or -1), so its collectives cannot be read; the file is damaged: "
            f"record the run again, or remove the key to load it without them.")
    return {c: np.array(lists[c], np.int64) for c in names}


def _same_ranks(rank: np.ndarray, op: np.ndarray, ops: Any, meta: Mapping[str, Any],
                source: str) -> None:
    """A merged file's collectives are on the rank their op's thread is
    (the table keeps no rank: it is the op's thread's)."""
    lut = meta.get("thread_rank")
    if not isinstance(lut, list) or not len(op):
        return
    thread = np.asarray(ops["thread"], np.int64)[op]
    known = (thread >= 0) & (thread < len(lut))
    theirs = np.full(len(op), NONE, np.int64)
    theirs[known] = [lut[t] if type(lut[t]) is int else NONE for t in thread[known]]
    bad = known & (theirs != rank)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CutimelineError(
            f"{source}: its meta['collectives'] puts the collective of ops row {op[i]} on "
            f"rank {rank[i]}, but that op's thread is rank {theirs[i]}'s "
            f"(meta['thread_rank']); the file is damaged: merge the rank files again.")


def _row_of_seq(seq: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Rows of ``seq`` holding the values ``wanted``; NONE where none does."""
    if not len(seq):
        return np.full(len(wanted), NONE, np.int64)
    order = None
    if np.any(seq[1:] < seq[:-1]):  # ops are in seq order unless built by hand
        order = np.argsort(seq, kind="stable")
        seq = seq[order]
    i = np.minimum(np.searchsorted(seq, wanted), len(seq) - 1)
    hit = seq[i] == wanted
    return np.where(hit, i if order is None else order[i], NONE)

