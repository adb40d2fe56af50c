"""The ``Report`` that ``analyze`` returns: tables, a summary, a dict.

Tables are numpy structured arrays (``Report.table(name)``; pandas with
``pandas=True``): ``streams`` and ``devices`` (busy/idle, idle by cause,
CPU lead, queue depth over the report's window), ``steps`` (one row per
step over its device window, with its verdict and margin, see
``verdicts/``), ``gaps`` (every idle gap with its cause, built on demand)
and ``ops`` (the op table, ``optable.py``). A stream's idle time while
another stream of its device ran adds to no cause (``overlap.py``): the
streams table and the stream gap table show it as ``overlapped_ns``.

From the tables a recording may add (each only when the Timeline has it;
without them the tables, text and dict are as before): ``sources`` (the
syncs and DataLoader fetches by the user's source line, ``sources.py``;
verdicts quote the top line), ``memory()`` (device memory peaks and who
held them, ``memory.py``; the steps table gains ``mem_peak_bytes`` and
``mem_allocated_bytes``), ``compute()`` (FLOPs, achieved FLOP/s and MFU,
``flops.py``; the steps table gains ``flops``, ``tflop_per_s`` and
``mfu``, the op table ``flops`` and ``tflop_per_s``).
"""

from __future__ import annotations

import numpy as np

from ..errors import CutimelineError
from ..text import fmt_ns, need_flag, need_int, need_text, terminal_text
from ..timeline.schema import NONE
from ..timeline.timeline import Timeline, as_timeline
from .advice import advice
from .headline import headline, steady
from .idle.activity import fetch_spans
from .idle.gaps import CAUSES, Cause
from .idle.lanes import queue_depth
from .idle.overlap import device_idle_amounts
from .notebook import report_html
from .replay.predictions import weigh
from .replay.whatif import REPLAY_SETTINGS, replayed
from .summary import report_dict, summary_text
from .tables.flops import run_compute
from .tables.hta import measures
from .tables.memory import report_memory
from .tables.nesting import self_ns
from .tables.oneoff import one_offs
from .tables.optable import op_table
from .tables.sources import SOURCE_DTYPE, wait_lines
from .verdicts.causal import Judgement, judge_run, judge_steps
from .verdicts.margins import BY_CAUSE, CAUSE_OF, ON_GPU, VERDICT_CAUSES, Verdict, verdict_text
from .verdicts.offenders import offenders

__all__ = ["Report"]

GAP_DTYPE = [("device", np.int64), ("stream", np.int64), ("begin_ns", np.int64),
             ("end_ns", np.int64), ("next_row", np.int64), ("next_launch_ns", np.int64)] + \
    [(f"{c}_ns", np.int64) for c in CAUSES] + [("overlapped_ns", np.int64),
                                               ("cause", object)]


def _whole_numbers(value, name: str, what: str) -> np.ndarray:
    """``value`` as int64 (a number or a 1-d sequence of whole numbers), or
    a sentence naming ``name`` and ``what`` it takes."""
    try:
        a = np.asarray(value)
    except Exception:  # a ragged or odd object
        a = np.asarray(None)
    if a.dtype == bool or a.dtype.kind not in "iu" or a.ndim > 1:
        raise CutimelineError(f"idle_amounts({name}={value!r:.60}) takes {what}.")
    return a.astype(np.int64)


def _wrong_shape(name: str, k: np.ndarray) -> None:
    raise CutimelineError(f"idle_amounts({name}=...) takes one host ns per gap "
                          f"({len(k)}) or one for all.")


class Report:
    """What ``analyze`` found. Attributes: ``window`` (host ns),
    ``streams``, ``devices``, ``steps`` (tables), ``overall`` (the window as
    one step row), ``hta`` (HTA-compatible measures, computed on first
    use; None without gpu rows), ``compensation`` (the overhead replay, None without measured
    overhead), ``settings``. Methods: ``summary()``, ``to_dict()``,
    ``table(name)``, ``op_table()``, ``gap_table()``, ``source_table()``,
    ``offenders()``, ``cpu_lead()``, ``queue_depth()``, ``idle_amounts()``,
    ``fetches()``, ``headline()``, ``what_if()``, ``replay_report()``,
    ``memory()``, ``compute()``. ``source`` is the Timeline ``analyze``
    was given, ``timeline`` the one it read: the same, or without the
    syncs rows that block no host (``analyzer.host_blocking``)."""

    def __init__(self, *, tl: Timeline, window, lanes, activity, streams,
                 devices, primary, rows, compensation, settings,
                 reanalyze=None, work=None, source: Timeline | None = None,
                 outside: dict | None = None):
        self.timeline, self.window = tl, window
        self.source = tl if source is None else source
        self.lanes, self.activity = lanes, activity
        self.streams, self.devices, self.primary = streams, devices, primary
        self._rows = rows  # row 0 the window, then the steps; verdicts on first use
        # the time before the first step and after the last: begin_ns,
        # end_ns, busy_ns and idle_ns by cause, on the primary device
        self.outside = dict(outside or {})
        self._judgement: Judgement | None = None
        self._weighing = None  # predictions.Weighing, made with the verdicts
        self.compensation, self.settings = compensation, settings
        self._ops: dict = {}
        self._self_ns: np.ndarray | None = None
        self._overlaps: dict = {}  # offenders.Overlaps, made on first use
        self._hta: dict | None = None
        self._reanalyze = reanalyze  # ``analyze`` itself
        # analyzer._with_work: the run's FLOP precision and peak, the memory
        # device, the host window the FLOPs and waits are counted over
        self._work = dict(work or {})
        self._made: dict = {}  # memory() and compute(), made on first use

    @property
    def hta(self) -> dict | None:
        """HTA-compatible measures (``hta.py``) of the whole Timeline:
        temporal breakdown, idle time breakdown and queue length, over
        HTA's window (the steps before the last one). Computed on first
        use; None for a Timeline without gpu rows."""
        if self._hta is None and self.lanes is not None:
            self._hta = measures(self.timeline, engine=self.settings["engine"],
                                 ln=self.lanes)
        return self._hta

    # -- verdicts ----------------------------------------------------------------
    @property
    def steps(self) -> np.ndarray:
        """One row per step in the window (``verdicts/steptable.py``), each
        with its verdict (``verdicts/causal.py``)."""
        self._judge()
        return self._rows[1:]

    @property
    def overall(self) -> np.ndarray:
        """The window as one step row; its verdict the run's (``verdict``)."""
        self._judge()
        return self._rows[0]

    @property
    def judgement(self) -> Judgement:
        """The run's verdict over its steady-state steps (``causal.judge_run``):
        what every surface (summary, figure, reprs, ``to_dict``, the CLI)
        says first."""
        self._judge()
        return self._judgement

    def step_rows(self) -> np.ndarray:
        """The steps as measured, before their verdicts: the step rows, or
        the window as one row when there are none (what the predictions
        and verdicts read)."""
        r = self._rows
        return r[1:] if len(r) > 1 else r[:1]

    def _judge(self) -> None:
        """Each step's verdict and the run's: the fix that gains most
        (``verdicts/causal.py``), read from the predictions (made once)."""
        if self._judgement is not None:
            return
        w = self._weighing = weigh(self)
        rows = self.step_rows()
        opts = {"gpu_bound_at": self.settings["gpu_bound_at"],
                "mixed_margin": self.settings["mixed_margin"]}
        has_gpu = self.lanes is not None
        if has_gpu:  # the step without the recorder: the base every fix is weighed on
            rows["predicted_ns"], rows["predicted_busy_frac"] = w.base_ns, w.base_busy
        for row, j in zip(rows, judge_steps(rows, w.predictions, w.base_busy, has_gpu,
                                            **opts)):
            _write(row, j)
        run = judge_run(rows, w.predictions, w.base_busy, has_gpu, **opts)
        if len(self._rows) > 1:
            _write(self._rows[0], run)
        self._judgement = run

    # -- tables ----------------------------------------------------------------
    def table(self, name: str, *, pandas: bool = False):
        """A table by name: streams, devices, steps, gaps, ops, sources."""
        getters = {"streams": lambda: self.streams, "devices": lambda: self.devices,
                   "steps": lambda: self.steps, "gaps": self.gap_table,
                   "ops": self.op_table, "sources": self.source_table}
        need_text(name, "the table's name", "Report.table")
        pandas = need_flag(pandas, "pandas", "Report.table")
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
            self._self_ns = self_ns(self.timeline)
        return self._self_ns

    def op_table(self, *, shapes: bool = False) -> np.ndarray:
        """Per op name (or name and shape): count, CPU and GPU time, launch
        delay (see ``optable.py``), over the report's window."""
        shapes = need_flag(shapes, "shapes", "Report.op_table")
        if shapes not in self._ops:
            self._ops[shapes] = op_table(self.timeline, shapes=shapes,
                                         engine=self.settings["engine"],
                                         window=self.window, own=self.self_ns)
        return self._ops[shapes]

    def gap_table(self, level: str = "device") -> np.ndarray | None:
        """Every idle gap overlapping the window, at ``level`` "device"
        (idle when no stream of the device runs; stream = NONE) or
        "stream", with its time by cause and its main cause. A stream gap's
        causes cover only the time its device was idle too; the rest, when
        another stream of the device ran, is ``overlapped_ns`` (its cause
        reads "overlapped" where that is the largest part)."""
        if not isinstance(level, str) or level not in ("device", "stream"):
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
        out["next_row"], out["next_launch_ns"] = grp.gnext[sel], grp.nl[sel]
        if level == "stream" and ln.devices is not ln.streams:
            am, over = self.idle_amounts(sel)
        else:
            am, over = grp.amounts[sel], np.zeros(len(sel), np.int64)
        for c in Cause:
            out[f"{CAUSES[c]}_ns"] = am[:, c]
        out["overlapped_ns"] = over
        names = np.array(list(CAUSES) + ["overlapped"], dtype=object)
        out["cause"] = names[np.argmax(np.column_stack([am, over]), axis=1)] \
            if len(sel) else np.zeros(0, object)
        return out

    def idle_amounts(self, gaps, begin_ns=None, end_ns=None) -> tuple[np.ndarray, np.ndarray]:
        """How each of the stream gaps ``gaps`` (indices into
        ``lanes.streams``' gaps) was idle, over the part of it in
        [``begin_ns``, ``end_ns``) (host ns, one per gap; default the whole
        gap): ((n, len(CAUSES)) ns by cause, in ``CAUSES``' order, for the
        time its device was idle too; (n,) ns overlapped, while another
        stream of its device ran). The split ``gap_table("stream")``
        reports, for any part of a gap (a figure's pixel column)."""
        if self.lanes is None:
            raise CutimelineError("idle_amounts needs gpu rows; this Timeline "
                                  "has none.")
        n = len(self.lanes.streams.gb)
        k = _whole_numbers(gaps, "gaps", f"stream gap indices from 0 to {n - 1}").reshape(-1)
        if len(k) and (k.min() < 0 or k.max() >= n):
            raise CutimelineError(f"idle_amounts(gaps=...) holds {int(k.min())}..{int(k.max())}; "
                                  f"the stream gaps are 0 to {n - 1}.")
        bounds = [None if b is None else np.broadcast_to(
            _whole_numbers(b, name, "host ns, one per gap or one for all"), k.shape)
            if np.ndim(b) == 0 or np.shape(b) == k.shape else _wrong_shape(name, k)
            for b, name in ((begin_ns, "begin_ns"), (end_ns, "end_ns"))]
        return device_idle_amounts(self.lanes, self.activity, k, *bounds,
                                   self.settings["engine"])

    def fetches(self) -> np.ndarray:
        """Which spans are DataLoader fetches: a read-only bool per row of
        the Timeline's spans table (``timeline``'s and ``source``'s, the
        same rows): DATA spans and USER spans named as fetches
        (``activity.fetch_spans``, the one statement of what a fetch is)."""
        return fetch_spans(self.timeline)

    def source_table(self) -> np.ndarray:
        """Per user source line, the syncs and DataLoader fetches that began
        in the report's window: ``kind`` ("sync" or "data"), ``count``,
        ``wait_ns`` (time the host was blocked, or fetching), ``file``,
        ``line``, ``function``, ``code`` (``sources.SOURCE_DTYPE``), most
        counted first within each kind. Empty without a sources table."""
        if not len(self.timeline.sources):
            return np.zeros(0, SOURCE_DTYPE)
        w = wait_lines(self.timeline, *self._host_window())
        return np.concatenate([w["sync"], w["data"]])

    def _host_window(self) -> tuple[int, int]:
        """The host window the report counts host work in: its window, or
        for a window of steps, their host windows together."""
        return self._work.get("host_window", self.window)

    def one_offs(self) -> np.ndarray:
        """Op calls in the window that took far longer than their name's
        other calls (warm-up: lazy initialisation, autotuning,
        compilation), longest first (``oneoff.ONE_OFF_DTYPE``)."""
        if "one_offs" not in self._made:
            self._made["one_offs"] = one_offs(self.timeline, *self.window, self.self_ns)
        return self._made["one_offs"]

    def memory(self) -> dict | None:
        """Device memory (``memory.py``) over the report's host window;
        None without a memory table. ``{"devices": per device, its peak
        (``memory.peak``: peak_bytes, peak_ns, step, op, holders,
        before_bytes, step_allocators), "device": the device the step
        table's mem_ columns show, "steps": per step on it
        (``memory.MEMORY_STEP_DTYPE``)}``."""
        if not len(self.timeline.memory):
            return None
        if "memory" not in self._made:
            self._made["memory"] = report_memory(
                self.timeline, self._host_window(), self._rows[1:],
                self._work["memory_device"], self.settings["top"])
        return self._made["memory"]

    def compute(self) -> dict | None:
        """FLOPs and MFU (``flops.py``) over the run's steady-state steps,
        those the verdict covers (``summary.steady``); None without a flops
        table. ``{"steps" (which, in words), "flops", "duration_ns",
        "flop_per_s", "mfu" (None without a peak), "precision",
        "by_precision" (FLOPs per precision in the report's window),
        "peak_flop_per_s", "label" (the peak in words), "why" (why there is
        no MFU, or ""), "top_op" (the op name with the most FLOPs: name,
        share, flop_per_s on its GPU time)}``."""
        c = self._work.get("compute")
        if c is None:
            return None
        if "compute" not in self._made:
            self._made["compute"] = run_compute(c, *steady(self), self.op_table())
        return self._made["compute"]

    def cpu_lead(self) -> np.ndarray:
        """GPU begin − host launch of each gpu row (ns; NONE if unknown)."""
        return np.zeros(0, np.int64) if self.lanes is None else self.lanes.lead

    def queue_depth(self, device: int | None = None, stream: int | None = None):
        """(t_ns, depth): the queue depth step function of a stream (or of
        a whole device, summed over its streams; default the primary
        device). Depth counts work launched and not yet finished."""
        device = need_int(device, "device", "Report.queue_depth", none=True)
        stream = need_int(stream, "stream", "Report.queue_depth", none=True)
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
        return queue_depth(ln, grp, k, self.settings["engine"])

    def offenders(self, first: int, last: int | None = None) -> dict:
        """Top ops, modules and spans behind the verdict of steps
        first..last (the verdict of ``first``; of its top cause when
        "mixed")."""
        first = need_int(first, "first", "Report.offenders")
        last = need_int(last, "last", "Report.offenders", none=True)
        s = self.steps
        last = first if last is None else last
        sel = np.flatnonzero((s["number"] >= first) & (s["number"] <= last))
        if len(sel) == 0:
            which = f"{first}" + (f"–{last}" if last != first else "")
            raise CutimelineError(f"The report has no step {which}; it covers "
                                  f"{_steps_text(s['number'])}.")
        return self._offenders(s[sel], str(s["verdict"][sel[0]]), str(s["cause"][sel[0]]))

    def _offenders(self, part: np.ndarray, verdict: str, cause: str) -> dict:
        """Offenders of the steps ``part``: GPU work over their device
        windows, host work over their host windows."""
        if verdict == Verdict.MIXED:
            verdict = BY_CAUSE.get(cause, Verdict.UNKNOWN)
        b, e = ("begin_ns", "end_ns") if verdict in ON_GPU else ("host_begin_ns", "host_end_ns")
        return offenders(self.timeline, self.lanes, int(part[b].min()), int(part[e].max()),
                         verdict, self.settings["top"], own=self.self_ns,
                         index=self._overlaps, engine=self.settings["engine"],
                         act=self.activity)

    def what_if(self, edit=None):
        """Without ``edit``: for each fix that applies to this Timeline, the
        predicted step time and GPU busy fraction per step window, against
        the step without the recorder's own cost (``predictions.Prediction``,
        with the fix spelled as the change in code), ranked by gain. With
        ``edit`` (a name: data, sync, copies, host, graphs, launch, tf32,
        bf16, fused_optimizer, compile, recorder): the Timeline replayed under that fix (and without the
        recorder), to analyse or plot beside the recorded one
        (``whatif.py``)."""
        if edit is not None:
            return replayed(self, edit)
        self._judge()
        return self._weighing.predictions

    def replay_report(self, replay: Timeline) -> Report:
        """The Report of ``replay`` (a Timeline ``what_if(edit)`` gave),
        analysed with this Report's settings as ``what_if()``'s predictions
        were (``replay.whatif.REPLAY_SETTINGS``), to set beside this one."""
        replay = as_timeline(replay, "Report.replay_report")
        if self._reanalyze is None:
            raise CutimelineError("This Report was not made by analyze(), so it cannot "
                                  "analyse a replay; call ctl.analyze(replay) instead.")
        return self._reanalyze(replay, **{k: self.settings[k] for k in REPLAY_SETTINGS})

    # -- text and dict -----------------------------------------------------------
    def ranges(self) -> list[dict]:
        """Consecutive steps with the same verdict, with their totals, the
        fix that gains most over them (``fix``, ``gain``: its predicted
        gain of their summed step time), offenders and advice (the whole
        window if there are no steps)."""
        s = self.steps if len(self.steps) else np.array([self.overall])
        out = []
        i = 0
        while i < len(s):
            j = i
            while j + 1 < len(s) and s["verdict"][j + 1] == s["verdict"][i]:
                j += 1
            part = s[i:j + 1]
            span = int(part["duration_ns"].sum())
            idle = {c: int(part[f"{c}_ns"].sum()) for c in VERDICT_CAUSES}
            if not idle["communication"]:  # no collectives alone: idle causes only
                del idle["communication"]
            idle_total = sum(idle.values())
            verdict = str(part["verdict"][0])
            busy = float(part["busy_ns"].sum() / max(span, 1))
            ranked = sorted(idle, key=lambda c: -idle[c])  # stable: ties by Cause
            top = CAUSE_OF.get(verdict, ranked[0]) if idle_total else ""
            second = next((c for c in ranked if c != top and idle[c] > 0), "")
            fix, gain = _range_fix(part, "fix", "gain")
            runner, runner_gain = _range_fix(part, "runner_fix", "runner_gain")
            r = {"first": int(part["number"][0]), "last": int(part["number"][-1]),
                 "verdict": verdict, "fix": fix, "gain": gain, "runner_fix": runner,
                 "runner_gain": runner_gain,
                 "exposes": str(part["exposes"][0]),
                 "text": verdict_text(verdict, fix, gain, busy, runner, runner_gain),
                 "cause": top, "share": idle[top] / idle_total if top else 0.0,
                 "runner_up": second,
                 "runner_up_share": idle[second] / idle_total if second else 0.0,
                 "steps": len(part), "time_ns": span, "busy_frac": busy,
                 "idle_ns": idle, "idle_total_ns": idle_total,
                 "mean_step_ns": float(part["duration_ns"].mean()),
                 "offenders": self._offenders(part, verdict, top)}
            if self.compensation is not None:
                r["predicted_step_ns"] = float(part["predicted_ns"].mean())
            if len(self.timeline.sources):  # the syncs' and fetches' source lines
                r["sources"] = wait_lines(self.timeline, part["host_begin_ns"],
                                          part["host_end_ns"])
            r["advice"] = advice(r, part)
            out.append(r)
            i = j + 1
        return out

    def headline(self) -> dict:
        """The run's verdict in words, as ``summary()``'s first line and a
        figure's title say it (``headline.headline``): ``verdict``,
        ``text`` (the sentence), ``steps`` (which, in words), ``change``
        (the change in code, "" for none), ``fix`` and ``second`` (dicts,
        or None), ``gain`` (a fraction of the step time), ``busy`` (the
        GPU's computing share, a fraction), ``exposes``, ``evidence``
        (GPU idle ns by cause over the steady-state steps) and ``short``
        (a few words for a figure)."""
        return headline(self)

    def summary(self) -> str:
        """A short text to read first (see the module docs for the terms);
        names from the Timeline are data, not terminal commands: control
        characters come escaped (``cutimeline.text``)."""
        return terminal_text(summary_text(self))

    def to_dict(self) -> dict:
        """Everything but per-row arrays, as JSON-serialisable values."""
        return report_dict(self)

    def __repr__(self) -> str:
        """The window, its steps and the run's verdict with its first fix,
        in the words of ``summary()``'s first line (``headline.py``)."""
        return terminal_text(f"<Report {fmt_ns(self.window[1] - self.window[0])}, "
                             f"{len(self.steps)} steps, {self.headline()['short']}>")

    def _repr_html_(self) -> str:
        """Jupyter: the verdict line and the step table (``notebook.report_html``)."""
        return report_html(self)


def _range_fix(part: np.ndarray, fix: str, gain: str) -> tuple[str, float]:
    """The fix most steps of ``part`` name in column ``fix``, and its gain
    over their summed base step time (each step's gain weighted by it)."""
    names = [str(x) for x in part[fix]]
    top = max(dict.fromkeys(names), key=names.count)  # first seen wins a tie
    mine = np.array([n == top for n in names])
    base = part["predicted_ns"].astype(np.float64)
    base = np.where(base > 0, base, part["duration_ns"].astype(np.float64))
    g = np.nan_to_num(part[gain].astype(np.float64))
    return top, float((g * base)[mine].sum() / max(base[mine].sum(), 1.0))


def _write(row, j: Judgement) -> None:
    """A step row's verdict columns from its ``Judgement``."""
    row["verdict"] = j.verdict.value
    row["fix"], row["gain"] = j.fix, j.gain
    row["runner_fix"], row["runner_gain"] = j.second_fix, j.second_gain
    row["exposes"] = str(j.exposes)  # the word (plain str), as the tables hold it


def _find(keys: np.ndarray, value: int, what: str) -> int:
    hit = np.flatnonzero(keys == value)
    if len(hit) == 0:
        raise CutimelineError(f"The Timeline has no {what} {value}.")
    return int(hit[0])


def _steps_text(numbers: np.ndarray) -> str:
    return (f"steps {numbers.min()}–{numbers.max()}" if len(numbers) else "no steps")


def _pandas(t: np.ndarray):
    try:  # pandas is optional: imported only when a table is asked for as one
        import pandas as pd
    except ImportError:
        raise CutimelineError("Report tables as pandas need pandas: "
                              "pip install pandas.") from None
    return pd.DataFrame({n: t[n] for n in t.dtype.names})
