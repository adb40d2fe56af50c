"""What-if edits: each fix a user could make, as a change of the replay's inputs.

The replay (``whatif.py`` over ``compensation.replay``) takes host time
removed (at points, and whole intervals), the syncs the host still waits
for and the gpu rows still launched. An edit says which of those change:

* ``recorder`` — the recorder's own host cost (``costs.py``), at points:
  today's overhead compensation;
* ``data`` — DataLoader fetches (DATA spans, and user spans naming a
  DataLoader, as ``gaps.host_activity`` finds them) take no host time, as
  when workers have the next batch ready;
* ``sync`` — host-blocking ops (flagged SYNC, and the syncs they made) are
  gone: their host time, their waits and their small read-back copies;
* ``host`` — op-free host stretches of at least ``host_gap_ns`` between
  the first and the last op (user Python, logging) take no time;
* ``launch`` — each device op's host time is halved (a faster
  dispatcher);
* ``graphs`` — each step's device ops cost what its first one did, the
  others nothing (CUDA graphs: one launch replays the step).

``changes`` turns an edit into ``Changes``, or None when the edit does not
apply to the Timeline (nothing to remove).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CutimelineError
from ..numeric import intervals as iv
from ..timeline.schema import NONE, OpFlag
from ..timeline.timeline import Timeline
from .costs import costs
from .gaps import HostActivity
from .steps import step_windows

__all__ = ["Edit", "EDITS", "Changes", "changes", "edit_named"]


@dataclass(frozen=True)
class Edit:
    """One fix: ``name`` (what ``Report.what_if(edit=...)`` takes),
    ``code`` (the change in the user's code), ``cause`` (the idle cause it
    addresses, "" for the recorder)."""
    name: str
    code: str
    cause: str


EDITS = {e.name: e for e in (
    Edit("data", "DataLoader(num_workers>=2, pin_memory=True): batches ready "
         "when the step asks", "data"),
    Edit("sync", "keep values on the GPU and read them once per step "
         "(no .item()/.cpu()/print of GPU values inside it)", "sync"),
    Edit("host", "move the Python between ops (logging, metrics, bookkeeping) "
         "out of the step or overlap it", "host"),
    Edit("graphs", "CUDA graphs: torch.compile(mode=\"reduce-overhead\") or "
         "torch.cuda.graph, one launch per step", "launch"),
    Edit("launch", "halve the host's launch cost: a faster dispatcher, "
         "torch.compile, fused/foreach ops", "launch"),
    Edit("recorder", "run without the recorder (its own host cost removed)", ""),
)}


def edit_named(name: str) -> Edit:
    """The edit called ``name``, or a CutimelineError listing them."""
    if isinstance(name, Edit):
        return name
    if name not in EDITS:
        raise CutimelineError(f"There is no what-if edit {name!r}; the edits are "
                              f"{', '.join(EDITS)}.")
    return EDITS[name]


@dataclass(frozen=True)
class Changes:
    """An edit's inputs to the replay: host time removed at points
    (``cost_t``, ``cost``, sorted by time) and over sorted disjoint
    intervals [``cut_b``, ``cut_e``); ops and syncs that are gone (bool
    masks over their tables; a gone op's gpu rows go with it)."""
    cost_t: np.ndarray
    cost: np.ndarray
    cut_b: np.ndarray
    cut_e: np.ndarray
    drop_ops: np.ndarray
    drop_syncs: np.ndarray


def changes(tl: Timeline, edit: Edit, act: HostActivity,
            engine: str = "numba") -> Changes | None:
    """``edit`` applied to ``tl`` (``act``: its ``gaps.host_activity``);
    None when there is nothing it would remove."""
    o, y = tl.ops, tl.syncs
    none = np.zeros(0, np.int64)
    drop_ops, drop_syncs = np.zeros(len(o), bool), np.zeros(len(y), bool)
    cuts = (none, none)
    if edit.name == "recorder":
        spent = costs(tl, engine)
        if spent is None or not spent[1].sum():
            return None
        return Changes(spent[0], spent[1], none, none, drop_ops, drop_syncs)
    if edit.name == "data":
        cuts = act.data
    elif edit.name == "sync":
        drop_ops = (o.flags & OpFlag.SYNC) != 0
        # the host's waits made by those ops (pings and the like stay)
        drop_syncs = (y.op != NONE) & drop_ops[np.maximum(y.op, 0)] if len(y) else drop_syncs
        cuts = iv.union(np.concatenate([o.host_begin_ns[drop_ops], y.host_begin_ns[drop_syncs]]),
                        np.concatenate([o.host_end_ns[drop_ops], y.host_end_ns[drop_syncs]]),
                        engine)
    elif edit.name == "host":
        cuts = _host_stretches(tl, act, engine)
    elif edit.name in ("launch", "graphs"):
        cuts = _launch_cuts(tl, edit.name, engine)
    else:
        raise CutimelineError(f"The what-if edit {edit.name!r} has no replay inputs.")
    b, e = (np.asarray(c, np.int64) for c in cuts)
    keep = e > b
    b, e = iv.union(b[keep], e[keep], engine)  # threads' cuts may overlap
    if not len(b):
        return None
    return Changes(none, none, b, e, drop_ops, drop_syncs)


def _host_stretches(tl: Timeline, act: HostActivity, engine: str):
    """Op-free stretches of at least ``act.host_gap_ns`` between the first
    and the last op's begin, outside fetches and syncs: the host's own."""
    o = tl.ops
    if len(o) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    busy_b, busy_e = iv.union(
        np.concatenate([act.launching[0], act.data[0], act.sync[0]]),
        np.concatenate([act.launching[1], act.data[1], act.sync[1]]), engine)
    b, e = busy_e[:-1], busy_b[1:]
    lo, hi = int(o.host_begin_ns.min()), int(o.host_begin_ns.max())
    keep = (e - b >= act.host_gap_ns) & (b >= lo) & (e <= hi)
    return b[keep], e[keep]


def _launch_cuts(tl: Timeline, how: str, engine: str):
    """The end of each device op's host time that ``launch`` (half of it)
    or ``graphs`` (all but the first of each step's) removes. The
    recorder's own cost is spent between ops (``costs.py`` prices it at
    the op's begin, outside its interval), so it is kept either way: it
    runs after the fix too."""
    o = tl.ops
    dev = np.flatnonzero((o.device != NONE) & ((o.flags & OpFlag.SYNC) == 0))
    b = np.asarray(o.host_begin_ns[dev], np.int64)
    e = np.asarray(o.host_end_ns[dev], np.int64)
    own = e - b  # the recorder's bookkeeping lies outside the op's interval
    if how == "launch":
        cut = own // 2
    else:
        cut = own.copy()
        _, hb, _ = step_windows(tl)
        # each step's first device op keeps its cost: the graph's one launch
        order = np.argsort(b, kind="stable")
        step = np.searchsorted(hb, b[order], side="right")
        first = np.ones(len(order), bool)
        first[1:] = step[1:] != step[:-1]
        cut[order[first]] = 0
    order = np.argsort(e - cut, kind="stable")
    return (e - cut)[order], e[order]
