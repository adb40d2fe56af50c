"""What to try for each verdict, in words, with the numbers behind it.

``advice`` turns a range of steps with one verdict (``Report.ranges``)
into a sentence: the evidence (where the idle time went, the offenders)
and the change that gains most, as the replay predicts it (the range's
``fix`` and ``gain``: ``verdicts/causal.py``). A "mixed" range names both
of its fixes. A sync-bound range whose syncs expose a fetch or the
host's Python says so. Where the
Timeline has a sources table, a verdict that names syncs or DataLoader
fetches quotes their top source line with its count, and one led by an op
(GPU-, launch-bound, host-only) says where that op was called most
(``sources.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..text import fmt_ns, pct
from ..timeline.schema import NONE
from .idle.gaps import CauseName
from .replay.edits import EDITS
from .tables.sources import counted, quote
from .verdicts.causal import MIN_GAIN, Bottleneck
from .verdicts.margins import VERDICT_CAUSES, Verdict, fix_words

__all__ = ["ADVICE", "WAITING", "advice", "SIM_UNUSED", "host_only_advice"]

#: the change most likely to help, by verdict (a "mixed" range gets those
#: of its two leading causes)
ADVICE = {
    Verdict.INPUT_BOUND: "try num_workers > 0 (if it is 0), pin_memory=True and "
        "persistent_workers=True, or make the dataset's __getitem__ cheaper",
    Verdict.SYNC_BOUND: "avoid .item(), .cpu(), .tolist() and printing GPU values "
        "inside the step: keep the values on the GPU and read them "
        "every N steps",
    Verdict.LAUNCH_BOUND: "launch fewer, larger kernels: torch.compile, CUDA graphs, "
        "fused/foreach optimizers, a larger batch",
    Verdict.HOST_BOUND: "find what the host does between ops (user Python, logging, "
        "checkpointing, metrics: py-spy or cProfile shows it) and move it "
        "out of the step or overlap it with GPU work",
    Verdict.GPU_BOUND: "the host keeps up; only faster GPU work helps (mixed "
        "precision, TF32, better kernels for the top ops)",
    Verdict.DEPENDENCY_BOUND: "work was queued but waited on other streams or "
        "events: check wait_stream / event waits and overlap",
    Verdict.COMMUNICATION_BOUND: "overlap communication with compute (DDP buckets "
        "that start during backward, FSDP prefetch, async "
        "collectives waited on late), send fewer or smaller "
        "messages, or find the rank the others wait for "
        "(ctl.merge of every rank's recording names stragglers)",
    Verdict.UNKNOWN: "the trace lacks launch times for the work that ended the gaps",
    Verdict.HOST_ONLY: "record on a GPU (or ctl.SimGPU()) to see the device side",
}

#: host-only where a simulated GPU was recording: the device was there, unused
SIM_UNUSED = ("put the model and its batches on the simulated GPU: .to(\"cuda\") under "
              "`cutimeline record --device sim` or SimGPU.as_cuda(), or on \"meta\" "
              "tensors")


def host_only_advice(meta: dict) -> str:
    """What to do about a host-only Timeline: record a device, or (where a
    simulated one recorded and got nothing) put the tensors on it."""
    return SIM_UNUSED if meta.get("simulated") else ADVICE[Verdict.HOST_ONLY]


# what the GPU's idle time was spent on, by cause ("62% of GPU idle time ...")
WAITING = {"data": "waiting for DataLoader fetches", "sync": "following host syncs",
           "launch": "waiting for the host to launch ops",
           "host": "with the host busy outside op launches",
           "dependency": "queued work waiting on streams or events",
           "unknown": "of unknown cause",
           "communication": "in collectives with no compute beside them"}


def advice(r: dict, part: np.ndarray) -> str:
    """The advice sentence for a range ``r`` of steps ``part`` (rows of
    the step table); see the module doc. With collectives alone on the
    device the shares are of idle and exposed-communication time, and the
    sentence says so."""
    text = _advice(r, part)
    if "communication" in r["idle_ns"]:
        text = text.replace("of its idle time", "of its idle + exposed-communication "
                            "time").replace("of GPU idle time", "of GPU idle + "
                                            "exposed-communication time")
    return text


@dataclass(frozen=True)
class _Range:
    """What every verdict's sentence reads of a range: the range ``r``
    (``Report.ranges``), its step rows ``part``, its offenders, each
    cause's share of its idle time, and the words each sentence uses
    (which steps, GPU busy, the top two ops, where the top op was called)."""
    r: dict
    part: np.ndarray
    off: dict
    share: dict
    steps: str
    busy: str
    tops: str
    n_steps: int
    called: str


def _advice(r: dict, part: np.ndarray) -> str:
    off = r["offenders"]
    idle = r["idle_total_ns"]
    share = {c: (r["idle_ns"].get(c, 0) / idle if idle else 0.0) for c in VERDICT_CAUSES}
    steps = (f"step {r['first']}" if r["first"] == r["last"] else
             f"steps {r['first']}–{r['last']}") if r["first"] != NONE else "the window"
    rng = _Range(r, part, off, share, steps, pct(r["busy_frac"]),
                 ", ".join(n for n, _ in off.get("ops", [])[:2]),
                 r["steps"] if r["first"] != NONE else 1, _lead(off.get("source")))
    text, fix = _SAYINGS.get(r["verdict"], _unknown)(rng)
    return f"{text} — {_change(r, fix)}."


def _change(r: dict, fallback: str | None) -> str:
    """The change to make first: the range's fix as code with its
    predicted gain (both fixes for "mixed"); ``fallback`` (the verdict's
    own words) or ``ADVICE`` where no replayed fix names it."""
    edit = EDITS.get(r.get("fix", ""))
    if r["verdict"] == Verdict.MIXED and edit is None:  # bounds: no code to quote
        return (f"{fix_words(r.get('fix', ''), r.get('gain', 0.0))}; or "
                f"{fix_words(r.get('runner_fix', ''), r.get('runner_gain', 0.0))}")
    if r["verdict"] == Verdict.MIXED:
        other = EDITS.get(r.get("runner_fix", ""))
        second = f"; or {other.code} (predicted −{pct(r['runner_gain'])})" \
            if other is not None else f"; or {fix_words(r['runner_fix'], r['runner_gain'])}"
        return f"{edit.code} (predicted −{pct(r['gain'])}){second}"
    if edit is not None and edit.on_gpu and r["verdict"] == Verdict.GPU_BOUND \
            and r.get("gain", 0.0) >= MIN_GAIN:  # a GPU-side fix (replay/gpuside.py)
        return f"{edit.code} (predicted −{pct(r['gain'])} of the step)"
    if edit is None or r["verdict"] in (Verdict.GPU_BOUND, Verdict.HOST_ONLY,
                                        Verdict.UNKNOWN):
        return fallback or ADVICE[r["verdict"]]
    return f"{fallback or edit.code} (predicted −{pct(r['gain'])} of the step)"


# -- one sentence per verdict: (what the range shows, the fix, None: ADVICE's) ----

def _mixed(c: _Range) -> tuple[str, None]:
    a, b = sorted(VERDICT_CAUSES, key=lambda x: -c.share[x])[:2]  # stable: ties by Cause
    # the offenders are the top cause's: its leading op, when launch
    lead_a = f" ({c.called[2:]})" if c.called and a == CauseName.LAUNCH else ""
    return (f"{c.steps}: GPU busy {c.busy}; no single fix: "
            f"{fix_words(c.r.get('fix', ''), c.r.get('gain', 0.0))} and "
            f"{fix_words(c.r.get('runner_fix', ''), c.r.get('runner_gain', 0.0))}; "
            f"idle time {a} {pct(c.share[a])}"
            f"{_where(c.r, a, c.n_steps) or lead_a}, {b} {pct(c.share[b])}"
            f"{_where(c.r, b, c.n_steps)}"), None


def _input_bound(c: _Range) -> tuple[str, str | None]:
    off = c.off
    spans = off.get("spans", [])
    what = (f"{off.get('count', 0)} fetches, mean {fmt_ns(off.get('mean_ns', 0))}"
            if spans else "DataLoader fetches")
    workers = _num_workers(n for n, _ in spans)
    if workers is not None:
        what += f", num_workers={workers}"
    what += _where(c.r, CauseName.DATA, c.n_steps, "; ", "")
    text = (f"{c.steps}: {pct(c.share['data'])} of GPU idle time is spent waiting "
            f"for DataLoader fetches ({what}); GPU busy {c.busy}")
    if workers:  # workers already: more of them, or a cheaper dataset
        return text, (f"raise num_workers above {workers}, use pin_memory=True and "
                      f"persistent_workers=True, or make the dataset's __getitem__ cheaper")
    if workers == 0:
        return text, "try num_workers > 0 and pin_memory=True"
    return text, None


def _sync_bound(c: _Range) -> tuple[str, None]:
    mods = ", ".join(n for n, _ in c.off.get("modules", [])[:1])
    text = (f"{c.steps}: {c.off.get('count', 0)} host syncs"
            + (f", top {c.tops}" if c.tops else "")
            + (f" in {mods}" if mods else "") + _where(c.r, CauseName.SYNC, c.n_steps, "; ", "")
            + f"; GPU busy {c.busy}, {pct(c.share['sync'])} of its idle time right after "
            f"the syncs")
    exposed = {Bottleneck.INPUT: CauseName.DATA,
               Bottleneck.HOST: CauseName.HOST}.get(c.r.get("exposes", ""))
    if exposed:  # the idle time the syncs expose (``causal.py``, rule 3)
        text += (f", {pct(c.share[exposed])} "
                 + ("in DataLoader fetches" if exposed == CauseName.DATA
                    else "in the host's Python")
                 + " the syncs expose: without them that work overlaps queued GPU work")
    return text, None


def _launch_bound(c: _Range) -> tuple[str, str | None]:
    per_step = c.part["ops"].mean() if len(c.part) else 0
    unit = "ops per step" if c.r["first"] != NONE else "ops"  # no steps: the window
    text = (f"{c.steps}: GPU busy {c.busy}; {pct(c.share['launch'])} of its idle "
            f"time waits for the host to launch ops ({per_step:.0f} {unit}"
            + (f"; most host time in {c.tops}" if c.tops else "") + c.called + ")")
    if c.tops.startswith("inductor::"):  # compiled already: its launches cost
        return text, ("the top host time is torch.compile graphs launching their "
                      "kernels: try mode=\"reduce-overhead\" (CUDA graphs), or a larger batch")
    return text, None


def _host_bound(c: _Range) -> tuple[str, None]:
    spans = ", ".join(n for n, _ in c.off.get("spans", [])[:2])
    return (f"{c.steps}: GPU busy {c.busy}; {pct(c.share['host'])} of its idle time "
            f"the host was busy outside op launches or idle ("
            f"{c.off.get('count', 0)} op-free stretches, "
            f"{fmt_ns(c.off.get('total_ns', 0))} in all"
            + (f"; spans {spans}" if spans else "")
            + (f"; CPU ops {c.tops}" if c.tops else "") + ")"), None


def _gpu_bound(c: _Range) -> tuple[str, None]:
    lead = c.part["lead_max_ns"].max() if len(c.part) else NONE
    return (f"{c.steps}: GPU busy {c.busy}" +
            (f", the host runs up to {fmt_ns(lead)} ahead" if lead != NONE else "")
            + (f"; top GPU work {c.tops}" if c.tops else "") + c.called), None


def _dependency_bound(c: _Range) -> tuple[str, None]:
    where = ", ".join(n for n, _ in c.off.get("spans", [])[:2])
    return (f"{c.steps}: GPU busy {c.busy}; {pct(c.share['dependency'])} of its idle "
            f"time is queued work waiting" + (f" ({where})" if where else "")), None


def _communication_bound(c: _Range) -> tuple[str, None]:
    part = c.part
    coll = part["communication_ns"].sum() / max(int(part["duration_ns"].sum()), 1)
    return (f"{c.steps}: GPU busy {c.busy}, but {pct(coll)} of the time only "
            f"collectives ran ({pct(c.share['communication'])} of its idle + "
            f"exposed-communication time" + (f"; top {c.tops}" if c.tops else "") + ")"), None


def _host_only(c: _Range) -> tuple[str, None]:
    return (f"{c.steps}: no GPU work recorded"
            + (f"; most host time in {c.tops}" if c.tops else "") + c.called), None


def _unknown(c: _Range) -> tuple[str, None]:
    return f"{c.steps}: GPU busy {c.busy}; the causes of its idle time are unknown", None


_SAYINGS = {Verdict.MIXED: _mixed, Verdict.INPUT_BOUND: _input_bound,
            Verdict.SYNC_BOUND: _sync_bound, Verdict.LAUNCH_BOUND: _launch_bound,
            Verdict.HOST_BOUND: _host_bound, Verdict.GPU_BOUND: _gpu_bound,
            Verdict.DEPENDENCY_BOUND: _dependency_bound,
            Verdict.COMMUNICATION_BOUND: _communication_bound,
            Verdict.HOST_ONLY: _host_only, Verdict.UNKNOWN: _unknown}


def _where(r: dict, cause: str, steps: int, before: str = " (", after: str = ")") -> str:
    """The top source line of the syncs (cause "sync") or fetches ("data")
    of range ``r`` with its count ("" without one; ``sources.counted``)."""
    w = r.get("sources")
    if w is None or cause not in (CauseName.SYNC, CauseName.DATA):
        return ""
    said = counted(w["sync"], w["syncs"], "syncs", steps) if cause == CauseName.SYNC else \
        counted(w["data"], w["fetches"], "fetches", steps)
    return f"{before}{said}{after}" if said else ""


def _lead(line: dict | None) -> str:
    """Where a verdict's top op was called most: "; aten::mm: 40 of 48
    calls at model.py:12 `y = x @ w`" ("" when unknown)."""
    if not line:
        return ""
    return f"; {line['name']}: {line['count']} of {line['calls']} calls at {quote(line)}"


def _num_workers(names) -> int | None:
    """num_workers=N from DataLoader span names, when the recorder put it
    there (e.g. "next(DataLoader, num_workers=0)")."""
    for n in names:
        m = re.search(r"num_workers=(\d+)", str(n))
        if m:
            return int(m.group(1))
    return None
