"""What a Timeline says about its own completeness and, merged, its ranks, as report lines.

``summary()`` shows these lines after its heading, read from meta alone:

* a recording cut at ``max_ops`` ("TRUNCATED: ..." with what reached it,
  ``meta["truncated_by"]``);
* a rank's file that an interruption or an exception ended early
  (``meta["partial"]``, ``meta["error"]``; ``recording/control/lifecycle.py``);
* a merged run (``ctl.merge``): how many of the world's ranks are present,
  and each missing, partial, errored or truncated one ("ranks: 3 of 4
  present; rank 2 missing; rank 1 partial (SIGTERM at step 7)");
* its straggler, per step and over the run, as ``merge`` measured it
  (``meta["stragglers"]``, from ``dist/straggler.py``; analysis reads the
  finding, it does not import the merge stage).

Meta comes from files: a value of the wrong type is read as absent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..text import fmt_ns, fmt_runs
from ..timeline.timeline import Timeline

__all__ = ["run_notes"]


def run_notes(tl: Timeline) -> list[str]:
    """The lines (see the module doc); none for a whole single recording."""
    meta = tl.meta
    ranks = [r for r in _list(meta.get("ranks")) if isinstance(r, dict)]
    lines = []
    if meta.get("truncated") is True:
        lines.append(_truncation(meta, ranks))
    if ranks:
        lines.append(_ranks(meta, ranks))
        lines += _straggler(meta.get("stragglers"))
    else:
        if _text(meta.get("partial")):
            lines.append(f"PARTIAL: the recording was cut short ({meta['partial']}); it "
                         f"holds what was recorded until then.")
        if _text(meta.get("error")):
            lines.append(f"the recorded block raised {meta['error']}; the recording "
                         f"ends there.")
    return lines


def _truncation(meta: dict, ranks: list[dict]) -> str:
    cut = [r for r in ranks if r.get("truncated") is True]
    if ranks:
        which = ", ".join(f"rank {r.get('rank')}" + _cut_by(r) for r in cut) or "a rank"
        return (f"TRUNCATED: {which} reached max_ops; nothing after that point of "
                f"that rank is in this Timeline (record with a larger max_ops).")
    return (f"TRUNCATED: the recording stopped at max_ops{_cut_by(meta)}; nothing "
            f"after that point is in it (record with a larger max_ops).")


def _cut_by(meta: dict) -> str:
    n, what = meta.get("max_ops"), meta.get("truncated_by")
    if _whole(n) and what in ("ops", "spans"):
        return f" ({n:,} {what})"
    return ""


def _ranks(meta: dict, ranks: list[dict]) -> str:
    present = sorted({r["rank"] for r in ranks if _whole(r.get("rank"))})
    world = meta.get("world_size")
    world = world if _whole(world) and world >= len(present) else len(present)
    parts = [f"ranks: {len(present)} of {world} present"]
    missing = [r for r in _list(meta.get("missing_ranks")) if _whole(r)]
    if missing:
        parts.append(f"rank{'s' * (len(missing) > 1)} {fmt_runs(sorted(missing))} missing")
    parts += [f"rank {r.get('rank')} partial ({r['partial']})" for r in ranks
              if _text(r.get("partial"))]
    parts += [f"rank {r.get('rank')} raised {r['error']}" for r in ranks
              if _text(r.get("error"))]
    parts += [f"rank {r.get('rank')} truncated at max_ops{_cut_by(r)}" for r in ranks
              if r.get("truncated") is True]
    return "; ".join(parts)


def _straggler(found: Any) -> list[str]:
    """The straggler line from ``meta["stragglers"]`` (columns step, rank,
    held_ns, last, collectives; step -1 the whole run; ``steps``: how
    many steps had collectives)."""
    if not isinstance(found, dict):
        return []
    try:
        cols = {k: np.asarray(found[k], np.int64) for k in
                ("step", "rank", "held_ns", "last", "collectives")}
        if len({len(v) for v in cols.values()}) != 1:
            return []
    except (KeyError, TypeError, ValueError, OverflowError):
        return []
    whole = cols["step"] < 0
    if not whole.any():
        return []
    i = int(np.flatnonzero(whole)[0])
    text = (f"straggler: rank {cols['rank'][i]} held the others up {fmt_ns(cols['held_ns'][i])} "
            f"in all, last to arrive at {cols['last'][i]} of {cols['collectives'][i]} "
            f"collectives")
    steps = found.get("steps")  # how many steps had collectives
    step, rank, held = cols["step"][~whole], cols["rank"][~whole], cols["held_ns"][~whole]
    per = []
    for r in dict.fromkeys(rank.tolist()):
        h, at = held[rank == r], step[rank == r]
        k = int(np.argmax(h))
        by = (f"by {fmt_ns(np.median(h))} median (max {fmt_ns(h[k])} at step {at[k]})"
              if len(h) > 1 else f"by {fmt_ns(h[k])} (step {at[k]})")
        of = f" of {steps}" if _whole(steps) and steps >= len(h) else ""
        per.append((len(h), f"rank {r} in {len(h)}{of} step{'s' * (len(h) > 1)}, {by}"))
    per.sort(key=lambda p: -p[0])  # stable: ties in the order they first led
    if per:
        text += "; slowest rank per step: " + "; ".join(p[1] for p in per[:3])
        if len(per) > 3:
            text += f"; {len(per) - 3} more"
    return [text]


def _list(x: Any) -> list:
    return x if isinstance(x, list) else []


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 63


def _text(x: Any) -> bool:
    return isinstance(x, str) and bool(x)
