"""``ctl.analyze(tl) -> Report``: why the GPU waits, as numbers.

A pure function of a Timeline (recorded, simulated or imported): nothing is
drawn and the Timeline is not changed. ``analyze`` reads the host's
activity and the gpu rows as lanes (``idle/``), measures the steps over
their device windows with a verdict each (``verdicts/``), replays the run
without the recorder's cost (``replay/``) and hands all of it to the
``Report``, which makes the rest (``tables/``, the what-if predictions)
on first use.

Interval work runs in Numba kernels (``engine="numba"``) or in their NumPy
twins (``engine="numpy"``), which give equal results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CutimelineError
from ..numeric.columns import column_facts, extent
from ..numeric.engines import resolve_engine
from ..text import need_int
from ..timeline.schema import NON_BLOCKING_SYNC_KINDS, NONE, SpanKind
from ..timeline.timeline import Timeline, as_timeline
from ..timeline.windows import parse_window
from .idle.activity import HOST_GAP_NS, SYNC_SLACK_NS, host_activity
from .idle.gaps import CAUSES, Cause
from .idle.lanes import Group, lanes
from .idle.overlap import stream_window
from .idle.steps import device_windows, step_windows
from .replay.compensation import compensate
from .report import Report
from .tables.flops import check_peak, step_flops
from .tables.memory import memory_device, step_memory
from .verdicts.margins import GPU_BOUND_AT, MIXED_MARGIN
from .verdicts.steptable import StepWindows, step_table

__all__ = ["analyze", "Report", "LANE_DTYPE"]

LANE_DTYPE = [("device", np.int64), ("stream", np.int64), ("rows", np.int64),
              ("busy_ns", np.int64), ("idle_ns", np.int64), ("busy_frac", np.float64)] + \
    [(f"{c}_ns", np.int64) for c in CAUSES] + [("overlapped_ns", np.int64)] + \
    [("lead_mean_ns", np.float64), ("lead_p50_ns", np.float64),
     ("lead_p95_ns", np.float64), ("lead_max_ns", np.int64),
     ("queue_mean", np.float64), ("queue_p50", np.float64),
     ("queue_p95", np.float64), ("queue_max", np.int64)]


def host_blocking(tl: Timeline) -> Timeline:
    """``tl`` without the syncs rows that block no host (a stream's wait
    for an event, ``NON_BLOCKING_SYNC_KINDS``, which profiler traces list
    among their syncs): the analysis reads every syncs row as the host
    waiting for the device (its idle causes, the replay's waits, the syncs
    by source line). ``tl`` itself when it has none."""
    y = tl.syncs
    ids = [i for i in map(tl.string_id, NON_BLOCKING_SYNC_KINDS) if i != NONE]
    if not ids or not len(y):
        return tl
    keep = ~np.isin(y.kind, ids)
    return tl if keep.all() else tl.replace(syncs=y.take(np.flatnonzero(keep)))


def analyze(tl: Timeline, *, window: Any = None, engine: str = "auto",
            gpu_bound_at: float = GPU_BOUND_AT, sync_slack_ns: int = SYNC_SLACK_NS,
            top: int = 3, host_gap_ns: int = HOST_GAP_NS,
            mixed_margin: float = MIXED_MARGIN, peak_flops: Any = None) -> Report:
    """Analyse a Timeline; see ``Report`` for what comes back.

    ``window``: restrict the totals, tables and steps to a step (3), a
    range of steps ((3, 5) or range(3, 6)) or seconds from the start
    ((0.5, 0.75)); gaps keep the causes they have in the whole trace.
    Without a window: the whole Timeline, except for an imported trace
    without steps, where it runs from the first to the last device
    activity as HTA's does (``settings["window"]`` names it in words).
    ``engine``: "auto" (the NumPy twins below ~5·10^5 rows, which compile
    nothing; ``numeric/engines.py``), "numba" or "numpy" (the reference twin). ``gpu_bound_at``:
    busy fraction from which a step is GPU-bound. ``sync_slack_ns``: how
    soon after a sync returned a gap that begins still counts as the sync's
    (absorbs clock alignment error). ``top``: offenders listed per verdict.
    ``host_gap_ns``: op-free host stretches at least this long are the
    host's (cause "host": user Python, logging, an idle host), shorter ones
    between a thread's ops are launch overhead (cause "launch"); 200 µs
    sits above any framework glue between ops (~5–30 µs per module call on
    current CPUs). ``mixed_margin``: when the top cause's share of the idle
    time leads the runner-up's by less, the verdict is "mixed".
    ``peak_flops``: the GPU's peak in FLOP/s (a number, or a dict precision
    → FLOP/s such as {"bf16": 989.5e12}) for MFU, when the Timeline's
    device is not one ``timeline/gpus.py`` knows (``flops.py``).
    Steps are measured over their device windows (``steps.py``). A
    Timeline without gpu rows gives a host-side report.
    """
    tl = as_timeline(tl, "analyze")
    if not (len(tl.ops) or len(tl.gpu) or len(tl.spans)):   # no verdict of nothing
        raise CutimelineError("The Timeline is empty (no ops, gpu rows or spans), so there "
                              "is nothing to analyse; was recording disabled "
                              "(CUTIMELINE_DISABLE), or did the block run no torch ops?")
    need_int(sync_slack_ns, "sync_slack_ns", "analyze", lo=0)
    need_int(top, "top (offenders listed per verdict)", "analyze", lo=0)
    engine = resolve_engine(engine, len(tl.ops) + len(tl.gpu))
    if not (isinstance(gpu_bound_at, (int, float)) and 0 < gpu_bound_at <= 1):
        raise CutimelineError(f"gpu_bound_at={gpu_bound_at!r} must be a busy "
                              f"fraction above 0 and at most 1.")
    if not (isinstance(mixed_margin, (int, float)) and 0 <= mixed_margin <= 1):
        raise CutimelineError(f"mixed_margin={mixed_margin!r} must be a share of "
                              f"the idle time from 0 to 1 (0: never 'mixed').")
    if not (isinstance(host_gap_ns, (int, np.integer)) and host_gap_ns > 0):
        raise CutimelineError(f"host_gap_ns={host_gap_ns!r} must be a whole "
                              f"number of ns above 0 (default {HOST_GAP_NS:_}).")
    peak_flops = check_peak(peak_flops)
    given, tl = tl, host_blocking(tl)
    g = tl.gpu
    has_gpu = len(g) > 0
    lo, hi, missing = extent(tl, engine)
    if has_gpu and not tl.aligned:
        why = tl.meta.get("align_error")
        raise CutimelineError(
            "The Timeline's gpu rows are not on the host clock yet"
            + (f" (aligning failed: {why})" if why else "")
            + "; call cutimeline.alignment.align(tl) first, or analyze the timeline "
            "ctl.record "
            "hands back, which is aligned at stop.")
    if has_gpu and missing:
        raise CutimelineError("Some gpu rows have no begin or end time (NONE); "
                              "align the Timeline again with cutimeline.alignment.align(tl).")
    device = window is None and _device_default(tl)
    if window is not None:
        w0, w1 = tl.window_bounds(window)
        window = parse_window(window)  # "3-5" is (3, 5) from here on
    elif device:
        # a profiler trace's host-only preamble (model set-up, a warm-up
        # outside the profiler's schedule, 30 s of it in one trace) would
        # otherwise be most of an idle % no GPU was ever asked to fill
        w0, w1 = int(g.begin_ns.min()), int(g.end_ns.max())
    else:
        w0, w1 = lo, hi
    w0, w1 = max(w0, lo), max(min(w1, hi), max(w0, lo))
    numbers, hb, he = step_windows(tl)
    in_order = has_gpu and column_facts(g, "launch_ns", engine).sorted
    sb, se = device_windows(g.launch_ns, g.begin_ns, g.end_ns, hb, he, engine=engine,
                            in_order=in_order) if has_gpu else (hb, he)
    inside = (he > w0) & (hb < w1)
    numbers, hb, he, sb, se = (x[inside] for x in (numbers, hb, he, sb, se))
    if _by_steps(window) and len(sb):  # the steps' GPU work, not their host time
        w0 = max(int(sb.min()), lo)
        w1 = min(max(int(se.max()), w0), hi)
    act = host_activity(tl, sync_slack_ns, engine, host_gap_ns)
    # the time before the first step and after the last, measured as the
    # steps are (after them in the lanes' windows), so the summary reports it
    out = [(k, a, b) for k, a, b in (("before", w0, sb[0] if len(sb) else w0),
                                     ("after", se[-1] if len(se) else w1, w1))
           if has_gpu and len(sb) and window is None and not device and b > a]
    ln = lanes(tl, act, np.array([w0, *sb, *(a for _, a, _ in out)], np.int64),
               np.array([w1, *se, *(b for _, _, b in out)], np.int64),
               engine, bounds=(lo, hi)) if has_gpu else None
    h0, h1 = np.concatenate([[w0], hb]), np.concatenate([[w1], he])
    comp = compensate(tl, ln, engine, at=np.concatenate([h0, h1]))
    predicted = None
    if comp is not None:  # the host windows replayed, ``shifted``
        ph = [comp.at[:len(h0)], comp.at[len(h0):]]
        predicted = ph
        if has_gpu:  # the same rows' replayed times make the replayed windows
            pb, pe = device_windows(g.launch_ns, comp.begin_ns, comp.end_ns, hb,
                                    he, ph[0][1:], ph[1][1:], engine, in_order)
            predicted = [np.concatenate([ph[0][:1], pb]), np.concatenate([ph[1][:1], pe])]
    streams = devices = None
    primary = 0
    if ln is not None:
        am = over = None
        if ln.devices is not ln.streams:  # idle beside a busy stream: no cause
            am, over = stream_window(ln, act, w0, w1, engine)
        streams = _lane_table(ln.streams, ln.stream_keys, w0, w1, am)
        dev_keys = np.stack([ln.device_keys, np.full(len(ln.device_keys), NONE)], 1)
        devices = streams.copy() if ln.devices is ln.streams else \
            _lane_table(ln.devices, dev_keys, w0, w1)
        devices["stream"] = NONE
        if over is not None:
            streams["overlapped_ns"] = over
        primary = int(np.argmax(devices["busy_ns"])) if len(devices) else 0
    settings = {"window": _window_words(window, device),
                "engine": engine, "gpu_bound_at": gpu_bound_at,
                "sync_slack_ns": int(sync_slack_ns), "top": int(top),
                "host_gap_ns": int(host_gap_ns), "mixed_margin": float(mixed_margin),
                "peak_flops": peak_flops}
    # window 0 is the report's, the others the steps inside it
    windows = StepWindows(numbers=np.concatenate([[NONE], numbers]),
                          device=(np.concatenate([[w0], sb]), np.concatenate([[w1], se])),
                          measured=np.arange(len(sb) + 1), host=(h0, h1), predicted=predicted)
    rows = step_table(tl, ln, act, comp, windows, primary, engine)
    whole = (int(hb.min()), int(he.max())) if _by_steps(window) and len(hb) else (w0, w1)
    rows, work = _with_work(tl, rows, whole, ln, primary, peak_flops)
    outside = {k: {"begin_ns": int(a), "end_ns": int(b),
                   "busy_ns": int(ln.devices.busy[primary, len(sb) + 1 + i]),
                   "idle_ns": {c: int(v) for c, v in
                               zip(CAUSES, ln.devices.idle[primary, len(sb) + 1 + i])}}
               for i, (k, a, b) in enumerate(out)}
    return Report(tl=tl, window=(int(w0), int(w1)), lanes=ln, activity=act, outside=outside,
                  streams=streams, devices=devices, primary=primary,
                  rows=rows, compensation=comp,
                  settings=settings, reanalyze=analyze, work=work, source=given)


def _with_work(tl: Timeline, rows: np.ndarray, whole: tuple[int, int], ln, primary: int,
               peak_flops) -> tuple[np.ndarray, dict]:
    """The step rows with the columns of ``flops.py`` (flops, tflop_per_s,
    mfu) and ``memory.py`` (mem_peak_bytes, mem_allocated_bytes) appended
    when the Timeline has those tables, and what the Report keeps of them
    (``compute``: the run's precision and peak; ``memory_device``). Row 0
    (the report's window) counts over ``whole``: for a window of steps,
    their host windows, whose ops launched the steps' work."""
    h0, h1 = rows["host_begin_ns"].copy(), rows["host_end_ns"].copy()
    h0[0], h1[0] = whole
    cols: dict = {}
    work: dict = {"host_window": (int(whole[0]), int(whole[1]))}
    if len(tl.flops):
        more, work["compute"] = step_flops(tl, h0, h1, rows["duration_ns"], peak_flops)
        cols.update(more)
    if len(tl.memory):
        dev = memory_device(tl, None if ln is None else int(ln.device_keys[primary]))
        m = step_memory(tl, dev, h0, h1)
        cols["mem_peak_bytes"], cols["mem_allocated_bytes"] = \
            m["peak_bytes"], m["allocated_bytes"]
        work["memory_device"] = dev
    if not cols:
        return rows, work
    out = np.zeros(len(rows), rows.dtype.descr + [(k, v.dtype) for k, v in cols.items()])
    for name in rows.dtype.names:
        out[name] = rows[name]
    for name, v in cols.items():
        out[name] = v
    return out, work


def _device_default(tl: Timeline) -> bool:
    """Whether the default window is first to last device activity: for an
    imported trace with gpu rows and no steps (recordings, and traces with
    steps, keep the whole Timeline)."""
    return (tl.meta.get("source") == "kineto" and len(tl.gpu) > 0
            and not bool((tl.spans.kind == SpanKind.STEP).any()))


def _window_words(window: Any, device: bool) -> str:
    """The window analysed, as the figures' titles name theirs: "the whole
    recording", "first to last device activity", "step 3", "steps 3–5",
    "0.5–0.75 s" (``window`` as given, once ``window_bounds`` took it)."""
    if window is None:
        return "first to last device activity" if device else "the whole recording"
    if isinstance(window, range):
        window = (window[0], window[-1])
    if _by_steps(window):
        a, b = (window, window) if not isinstance(window, tuple) else window
        return f"step {a}" if a == b else f"steps {a}–{b}"
    if isinstance(window, tuple) and len(window) == 2:
        return f"{window[0]:g}–{window[1]:g} s"
    return f"window {window!r}"  # a spelling window_bounds reads and this does not


def _by_steps(window: Any) -> bool:
    """Whether ``window`` names steps (then the report covers their device
    windows) rather than seconds."""
    if isinstance(window, (int, np.integer)) and not isinstance(window, bool):
        return True
    if isinstance(window, range):
        return True
    return isinstance(window, tuple) and \
        all(isinstance(v, (int, np.integer)) for v in window)


def _lane_table(grp: Group, keys: np.ndarray, w0: int, w1: int,
                causes: np.ndarray | None = None) -> np.ndarray:
    """Window 0 of each group: busy, idle by cause, CPU lead, queue.
    ``causes``: (groups, 6) idle ns by Cause to show instead of the
    group's own (a device's streams: where the device was idle too); the
    idle time is then the window less the busy time (the gaps and busy
    intervals tile it)."""
    out = np.zeros(grp.n, LANE_DTYPE)
    if grp.n == 0:
        return out
    out["device"], out["stream"] = keys[:, 0], keys[:, 1]
    out["rows"] = np.diff(grp.starts)
    if causes is None:
        causes = grp.idle[:, 0]
        out["idle_ns"] = causes.sum(axis=1)
    else:
        out["idle_ns"] = max(w1 - w0, 0) - grp.busy[:, 0]
    out["busy_ns"] = grp.busy[:, 0]
    out["busy_frac"] = grp.busy[:, 0] / max(w1 - w0, 1)
    for c in Cause:
        out[f"{CAUSES[c]}_ns"] = causes[:, c]
    out["lead_mean_ns"], out["lead_p50_ns"], out["lead_p95_ns"] = grp.lead[:, :3].T
    out["lead_max_ns"] = np.where(np.isnan(grp.lead[:, 3]), NONE,
                                  np.nan_to_num(grp.lead[:, 3]))
    q = grp.queue
    out["queue_mean"], out["queue_max"] = q["mean"][:, 0], q["max"][:, 0]
    out["queue_p50"], out["queue_p95"] = q["p50"], q["p95"]
    return out
