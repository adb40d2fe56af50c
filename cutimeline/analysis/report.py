"""The ``Report`` that ``analyze`` returns: tables, a summary, a dict.

Tables are numpy structured arrays (``Report.table(name)``; pandas with
``pandas=True``): ``streams`` and ``devices`` (busy/idle, idle by cause,
CPU lead, queue depth over the report's window), ``steps`` (one row per
step with its verdict, see ``verdict.py``), ``gaps`` (every idle gap with
its cause, built on demand) and ``ops`` (the op table, ``optable.py``).
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import CutimelineError
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline
from .gaps import CAUSES, Cause
from .summary import fmt_ns, report_dict, summary_text

__all__ = ["Report"]

GAP_DTYPE = [("device", np.int64), ("stream", np.int64), ("begin_ns", np.int64),
             ("end_ns", np.int64), ("next_row", np.int64), ("launch_ns", np.int64)] + \
    [(f"{c}_ns", np.int64) for c in CAUSES] + [("cause", object)]

_ADVICE = {
    "input-bound": "try num_workers > 0 (if it is 0), pin_memory=True and "
                   "persistent_workers=True, or make the dataset's __getitem__ cheaper",
    "sync-bound": "avoid .item(), .cpu(), .tolist() and printing GPU values "
                  "inside the step: keep the values on the GPU and read them "
                  "every N steps",
    "launch-bound": "launch fewer, larger kernels: torch.compile, CUDA graphs, "
                    "fused/foreach optimizers, a larger batch",
    "GPU-bound": "the host keeps up; only faster GPU work helps (mixed "
                 "precision, TF32, better kernels for the top ops)",
    "dependency-bound": "work was queued but waited on other streams or "
                        "events: check wait_stream / event waits and overlap",
    "unknown": "the trace lacks launch times for the work that ended the gaps",
    "host-only": "record on a GPU (or ctl.SimGPU()) to see the device side",
}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


class Report:
    """What ``analyze`` found. Attributes: ``window`` (host ns),
    ``streams``, ``devices``, ``steps`` (tables), ``overall`` (the window as
    one step row), ``hta`` (HTA-compatible measures, computed on first
    use; None without gpu rows), ``compensation`` (the overhead replay, None without measured
    overhead), ``settings``. Methods: ``summary()``, ``to_dict()``,
    ``table(name)``, ``op_table()``, ``gap_table()``, ``offenders()``,
    ``cpu_lead()``, ``queue_depth()``."""

    def __init__(self, *, tl: Timeline, window, lanes, activity, streams,
                 devices, primary, steps, overall, compensation, settings):
        self.timeline, self.window = tl, window
        self.lanes, self.activity = lanes, activity
        self.streams, self.devices, self.primary = streams, devices, primary
        self.steps, self.overall = steps, overall
        self.compensation, self.settings = compensation, settings
        self._ops: dict = {}
        self._self_ns: np.ndarray | None = None
        self._overlaps: dict = {}  # verdict.Overlaps, made on first use
        self._hta: dict | None = None

    @property
    def hta(self) -> dict | None:
        """HTA-compatible measures (``hta.py``) of the whole Timeline:
        temporal breakdown, idle time breakdown and queue length, over
        HTA's window (the steps before the last one). Computed on first
        use; None for a Timeline without gpu rows."""
        if self._hta is None and self.lanes is not None:
            from .hta import measures
            self._hta = measures(self.timeline, engine=self.settings["engine"],
                                 ln=self.lanes)
        return self._hta

    # -- tables ----------------------------------------------------------------
    def table(self, name: str, *, pandas: bool = False):
        """A table by name: streams, devices, steps, gaps, ops."""
        getters = {"streams": lambda: self.streams, "devices": lambda: self.devices,
                   "steps": lambda: self.steps, "gaps": self.gap_table,
                   "ops": self.op_table}
        if name not in getters:
            raise CutimelineError(f"The report has no table {name!r}; its tables "
                                  f"are {', '.join(getters)}.")
        t = getters[name]()
        if t is None:
            raise CutimelineError(f"The {name} table needs gpu rows, and this "
                                  f"Timeline has none; record on a GPU or a "
                                  f"ctl.SimGPU() to get them.")
        return _pandas(t) if pandas else t

    @property
    def self_ns(self) -> np.ndarray:
        """Host ns of each op less the ops nested in it (``nesting.py``;
        the op's whole duration on recorded Timelines, which do not nest)."""
        if self._self_ns is None:
            from .nesting import self_ns
            self._self_ns = self_ns(self.timeline)
        return self._self_ns

    def op_table(self, *, shapes: bool = False) -> np.ndarray:
        """Per op name (or name and shape): count, CPU and GPU time, launch
        delay (see ``optable.py``), over the report's window."""
        if shapes not in self._ops:
            from .optable import op_table
            self._ops[shapes] = op_table(self.timeline, shapes=shapes,
                                         engine=self.settings["engine"],
                                         window=self.window, own=self.self_ns)
        return self._ops[shapes]

    def gap_table(self, level: str = "device") -> np.ndarray | None:
        """Every idle gap overlapping the window, at ``level`` "device"
        (idle when no stream of the device runs; stream = NONE) or
        "stream", with its time by cause and its main cause."""
        if level not in ("device", "stream"):
            raise CutimelineError(f"gap_table(level={level!r}): give 'device' "
                                  f"or 'stream'.")
        ln = self.lanes
        if ln is None:
            return None
        grp = ln.devices if level == "device" else ln.streams
        keys = ln.device_keys[grp.gg] if level == "device" else ln.stream_keys[grp.gg]
        w0, w1 = self.window
        sel = np.flatnonzero((grp.ge > w0) & (grp.gb < w1))
        out = np.zeros(len(sel), GAP_DTYPE)
        if level == "device":
            out["device"], out["stream"] = keys[sel], NONE
        else:
            out["device"], out["stream"] = keys[sel, 0], keys[sel, 1]
        out["begin_ns"], out["end_ns"] = grp.gb[sel], grp.ge[sel]
        out["next_row"], out["launch_ns"] = grp.gnext[sel], grp.nl[sel]
        am = grp.amounts[sel]
        for c in Cause:
            out[f"{CAUSES[c]}_ns"] = am[:, c]
        out["cause"] = np.array(CAUSES, dtype=object)[np.argmax(am, axis=1)] \
            if len(sel) else np.zeros(0, object)
        return out

    def cpu_lead(self) -> np.ndarray:
        """GPU begin − host launch of each gpu row (ns; NONE if unknown)."""
        return np.zeros(0, np.int64) if self.lanes is None else self.lanes.lead

    def queue_depth(self, device: int | None = None, stream: int | None = None):
        """(t_ns, depth): the queue depth step function of a stream (or of
        a whole device, summed over its streams; default the primary
        device). Depth counts work launched and not yet finished."""
        ln = self.lanes
        if ln is None:
            raise CutimelineError("queue_depth needs gpu rows; this Timeline "
                                  "has none.")
        if stream is None:
            grp, keys = ln.devices, ln.device_keys
            k = self.primary if device is None else _find(keys, device, "device")
        else:
            grp, keys = ln.streams, ln.stream_keys
            d = ln.device_keys[self.primary] if device is None else device
            hit = np.flatnonzero((keys[:, 0] == d) & (keys[:, 1] == stream))
            if len(hit) == 0:
                raise CutimelineError(f"The Timeline has no stream {stream} on "
                                      f"device {d}.")
            k = int(hit[0])
        from .lanes import queue_depth
        return queue_depth(ln, grp, k, self.settings["engine"])

    def offenders(self, first: int, last: int | None = None) -> dict:
        """Top ops, modules and spans behind the verdict of steps
        first..last (the verdict of ``first``)."""
        from .verdict import offenders
        s = self.steps
        last = first if last is None else last
        sel = np.flatnonzero((s["number"] >= first) & (s["number"] <= last))
        if len(sel) == 0:
            which = f"{first}" + (f"–{last}" if last != first else "")
            raise CutimelineError(f"The report has no step {which}; it covers "
                                  f"{_steps_text(s['number'])}.")
        return offenders(self.timeline, self.lanes, int(s["begin_ns"][sel].min()),
                         int(s["end_ns"][sel].max()), s["verdict"][sel[0]],
                         self.settings["top"], own=self.self_ns, index=self._overlaps,
                         engine=self.settings["engine"])

    # -- text and dict -----------------------------------------------------------
    def ranges(self) -> list[dict]:
        """Consecutive steps with the same verdict, with their totals,
        offenders and advice (the whole window if there are no steps)."""
        s = self.steps if len(self.steps) else np.array([self.overall])
        out = []
        i = 0
        while i < len(s):
            j = i
            while j + 1 < len(s) and s["verdict"][j + 1] == s["verdict"][i]:
                j += 1
            part = s[i:j + 1]
            span = int(part["duration_ns"].sum())
            idle = {c: int(part[f"{c}_ns"].sum()) for c in CAUSES}
            idle_total = sum(idle.values())
            verdict = str(part["verdict"][0])
            from .verdict import offenders
            r = {"first": int(part["number"][0]), "last": int(part["number"][-1]),
                 "verdict": verdict, "steps": len(part), "time_ns": span,
                 "busy_frac": float(part["busy_ns"].sum() / max(span, 1)),
                 "idle_ns": idle, "idle_total_ns": idle_total,
                 "mean_step_ns": float(part["duration_ns"].mean()),
                 "offenders": offenders(self.timeline, self.lanes,
                                        int(part["begin_ns"][0]),
                                        int(part["end_ns"][-1]), verdict,
                                        self.settings["top"], own=self.self_ns,
                                        index=self._overlaps,
                                        engine=self.settings["engine"])}
            if self.compensation is not None:
                r["predicted_step_ns"] = float(part["predicted_ns"].mean())
            r["advice"] = _advice(r, part)
            out.append(r)
            i = j + 1
        return out

    def summary(self) -> str:
        """A short text to read first (see the module docs for the terms)."""
        return summary_text(self)

    def to_dict(self) -> dict:
        """Everything but per-row arrays, as JSON-serialisable values."""
        return report_dict(self)

    def __repr__(self) -> str:
        o = self.overall
        busy = "no GPU" if self.lanes is None else f"GPU busy {_pct(o['busy_frac'])}"
        return (f"<Report {fmt_ns(self.window[1] - self.window[0])}, "
                f"{len(self.steps)} steps, {busy}, {o['verdict']}>")


def _advice(r: dict, part: np.ndarray) -> str:
    v, off = r["verdict"], r["offenders"]
    idle = r["idle_total_ns"]
    share = {c: (r["idle_ns"][c] / idle if idle else 0.0) for c in CAUSES}
    steps = (f"step {r['first']}" if r["first"] == r["last"] else
             f"steps {r['first']}–{r['last']}") if r["first"] != NONE else "the window"
    busy = _pct(r["busy_frac"])
    tops = ", ".join(n for n, _ in off.get("ops", [])[:2])
    if v == "input-bound":
        spans = off.get("spans", [])
        what = (f"{off.get('count', 0)} fetches, mean {fmt_ns(off.get('mean_ns', 0))}"
                if spans else "DataLoader fetches")
        workers = _num_workers(n for n, _ in spans)
        if workers is not None:
            what += f", num_workers={workers}"
        text = (f"{steps}: {_pct(share['data'])} of GPU idle time is spent waiting "
                f"for DataLoader fetches ({what}); GPU busy {busy}")
        text += _runner_up(share, "data")
        if workers:  # workers already: more of them, or a cheaper dataset
            return (f"{text} — raise num_workers above {workers}, use pin_memory=True "
                    f"and persistent_workers=True, or make the dataset's "
                    f"__getitem__ cheaper.")
        if workers == 0:
            return f"{text} — try num_workers > 0 and pin_memory=True."
    elif v == "sync-bound":
        mods = ", ".join(n for n, _ in off.get("modules", [])[:1])
        text = (f"{steps}: {_pct(share['sync'])} of GPU idle time follows host "
                f"syncs ({off.get('count', 0)} syncs" + (f", top {tops}" if tops else "")
                + (f" in {mods}" if mods else "") + f"); GPU busy {busy}")
        text += _runner_up(share, "sync")
    elif v == "launch-bound":
        per_step = part["ops"].mean() if len(part) else 0
        unit = "ops per step" if r["first"] != NONE else "ops"  # no steps: the window
        text = (f"{steps}: GPU busy {busy}; {_pct(share['dispatch'])} of its idle "
                f"time waits for the host to dispatch ops ({per_step:.0f} {unit}"
                + (f"; most host time in {tops}" if tops else "") + ")")
        text += _runner_up(share, "dispatch")
        if tops.startswith("inductor::"):  # compiled already: its launches cost
            return (f"{text} — the top host time is torch.compile graphs launching "
                    f"their kernels: try mode=\"reduce-overhead\" (CUDA graphs), or "
                    f"a larger batch.")
    elif v == "GPU-bound":
        lead = part["lead_max_ns"].max() if len(part) else NONE
        text = (f"{steps}: GPU busy {busy}" +
                (f", the host runs up to {fmt_ns(lead)} ahead" if lead != NONE else "")
                + (f"; top GPU work {tops}" if tops else ""))
    elif v == "dependency-bound":
        where = ", ".join(n for n, _ in off.get("spans", [])[:2])
        text = (f"{steps}: GPU busy {busy}; {_pct(share['dependency'])} of its idle "
                f"time is queued work waiting" + (f" ({where})" if where else ""))
        text += _runner_up(share, "dependency")
    elif v == "host-only":
        text = f"{steps}: no GPU work recorded" + (f"; most host time in {tops}" if tops else "")
    else:
        text = f"{steps}: GPU busy {busy}; the causes of its idle time are unknown"
    return f"{text} — {_ADVICE[v]}."


def _runner_up(share: dict, top: str) -> str:
    """The margin behind a cause's verdict: the next cause's share of the
    idle time ("" when no other cause has any), so 51/49 and 99/1 splits
    read differently."""
    rest = {c: v for c, v in share.items() if c != top}
    c = max(rest, key=rest.get) if rest else None
    return f"; next: {c} {_pct(rest[c])}" if c is not None and rest[c] > 0 else ""


def _num_workers(names) -> int | None:
    """num_workers=N from DataLoader span names, when the recorder put it
    there (e.g. "next(DataLoader, num_workers=0)")."""
    for n in names:
        m = re.search(r"num_workers=(\d+)", str(n))
        if m:
            return int(m.group(1))
    return None


def _find(keys: np.ndarray, value: int, what: str) -> int:
    hit = np.flatnonzero(keys == value)
    if len(hit) == 0:
        raise CutimelineError(f"The Timeline has no {what} {value}.")
    return int(hit[0])


def _steps_text(numbers: np.ndarray) -> str:
    return (f"steps {numbers.min()}–{numbers.max()}" if len(numbers) else "no steps")


def _pandas(t: np.ndarray):
    try:
        import pandas as pd
    except ImportError:
        raise CutimelineError("Report tables as pandas need pandas: "
                              "pip install pandas.") from None
    return pd.DataFrame({n: t[n] for n in t.dtype.names})
