"""A Report as text to read first, and as a JSON-serialisable dict.

The text leads with the run's verdict over its steady-state steps (all
but the first, which pays for warm-up, when there are three or more): the
fix that gains most, with its predicted gain and step time, and the
change in code to make first (``headline.py``: the same words every
surface prints). Its header names what the Timeline was read from or made
by and the window every figure covers ("over the whole recording", "over
steps 3–5", "from the first to the last device activity"); the time
before the first step and after the last is a line of its own, as is
what the recorder's own cost did to the step (the verdicts are read
without it).
Where the Timeline has them, lines follow on the syncs' and DataLoader
fetches' source lines, compute (FLOP/s, MFU) and memory (the peak and who
held it); the verdict quotes the top source line of the syncs or fetches
it names.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..text import fmt_ns, pct as _pct, steps_from_text, warnings_text
from .advice import host_only_advice
from .headline import headline, steady
from .idle.gaps import CAUSES
from .replay.gpuwork import cannot_price, conv_advice, gpu_top_text
from .ranks_report import run_notes
from .tables.flops import compute_text
from .tables.memory import memory_text
from .tables.oneoff import one_off_text
from .tables.sources import quote
from .thresholds import THRESHOLDS

if TYPE_CHECKING:
    from .report import Report

__all__ = ["summary_text", "report_dict", "source_words", "top_k", "biggest_gaps",
           "SHOWN_SHARE", "WARM_UP_SHARE"]

SHOWN_SHARE = THRESHOLDS.shown_share  # why: analysis/thresholds.py
WARM_UP_SHARE = THRESHOLDS.warm_up_share  # why: analysis/thresholds.py


def _shares(idle: dict[str, int]) -> str:
    total = sum(idle.values())
    if total <= 0:
        return "none"
    parts = [(c, v / total) for c, v in idle.items() if v >= SHOWN_SHARE * total]
    parts.sort(key=lambda p: -p[1])
    return ", ".join(f"{c} {_pct(s)}" for c, s in parts)


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest values, largest first, ties in position
    order (``np.argsort(-x, kind="stable")[:k]``, sorting the candidates
    only)."""
    if len(x) > k > 0:
        cand = np.flatnonzero(x >= np.partition(x, len(x) - k)[len(x) - k])
    else:
        cand = np.arange(len(x))
    return cand[np.argsort(-x[cand], kind="stable")][:k]


def biggest_gaps(rep: Report, k: int = 3) -> list[dict]:
    """The k longest idle gaps of the primary device inside the window."""
    ln = rep.lanes
    if ln is None:
        return []
    d = ln.devices
    s, e = d.gstart[rep.primary], d.gstart[rep.primary + 1]
    w0, w1 = rep.window
    length = np.minimum(d.ge[s:e], w1) - np.maximum(d.gb[s:e], w0)
    best = s + top_k(length, k)
    t0 = rep.timeline.start_ns
    out = []
    for i in best:
        if length[i - s] <= 0:
            break
        causes = {c: int(d.amounts[i, j]) for j, c in enumerate(CAUSES)}
        out.append({"begin_s": (int(d.gb[i]) - t0) / 1e9, "length_ns": int(length[i - s]),
                    "device": int(ln.device_keys[rep.primary]),
                    "cause": CAUSES[int(np.argmax(d.amounts[i]))], "idle_ns": causes})
    return out


def _work(rep: Report) -> list[str]:
    """The lines on the tables a recording may add: the syncs' and
    fetches' source lines, compute, memory (none without the tables)."""
    tl = rep.timeline
    lines = []
    if len(tl.sources):
        t = rep.source_table()
        for kind, noun in (("sync", "syncs"), ("data", "DataLoader fetches")):
            mine = t[t["kind"] == kind][:3]
            if len(mine):
                lines.append(f"{noun} by source line: " + "; ".join(
                    f"{r['count']}× {quote(r)} ({fmt_ns(r['wait_ns'])})" for r in mine))
    c = rep.compute()
    if c is not None:
        lines.append(compute_text(c))
    m = rep.memory()
    if m is not None:
        lines += memory_text(m["devices"], tl.start_ns)
    return lines


def _gpu_side(rep: Report, h: dict) -> list[str]:
    """For a GPU-bound run: its top GPU ops (share, achieved rate, share of
    the peak), or why the GPU-side fixes cannot be priced."""
    if h["verdict"] != "GPU-bound":
        return []
    why = cannot_price(rep.timeline)
    if why:
        return [f"GPU-side fixes (tf32, bf16, fused_optimizer, compile) not predicted: {why}."]
    part, _ = steady(rep)
    b, e = part["host_begin_ns"], part["host_end_ns"]
    top = gpu_top_text(rep.timeline, b, e)
    return ([top] if top else []) + [f"• {a}." for a in conv_advice(rep.timeline, b, e)]


def _warm_up(rep: Report) -> str:
    """A warning ahead of the advice when one-off host costs (``oneoff.py``)
    take ``WARM_UP_SHARE`` (a fifth) or more of the steady steps the
    headline reads: those steps measure warm-up, not the loop."""
    rows = rep.one_offs()
    if rep.lanes is None or not len(rows):
        return ""
    part, _ = steady(rep)
    b0, b1 = part["host_begin_ns"], part["host_end_ns"]
    inside = ((rows["begin_ns"][:, None] >= b0) & (rows["begin_ns"][:, None] < b1)).any(1)
    extra = int((rows["self_ns"] - rows["typical_ns"])[inside].sum())
    span = int((b1 - b0).sum())
    if span <= 0 or extra < WARM_UP_SHARE * span:
        return ""
    top = rows[inside][0]
    these = "these steps" if part["number"][0] != -1 else "the window"
    return (f"Warm-up first: one-off host costs take {_pct(extra / span)} of {these} "
            f"({top['name']} {fmt_ns(top['self_ns'])} once, typically "
            f"{fmt_ns(top['typical_ns'])}); profile after a few steps to see the loop. ")


def summary_text(rep: Report) -> str:
    tl, o = rep.timeline, rep.overall
    w0, w1 = rep.window
    h = headline(rep)
    first = f"Verdict: {h['text']} ({h['steps']}). " + _warm_up(rep) + \
        (f"Change first: {h['change']}." if h["change"] else "")
    head = [f"cutimeline report — {source_words(tl.meta)}"]
    if tl.meta.get("device_name"):
        head.append(str(tl.meta["device_name"]))
    n = len(rep.steps)
    head.append(f"{n} step{'s' * (n != 1)}{steps_from_text(tl.meta)}, {fmt_ns(w1 - w0)} "
                f"{_over(rep)}")
    if tl.meta.get("simulated"):
        head.append("SIMULATED")
    lines = [first, ", ".join(head), *run_notes(tl),  # cut, partial, ranks, straggler
             *([warnings_text(tl.warnings, first=True)] if tl.warnings else []),
             *_outside(rep)]
    if rep.lanes is None:
        lines += _host_only(rep) + _work(rep)
        return "\n".join(lines)
    idle = {c: int(o[f"{c}_ns"]) for c in CAUSES}
    dev = int(rep.lanes.device_keys[rep.primary])
    line = (f"{_over(rep)[0].upper()}{_over(rep)[1:]}, as recorded: GPU busy "
            f"{_pct(o['busy_frac'])} (device {dev}); idle {_pct(1 - o['busy_frac'])}: "
            f"{_shares(idle)}")
    if o["communication_ns"] > 0:  # busy, but with collectives alone
        line += (f"; collectives alone (exposed communication) "
                 f"{_pct(o['communication_ns'] / max(int(o['duration_ns']), 1))}")
    st = rep.streams[rep.streams["device"] == dev]
    if len(st) > 1:
        line += "; streams " + ", ".join(f"{s['stream']} {_pct(s['busy_frac'])}"
                                         for s in st)
    lines.append(line)
    warm = one_off_text(rep.one_offs(), w1 - w0)
    if warm:
        lines.append(warm)
    for r in rep.ranges():
        lines.append(f"• {r['text']}: {r['advice']}")
    lines += _gpu_side(rep, h)
    gaps = biggest_gaps(rep)
    if gaps:
        lines.append("biggest gaps: " + "; ".join(
            f"{fmt_ns(g['length_ns'])} at {g['begin_s']:.3f} s ({_shares(g['idle_ns'])})"
            for g in gaps))
    d = rep.devices[rep.primary]
    if not math.isnan(d["lead_p50_ns"]):
        lines.append(f"CPU lead median {fmt_ns(d['lead_p50_ns'])}, p95 "
                     f"{fmt_ns(d['lead_p95_ns'])}, max {fmt_ns(d['lead_max_ns'])}; "
                     f"queue depth mean {d['queue_mean']:.1f}, max {d['queue_max']}")
    lines += _compensation(rep)
    lines += _work(rep)
    h = rep.hta
    if h is not None and not h["temporal_breakdown"]["rows"]:
        lines.append(f"HTA-compatible: no GPU work in HTA's window ({h['window']}); "
                     f"HTA reports nothing for it either.")
    elif h is not None:
        t = h["temporal_breakdown"]
        ib = h["idle_breakdown"]
        tot = sum(int(ib[k].sum()) for k in ("host_wait_ns", "kernel_wait_ns", "other_ns"))
        wait = f"; host wait {_pct(ib['host_wait_ns'].sum() / tot)} of stream idle" \
            if tot > 0 else ""
        lines.append(f"HTA-compatible ({h['window']}): idle {t['idle_pct']:.1f}%, "
                     f"compute {t['compute_pct']:.1f}%, non-compute "
                     f"{t['non_compute_pct']:.1f}%{wait}")
    return "\n".join(lines)


#: what recorded the Timeline, by ``meta["source"]``; other sources
#: (handmade, test) are named as they are
_SOURCES = {"kineto": "read as a torch.profiler trace", "record": "recorded by cutimeline",
            "merge": "ranks merged by cutimeline", "synthetic": "a synthetic Timeline"}


def source_words(meta: dict) -> str:
    """What the Timeline was read from or made by: "read as a torch.profiler
    trace (run.json.gz)", "recorded by cutimeline". A ``.ctl`` file keeps
    the source of what it holds (``ctl.load`` returns its meta as saved)."""
    src = str(meta.get("source") or "recording")
    words = _SOURCES.get(src, src)
    if src == "kineto" and meta.get("file"):
        words += f" ({meta['file']})"
    return words


def _over(rep: Report) -> str:
    """The report's window after its length: "over the whole recording",
    "over steps 3–5", "from the first to the last device activity"."""
    w = rep.settings.get("window", "the whole recording")
    return "from the first to the last device activity" \
        if w == "first to last device activity" else f"over {w}"


def _outside(rep: Report) -> list[str]:
    """The time the steps do not cover, each stretch in a sentence: for
    the default window of a trace without steps, the host-only time it
    leaves out (the report's figures do not count it); with steps, the
    time before the first step and after the last (``Report.outside``),
    busy and idle by cause as the steps' are."""
    if rep.settings.get("window") == "first to last device activity":
        tl = rep.timeline
        before, after = rep.window[0] - tl.start_ns, tl.end_ns - rep.window[1]
        if before <= 0 and after <= 0:
            return []
        return [f"Not counted: {fmt_ns(before)} of host-only time before the first "
                f"device activity, {fmt_ns(after)} after the last."]
    lines = []
    for name, o in rep.outside.items():
        span = max(o["end_ns"] - o["begin_ns"], 1)
        lines.append(f"{name} the {'first' if name == 'before' else 'last'} step: "
                     f"{fmt_ns(span)}, GPU busy {_pct(o['busy_ns'] / span)}, idle "
                     f"{_shares(o['idle_ns'])}")
    return [f"{line[0].upper()}{line[1:]}." for line in lines]


def _compensation(rep: Report) -> list[str]:
    """What the recorder's own cost did to the steady-state steps: the
    step and GPU busy as recorded and without it (the base the verdicts
    are read on)."""
    c, o = rep.compensation, rep.overall
    left = rep.timeline.meta.get("recorder_left")
    if c is None and left:  # a simulated host: nothing to replay away
        n = left.get("gc_collections", 0)
        gc = (f"; Python's garbage collections, which the simulation sets off, "
              f"left it too ({n}, {fmt_ns(left.get('gc_ns', 0))})") if n else ""
        return ["The recorder's own time left the simulated host as it was spent "
                f"(torch's call into it priced at {fmt_ns(left.get('entry_ns', 0))}/op, "
                f"{fmt_ns(left.get('module_entry_ns', 0))} per module call; the rest "
                f"measured){gc}; the verdicts are read on the program's own host time."]
    if c is None:
        return []
    part, _ = steady(rep)
    rec, pred = float(part["duration_ns"].mean()), float(part["predicted_ns"].mean())
    text = (f"The recorder's own cost ({fmt_ns(c.overhead_ns_per_op)}/op"
            + (f", {fmt_ns(c.overhead_ns_per_launch)}/launch"
               if c.overhead_ns_per_launch else "")
            + f") moved the step from {fmt_ns(pred)} to {fmt_ns(rec)} "
            f"({(rec - pred) / max(pred, 1):+.0%})")
    if rep.lanes is not None and not math.isnan(o["predicted_busy_frac"]):
        busy = float((part["predicted_busy_frac"] * part["predicted_ns"]).sum()
                     / max(part["predicted_ns"].sum(), 1))
        text += (f", GPU busy {_pct(busy)} without it (recorded "
                 f"{_pct(float(part['busy_ns'].sum() / max(part['duration_ns'].sum(), 1)))})")
    return [text + "; the verdicts are read without it."]


def _host_only(rep: Report) -> list[str]:
    o = rep.overall
    span = max(int(o["duration_ns"]), 1)
    lines = [f"No GPU work in this Timeline: a host-side summary. {o['ops']} ops; "
             f"host time in DataLoader fetches {fmt_ns(o['host_data_ns'])} "
             f"({_pct(o['host_data_ns'] / span)}), in syncs {fmt_ns(o['host_sync_ns'])}."]
    if len(rep.steps):
        d = rep.steps["duration_ns"]
        lines.append(f"steps: median {fmt_ns(np.median(d))}, min {fmt_ns(d.min())}, "
                     f"max {fmt_ns(d.max())}")
    ops = rep.op_table()
    if len(ops):  # self time: nested ops (profiler traces) counted once
        top = ops[np.argsort(-ops["cpu_self_ns"], kind="stable")[:5]]
        lines.append("most host time: " + ", ".join(
            f"{r['name']} {fmt_ns(r['cpu_self_ns'])} ({r['count']}×)" for r in top))
    lines += _compensation(rep)
    if rep.timeline.meta.get("simulated"):
        lines.append("• no work reached the simulated device: the tensors are on the CPU; "
                     f"{host_only_advice(rep.timeline.meta)}.")
    else:
        lines.append(f"• {rep.ranges()[0]['advice']}" if not len(rep.steps) else
                     "• record on a GPU (or ctl.SimGPU()) to see the device side.")
    return lines


def _plain(x: Any) -> Any:
    """numpy values and containers → JSON-ready Python values (NaN → None)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        if x.dtype.names:
            return [_plain(dict(zip(x.dtype.names, row.tolist()))) for row in x]
        return [_plain(v) for v in x.tolist()]
    if isinstance(x, np.void) and x.dtype.names:
        return _plain(dict(zip(x.dtype.names, x.tolist())))
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def report_dict(rep: Report) -> dict:
    tl = rep.timeline
    c = rep.compensation
    comp = None if c is None else {"overhead_ns_per_op": c.overhead_ns_per_op,
                                   "overhead_ns_per_launch": c.overhead_ns_per_launch,
                                   "removed_ns": c.removed_ns}
    if comp is not None:
        s = rep.steps if len(rep.steps) else np.array([rep.overall])
        comp["predicted_step_ns"] = float(np.median(s["predicted_ns"]))
        comp["recorded_step_ns"] = float(np.median(s["duration_ns"]))
        comp["predicted_busy_frac"] = rep.overall["predicted_busy_frac"]
    out = {"verdict": headline(rep),
           "source": tl.meta.get("source"), "simulated": bool(tl.meta.get("simulated")),
           "window_ns": list(rep.window), "duration_ns": rep.window[1] - rep.window[0],
           "overall": rep.overall, "steps": rep.steps, "ranges": rep.ranges(),
           "devices": rep.devices, "streams": rep.streams,
           "biggest_gaps": biggest_gaps(rep) if rep.lanes is not None else [],
           "hta": rep.hta, "compensation": comp, "settings": rep.settings,
           "outside_steps": rep.outside,
           "steps_from": tl.meta.get("steps_from"), "warnings": list(tl.warnings),
           "primary_device": None if rep.lanes is None else
           int(rep.lanes.device_keys[rep.primary])}
    if len(tl.sources):  # only with the tables: a Timeline without keeps its dict
        out["sources"] = rep.source_table()
    if len(tl.flops):
        out["compute"] = rep.compute()
    if len(tl.memory):
        out["memory"] = rep.memory()
    return _plain(out)
