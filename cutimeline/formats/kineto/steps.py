"""Which ranges of a Kineto trace make its steps, in every trace generation.

torch.profiler marks each step with a ``ProfilerStep#N`` range when the
loop calls ``prof.step()``. The rule, first that applies:

1. a user's ``steps_from=NAME`` (``ctl.load``; ``--steps-from``): the
   ranges named NAME or NAME#... (``"Optimizer.step"`` takes
   ``Optimizer.step#AdamW.step``); given, it rules over ``ProfilerStep#N``
   too (those become user spans): the user chose it.
2. ``ProfilerStep#N`` ranges.
3. the optimizer's own ``Optimizer.step#<class>.step``, which torch
   writes around every ``optimizer.step()``: the outermost (an optimizer
   wrapping another writes two), of one name: where a loop steps
   optimizers of several classes in turn (Shampoo, then an EMA), the last
   of those stepped as often as the most stepped one, so that a step ends
   after its last optimizer.

A marker ends a step: step k runs from the end of marker k-1 (the first
from the trace's first host event) to the end of marker k, so every
moment up to the last marker belongs to one step, as in a recording
whose steps end at ``optimizer.step()``. Steps are numbered from 0, named
"step", on their marker's thread; meta ``steps_from`` (the marker as the
trace names it) and ``steps_rule`` ("ProfilerStep", "optimizer" or
"steps_from") say what made them. The first traces (torch 1.8-1.10)
write record_function ranges as ``Operator`` events; ``is_range`` tells
them from ops by name.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from ...errors import CutimelineError
from ...timeline.schema import NONE, SpanKind
from .schema import STEP_RE

__all__ = ["RANGE_PREFIXES", "OPTIMIZER_STEP", "is_range", "derive_steps"]

# record_function ranges torch itself writes, which older traces file as
# ops: the DataLoader's fetches and the optimizer's step and zero_grad.
RANGE_PREFIXES = ("enumerate(DataLoader)", "Optimizer.")
OPTIMIZER_STEP = re.compile(r"Optimizer\.step#.+\.step$")


def _named(name: str, marker: str) -> bool:
    return name == marker or name.startswith(marker + "#")


def is_range(names: list[str], steps_from: str | None = None) -> np.ndarray:
    """Mask over ``cpu_op`` event names: the record_function ranges among
    them (step markers, torch's own ranges, ranges named ``steps_from``)."""
    return np.array([STEP_RE.match(n) is not None or n.startswith(RANGE_PREFIXES)
                     or (steps_from is not None and _named(n, steps_from))
                     for n in names], bool)


def _outermost(rows: np.ndarray, ev: dict) -> np.ndarray:
    """The rows not inside another of ``rows`` on the same thread, by time."""
    rows = rows[np.lexsort((-(ev["end"][rows] - ev["begin"][rows]), ev["begin"][rows]))]
    keep, open_end = [], {}
    for r in rows.tolist():
        key = (ev["pid"][r], ev["tid"][r])
        if key in open_end and ev["end"][r] <= open_end[key]:
            continue   # nested in a kept one
        keep.append(r)
        open_end[key] = int(ev["end"][r])
    return np.array(keep, np.int64)


def _in_time_order(span_ev: dict, kinds: list, rows: np.ndarray,
                   file: str) -> tuple[list, dict]:
    """ProfilerStep#N numbers that repeat or run backwards in time (a trace
    joined from two profilers, a step counter reset): the steps numbered
    in time order from the first's number instead, and a warning naming
    them (``{"warnings": [...]}`` for the importer); as they are otherwise."""
    order = rows[np.argsort(span_ev["begin"][rows], kind="stable")]
    numbers = [kinds[r][1] for r in order.tolist()]
    if all(b > a for a, b in zip(numbers, numbers[1:])):
        return kinds, {}
    seen = Counter(numbers)
    twice = sorted(n for n, c in seen.items() if c > 1)
    back = [b for a, b in zip(numbers, numbers[1:]) if b < a]
    what = "; ".join(x for x in (
        f"ProfilerStep#{', #'.join(map(str, twice))} appear more than once" if twice else "",
        f"#{', #'.join(map(str, back))} begin after a later-numbered step" if back else "")
        if x)
    first = numbers[0]
    kinds = list(kinds)
    for k, r in enumerate(order.tolist()):
        kinds[r] = (kinds[r][0], first + k)
    return kinds, {"warnings": [
        f"{file}: its step markers are out of order ({what}): the {len(numbers)} steps "
        f"are numbered in time order, {first}–{first + len(numbers) - 1}."]}


def derive_steps(span_ev: dict, kinds: list[tuple[int, int]], start_ns: int,
                 steps_from: str | None, file: str) -> tuple[dict, list, dict]:
    """Steps by the rule of the module doc. ``span_ev``: the range events
    (columns of ``tracefile.columns``); ``kinds``: each one's (SpanKind,
    step number); ``start_ns``: the trace's first host event. Returns the
    events and kinds with the made steps appended (ProfilerStep ranges
    demoted to user spans when ``steps_from`` rules) and the meta entries."""
    names = span_ev["name"]
    step = np.array([k == SpanKind.STEP for k, _ in kinds], bool)
    if steps_from is None:
        if step.any():
            kinds, said = _in_time_order(span_ev, kinds, np.flatnonzero(step), file)
            return span_ev, kinds, {"steps_from": "ProfilerStep#N",
                                    "steps_rule": "ProfilerStep", **said}
        marks = np.flatnonzero([OPTIMIZER_STEP.match(n) is not None for n in names])
        if not len(marks):
            return span_ev, kinds, {}
        marks = _outermost(marks, span_ev)
        counts = Counter(names[r] for r in marks.tolist())   # in order of first use
        most = max(counts.values())
        last = [n for n, c in counts.items() if c == most][-1]
        marks = marks[[names[r] == last for r in marks.tolist()]]
        meta = {"steps_from": last, "steps_rule": "optimizer"}
    else:
        if not isinstance(steps_from, str) or not steps_from:
            raise CutimelineError(f"steps_from={steps_from!r} must name the ranges "
                                  f"that end each step, e.g. 'Optimizer.step' or "
                                  f"'train_step'.")
        marks = np.flatnonzero([_named(n, steps_from) for n in names])
        if not len(marks):
            common = Counter(n for n, (k, _) in zip(names, kinds) if k != SpanKind.STEP)
            have = ", ".join(repr(n) for n, _ in common.most_common(8)) or "none"
            raise CutimelineError(
                f"{file} has no range named {steps_from!r} (or {steps_from}#...) to "
                f"make steps from; its most common ranges are: {have}. Give one of "
                f"those as steps_from, or leave it out.")
        marks = _outermost(marks, span_ev)
        kinds = [(int(SpanKind.USER), NONE) if s else k for k, s in zip(kinds, step)]
        meta = {"steps_from": steps_from, "steps_rule": "steps_from"}
    marks = marks[np.argsort(span_ev["end"][marks], kind="stable")]
    end = span_ev["end"][marks]
    begin = np.minimum(np.concatenate([[start_ns], end[:-1]]), end)
    n = len(marks)
    idx = marks.tolist()
    made = {"name": ["step"] * n, "cat": ["user_annotation"] * n, "args": [{} for _ in idx],
            "pid": [span_ev["pid"][r] for r in idx], "tid": [span_ev["tid"][r] for r in idx],
            "begin": begin.astype(np.int64), "end": end.astype(np.int64)}
    out = {k: (np.concatenate([span_ev[k], made[k]]) if k in ("begin", "end")
               else list(span_ev[k]) + made[k]) for k in span_ev}
    return out, list(kinds) + [(int(SpanKind.STEP), k) for k in range(n)], meta
