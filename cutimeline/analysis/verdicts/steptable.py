"""The step table: per step, the measures its verdict is read beside.

A step is measured over its device window (``steps.py``) on its primary
device (the one with the most GPU time): busy and idle time, idle time by
cause and its two largest causes (the evidence), queue depth; host-side
measures (ops, launches, time in fetches and syncs, the CPU lead of the
work launched) over its host window; the step without the recorder's own
cost (``predicted_ns``). The verdict columns (``verdict``: the fix that
gains most, ``fix``, ``gain``, ``runner_fix``, ``runner_gain``,
``exposes``) are the ``Report``'s to fill (``causal.py``): they read
the what-if replays, which read these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...numeric import intervals as iv
from ...numeric.ordering import sort_order
from ...numeric.runs import merge_rows, runs_sorted
from ...timeline.schema import NONE, OpFlag
from ...timeline.timeline import Timeline
from ..idle.activity import HostActivity
from ..idle.communication import exposed
from ..idle.gaps import CAUSES, Cause
from ..idle.lanes import Lanes
from ..replay.compensation import Compensation
from ..replay.hostmap import shifted
from .margins import VERDICT_CAUSES, rank_causes

__all__ = ["STEP_DTYPE", "StepWindows", "step_table"]

# begin/end: the device window; host_begin/host_end: the host STEP span
STEP_DTYPE = [("number", np.int64), ("begin_ns", np.int64), ("end_ns", np.int64),
              ("duration_ns", np.int64), ("host_begin_ns", np.int64),
              ("host_end_ns", np.int64), ("verdict", object), ("cause", object),
              ("share", np.float64), ("runner_up", object),
              ("runner_up_share", np.float64),
              ("busy_ns", np.int64), ("busy_frac", np.float64),
              ("idle_ns", np.int64)] + \
    [(f"{c}_ns", np.int64) for c in CAUSES] + \
    [("communication_ns", np.int64),  # collectives alone (communication.py)
     ("lead_first_ns", np.int64), ("lead_last_ns", np.int64),
     ("lead_max_ns", np.int64), ("queue_mean", np.float64),
     ("queue_min", np.int64), ("queue_max", np.int64), ("ops", np.int64),
     ("launches", np.int64), ("host_data_ns", np.int64),
     ("host_sync_ns", np.int64), ("predicted_ns", np.int64),
     ("predicted_busy_frac", np.float64),
     # the verdict's fix (an edit's name; a class for a bound), its predicted
     # gain of the step, the runner-up's, and what a sync exposes (causal.py)
     ("fix", object), ("gain", np.float64), ("runner_fix", object),
     ("runner_gain", np.float64), ("exposes", object)]


@njit(cache=True)
def _count_flag(flags, bit, i0, i1):
    """How many of flags[i0[w]:i1[w]] have ``bit``, per window w."""
    out = np.zeros(len(i0), np.int64)
    for w in range(len(i0)):
        c = 0
        for k in range(i0[w], i1[w]):
            c += (flags[k] & bit) != 0
        out[w] = c
    return out


def _count_flag_np(flags, bit, i0, i1):
    before = np.zeros(len(flags) + 1, np.int64)  # rows with ``bit`` before each row
    np.cumsum((flags & bit) != 0, out=before[1:])
    return np.maximum(before[i1] - before[i0], 0)


@dataclass(frozen=True)
class StepWindows:
    """The windows a step table measures, a row each (ns, int64 arrays):
    ``numbers`` (the step's, NONE for a window that is no step), the
    ``device`` windows (begin, end), the ``host`` windows (begin, end;
    None: the device windows), the windows in the overhead replay
    (``predicted``; None: the host windows moved by the replay's map), and
    ``measured``, each window's index among those the lanes measured (the
    windows ``lanes`` was given)."""
    numbers: np.ndarray
    device: tuple[np.ndarray, np.ndarray]
    measured: np.ndarray
    host: tuple[np.ndarray, np.ndarray] | None = None
    predicted: tuple[np.ndarray, np.ndarray] | None = None


def step_table(tl: Timeline, ln: Lanes | None, act: HostActivity, comp: Compensation | None,
               windows: StepWindows, primary: int = 0,
               engine: str = "numba") -> np.ndarray:
    """One row per window of ``windows`` (usually the steps) with the
    measures of ``STEP_DTYPE`` on device group ``primary`` of ``ln`` (see
    the module doc); ``comp``: the overhead replay, for the predicted
    columns (None: none); the verdicts by ``margins.verdicts`` with
    ``gpu_bound_at`` and ``mixed_margin``."""
    w0, w1 = (np.asarray(w, np.int64) for w in windows.device)
    h0, h1 = (w0, w1) if windows.host is None else \
        (np.asarray(h, np.int64) for h in windows.host)
    idx = np.asarray(windows.measured, np.int64)
    predicted = windows.predicted
    out = np.zeros(len(w0), STEP_DTYPE)
    out["number"], out["begin_ns"], out["end_ns"] = windows.numbers, w0, w1
    out["duration_ns"] = w1 - w0
    out["host_begin_ns"], out["host_end_ns"] = h0, h1
    out["cause"], out["runner_up"] = "", ""
    out["verdict"], out["fix"], out["runner_fix"], out["exposes"] = "", "", "", ""
    out["gain"], out["runner_gain"] = np.nan, np.nan
    o = tl.ops
    by_time = sort_order(o.host_begin_ns, engine)  # ops come sorted, mostly
    t_op = o.host_begin_ns if by_time is None else o.host_begin_ns[by_time]
    flags = o.flags if by_time is None else o.flags[by_time]
    i0, i1 = np.searchsorted(t_op, h0), np.searchsorted(t_op, h1)
    out["ops"] = i1 - i0
    count_flag = _count_flag if engine == "numba" else _count_flag_np
    out["launches"] = count_flag(flags, int(OpFlag.LAUNCH), i0, i1)
    out["host_data_ns"] = iv.coverage(*act.data, h0, h1, engine)
    out["host_sync_ns"] = iv.coverage(*act.sync, h0, h1, engine)
    for c in ("lead_first_ns", "lead_last_ns", "lead_max_ns"):
        out[c] = NONE
    out["predicted_ns"] = NONE
    out["predicted_busy_frac"] = np.nan
    if comp is not None:
        p0, p1 = (shifted(h0, comp.shift), shifted(h1, comp.shift)) \
            if predicted is None else predicted
        out["predicted_ns"] = p1 - p0
    if ln is None:
        out["share"], out["runner_up_share"] = np.nan, np.nan
        return out
    dv = ln.devices
    idle = dv.idle[primary, idx]
    busy = dv.busy[primary, idx]
    span = np.maximum(w1 - w0, 1)
    out["busy_ns"], out["busy_frac"] = busy, busy / span
    out["idle_ns"] = idle.sum(axis=1)
    for c in Cause:
        out[f"{CAUSES[c]}_ns"] = idle[:, c]
    for k, c in (("mean", "queue_mean"), ("min", "queue_min"), ("max", "queue_max")):
        out[c] = dv.queue[k][primary, idx]
    # CPU lead of the work launched in each step, in launch order
    launch, lead = ln.launch, ln.lead
    in_order = dv.n == 1 and sort_order(launch, engine) is None
    if not in_order or (len(launch) and launch[0] == NONE):
        mine = np.flatnonzero(ln.launch != NONE) if dv.n == 1 else \
            np.flatnonzero((dv.of_row == primary) & (ln.launch != NONE))
        o_l = sort_order(ln.launch[mine], engine)
        if o_l is not None:
            mine = mine[o_l]
        launch, lead = ln.launch[mine], ln.lead[mine]
    a, b = np.searchsorted(launch, h0), np.searchsorted(launch, h1)
    has = b > a
    out["lead_first_ns"][has] = lead[a[has]]
    out["lead_last_ns"][has] = lead[b[has] - 1]
    out["lead_max_ns"][has] = [lead[i:j].max() for i, j in zip(a[has], b[has])]
    if comp is not None:
        ub, ue = _replayed_union(ln, primary, comp, engine)
        pb = iv.coverage(ub, ue, p0, p1, engine)
        out["predicted_busy_frac"] = pb / np.maximum(p1 - p0, 1)
    comm = exposed(tl, ln, primary, ln.w0[idx], ln.w1[idx], engine)
    out["communication_ns"] = comm
    if comm.any():  # collectives alone rank beside the idle causes
        idle = np.concatenate([idle, comm[:, None]], axis=1)
    r = rank_causes(idle)
    names = np.array(list(VERDICT_CAUSES[:idle.shape[1]]) + [""], dtype=object)
    out["cause"], out["share"] = names[r["cause"]], r["share"]
    out["runner_up"], out["runner_up_share"] = names[r["runner_up"]], r["runner_up_share"]
    return out


def _replayed_union(ln: Lanes, primary: int, comp: Compensation, engine: str):
    """Union of device group ``primary``'s replayed gpu rows. A stream's
    replayed rows keep its recorded order (the replay runs a stream's work
    in launch order), so the device's are its streams' sorted runs merged
    (ties by row, as a stable sort), not sorted again."""
    b, e = comp.begin_ns, comp.end_ns
    if ln.streams.n == 1:  # one stream: all rows, in order
        return iv.union(b, e, engine)
    st = ln.streams
    members = np.flatnonzero(ln.stream_device == primary)
    if engine == "numba" and runs_sorted(b, st.order, st.starts, members, engine):
        rows = merge_rows(b, st.order, st.starts, members, engine)
    else:
        rows = np.flatnonzero(ln.devices.of_row == primary)
        rows = rows[np.argsort(b[rows], kind="stable")]
    return iv.union(b, e, engine, rows=rows)
