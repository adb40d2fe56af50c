"""What to try for each verdict, in words, with the numbers behind it.

``advice`` turns a range of steps with one verdict (``Report.ranges``)
into a sentence: where the idle time went, the offenders, and the change
most likely to help. A "mixed" range gets the advice for both of its
leading causes. The margin itself (top share, runner-up) is said by
``margins.verdict_text``, which the summary prints beside it. Where the
Timeline has a sources table, a verdict that names syncs or DataLoader
fetches quotes their top source line with its count, and one led by an op
(GPU-, launch-bound, host-only) says where that op was called most
(``sources.py``).
"""

from __future__ import annotations

import re

import numpy as np

from ..timeline.schema import NONE
from .tables.sources import counted, quote
from .verdicts.margins import BY_CAUSE, VERDICT_CAUSES
from .words import fmt_ns, pct

__all__ = ["ADVICE", "WAITING", "advice"]

ADVICE = {
    "input-bound": "try num_workers > 0 (if it is 0), pin_memory=True and "
                   "persistent_workers=True, or make the dataset's __getitem__ cheaper",
    "sync-bound": "avoid .item(), .cpu(), .tolist() and printing GPU values "
                  "inside the step: keep the values on the GPU and read them "
                  "every N steps",
    "launch-bound": "launch fewer, larger kernels: torch.compile, CUDA graphs, "
                    "fused/foreach optimizers, a larger batch",
    "host-bound": "find what the host does between ops (user Python, logging, "
                  "checkpointing, metrics: py-spy or cProfile shows it) and move it "
                  "out of the step or overlap it with GPU work",
    "GPU-bound": "the host keeps up; only faster GPU work helps (mixed "
                 "precision, TF32, better kernels for the top ops)",
    "dependency-bound": "work was queued but waited on other streams or "
                        "events: check wait_stream / event waits and overlap",
    "communication-bound": "overlap communication with compute (DDP buckets "
                           "that start during backward, FSDP prefetch, async "
                           "collectives waited on late), send fewer or smaller "
                           "messages, or find the rank the others wait for "
                           "(ctl.merge of every rank's recording names stragglers)",
    "unknown": "the trace lacks launch times for the work that ended the gaps",
    "host-only": "record on a GPU (or ctl.SimGPU()) to see the device side",
}

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


def _advice(r: dict, part: np.ndarray) -> str:
    v, off = r["verdict"], r["offenders"]
    idle = r["idle_total_ns"]
    share = {c: (r["idle_ns"].get(c, 0) / idle if idle else 0.0) for c in VERDICT_CAUSES}
    steps = (f"step {r['first']}" if r["first"] == r["last"] else
             f"steps {r['first']}–{r['last']}") if r["first"] != NONE else "the window"
    busy = pct(r["busy_frac"])
    tops = ", ".join(n for n, _ in off.get("ops", [])[:2])
    n_steps = r["steps"] if r["first"] != NONE else 1
    called = _lead(off.get("source"))
    if v == "mixed":
        a, b = sorted(VERDICT_CAUSES, key=lambda c: -share[c])[:2]  # stable: ties by Cause
        # the offenders are the top cause's: its leading op, when launch
        lead_a = f" ({called[2:]})" if called and a == "launch" else ""
        return (f"{steps}: GPU busy {busy}; no single cause: {a} {pct(share[a])}"
                f"{_where(r, a, n_steps) or lead_a} and {b} {pct(share[b])}"
                f"{_where(r, b, n_steps)}"
                f" of its idle time — for {a}: "
                f"{ADVICE[BY_CAUSE[a]]}; for {b}: {ADVICE[BY_CAUSE[b]]}.")
    if v == "input-bound":
        spans = off.get("spans", [])
        what = (f"{off.get('count', 0)} fetches, mean {fmt_ns(off.get('mean_ns', 0))}"
                if spans else "DataLoader fetches")
        workers = _num_workers(n for n, _ in spans)
        if workers is not None:
            what += f", num_workers={workers}"
        what += _where(r, "data", n_steps, "; ", "")
        text = (f"{steps}: {pct(share['data'])} of GPU idle time is spent waiting "
                f"for DataLoader fetches ({what}); GPU busy {busy}")
        if workers:  # workers already: more of them, or a cheaper dataset
            return (f"{text} — raise num_workers above {workers}, use pin_memory=True "
                    f"and persistent_workers=True, or make the dataset's "
                    f"__getitem__ cheaper.")
        if workers == 0:
            return f"{text} — try num_workers > 0 and pin_memory=True."
    elif v == "sync-bound":
        mods = ", ".join(n for n, _ in off.get("modules", [])[:1])
        text = (f"{steps}: {pct(share['sync'])} of GPU idle time follows host "
                f"syncs ({off.get('count', 0)} syncs" + (f", top {tops}" if tops else "")
                + (f" in {mods}" if mods else "") + _where(r, "sync", n_steps, "; ", "")
                + f"); GPU busy {busy}")
    elif v == "launch-bound":
        per_step = part["ops"].mean() if len(part) else 0
        unit = "ops per step" if r["first"] != NONE else "ops"  # no steps: the window
        text = (f"{steps}: GPU busy {busy}; {pct(share['launch'])} of its idle "
                f"time waits for the host to launch ops ({per_step:.0f} {unit}"
                + (f"; most host time in {tops}" if tops else "") + called + ")")
        if tops.startswith("inductor::"):  # compiled already: its launches cost
            return (f"{text} — the top host time is torch.compile graphs launching "
                    f"their kernels: try mode=\"reduce-overhead\" (CUDA graphs), or "
                    f"a larger batch.")
    elif v == "host-bound":
        spans = ", ".join(n for n, _ in off.get("spans", [])[:2])
        text = (f"{steps}: GPU busy {busy}; {pct(share['host'])} of its idle time "
                f"the host was busy outside op launches or idle ("
                f"{off.get('count', 0)} op-free stretches, {fmt_ns(off.get('total_ns', 0))}"
                f" in all" + (f"; spans {spans}" if spans else "")
                + (f"; CPU ops {tops}" if tops else "") + ")")
    elif v == "GPU-bound":
        lead = part["lead_max_ns"].max() if len(part) else NONE
        text = (f"{steps}: GPU busy {busy}" +
                (f", the host runs up to {fmt_ns(lead)} ahead" if lead != NONE else "")
                + (f"; top GPU work {tops}" if tops else "") + called)
    elif v == "dependency-bound":
        where = ", ".join(n for n, _ in off.get("spans", [])[:2])
        text = (f"{steps}: GPU busy {busy}; {pct(share['dependency'])} of its idle "
                f"time is queued work waiting" + (f" ({where})" if where else ""))
    elif v == "communication-bound":
        coll = part["communication_ns"].sum() / max(int(part["duration_ns"].sum()), 1)
        text = (f"{steps}: GPU busy {busy}, but {pct(coll)} of the time only "
                f"collectives ran ({pct(share['communication'])} of its idle + "
                f"exposed-communication time" + (f"; top {tops}" if tops else "") + ")")
    elif v == "host-only":
        text = f"{steps}: no GPU work recorded" + (
            f"; most host time in {tops}" if tops else "") + called
    else:
        text = f"{steps}: GPU busy {busy}; the causes of its idle time are unknown"
    return f"{text} — {ADVICE[v]}."


def _where(r: dict, cause: str, steps: int, before: str = " (", after: str = ")") -> str:
    """The top source line of the syncs (cause "sync") or fetches ("data")
    of range ``r`` with its count ("" without one; ``sources.counted``)."""
    w = r.get("sources")
    if w is None or cause not in ("sync", "data"):
        return ""
    said = counted(w["sync"], w["syncs"], "syncs", steps) if cause == "sync" else \
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
