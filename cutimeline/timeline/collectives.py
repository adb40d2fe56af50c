"""What ``meta["collectives"]`` holds: one entry per torch.distributed
collective a rank recorded, as equal-length lists (``COLUMNS``), written
by ``recording/measures/collectives.py`` and read across ranks by
``dist/`` (matching, clocks, stragglers); the kinds of collective by what
completing one proves (``dist/matching.py``'s roles). Declared here, below
both, so that neither imports the other's definitions; the meta key itself
is declared in ``metakeys.py``."""

from __future__ import annotations

__all__ = ["KINDS", "ALL", "FROM_ROOT", "TO_ROOT", "SEND", "RECV", "WAIT", "COLUMNS",
           "MERGED_COLUMNS"]

#: the ``kind`` column's codes: all ranks take part; data from the root;
#: data to the root; a send; a receive; a functional collective's wait
KINDS = ("all", "from_root", "to_root", "send", "recv", "wait")
ALL, FROM_ROOT, TO_ROOT, SEND, RECV, WAIT = range(6)
#: a rank's columns: the op's ``ops.seq``, the index into ``meta["groups"]``,
#: ``KINDS`` code, the count on its group, the root's or peer's global rank
#: (NONE: none or unknown), the host time it had completed by (NONE: unknown)
COLUMNS = ("seq", "group", "kind", "number", "peer", "done_ns")
#: a merged Timeline's: the rank's too
MERGED_COLUMNS = ("rank", *COLUMNS)
