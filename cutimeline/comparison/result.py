"""What ``compare`` found: the ``Comparison`` of the three passes (step
times, overheads, the op-stream match, trace sizes, GPU time per matched
op in ``GpuAgreement``) and its markdown table.

The passes themselves, and how each number is measured: ``runner``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..rendering.figure import plot_compare
from ..timeline.timeline import Timeline
from .opmatch import OpMatch

__all__ = ["Comparison", "GpuAgreement", "PASSES"]

PASSES = ("none", "cutimeline", "profiler")
_LABEL = {"none": "uninstrumented", "cutimeline": "cutimeline", "profiler": "torch.profiler"}
TOLERANCE = 0.05   # GPU times agree when within 5 %


@dataclass(frozen=True, eq=False)
class GpuAgreement:
    """GPU time per matched op that has device work on either side (ns):
    ``ours_ns`` (our BEGIN→END event span), ``theirs_ns`` (the profiler's
    kernels, memcpys and memsets of that op), ``kernels`` (how many)."""

    names: tuple[str, ...]
    ours_ns: np.ndarray
    theirs_ns: np.ndarray
    kernels: np.ndarray

    @property
    def error(self) -> np.ndarray:
        """ours ÷ theirs − 1 per op (NaN where the profiler saw no work)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.theirs_ns > 0, self.ours_ns / self.theirs_ns - 1, np.nan)

    def summary(self, tolerance: float = TOLERANCE) -> dict[str, Any]:
        """Over ops with exactly one kernel on the profiler's side: how many,
        the median |error|, the fraction within ``tolerance``; and totals."""
        one = (self.kernels == 1) & (self.ours_ns > 0)
        err = np.abs(self.error[one])
        return {"ops": len(self.names), "single_kernel_ops": int(one.sum()),
                "median_abs_error": float(np.median(err)) if len(err) else float("nan"),
                "within_tolerance": float((err <= tolerance).mean()) if len(err)
                else float("nan"), "tolerance": tolerance,
                "ours_total_ns": int(self.ours_ns.sum()),
                "theirs_total_ns": int(self.theirs_ns.sum()),
                "only_ours": int(((self.ours_ns > 0) & (self.theirs_ns == 0)).sum()),
                "only_theirs": int(((self.ours_ns == 0) & (self.theirs_ns > 0)).sum())}


@dataclass(frozen=True, eq=False)
class Comparison:
    """What ``compare`` found. ``step_ns``: per pass ("none", "cutimeline",
    "profiler") the timed step times (ns), one row per round; ``match``: the op-stream
    ``OpMatch``; ``gpu``: a ``GpuAgreement`` on CUDA, else None; ``sizes``:
    bytes on disk (see ``runner._sizes``); ``ours``: our Timeline of the compared
    steps; ``theirs``: the imported profiler trace; ``meta``: the settings."""

    step_ns: dict[str, np.ndarray]
    match: OpMatch
    gpu: GpuAgreement | None
    sizes: dict[str, Any]
    ours: Timeline
    theirs: Timeline
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def median_ns(self) -> dict[str, float]:
        """Median step time of each pass over all rounds (ns)."""
        return {k: float(np.median(v)) for k, v in self.step_ns.items()}

    @property
    def overhead(self) -> dict[str, float]:
        """Median step time ÷ the uninstrumented one, per instrumented pass:
        per round, then the median over rounds (drift between rounds, as on
        a shared machine, cancels within each)."""
        none = np.median(self.step_ns["none"], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return {k: float(np.median(np.median(self.step_ns[k], axis=1) / none))
                    for k in ("cutimeline", "profiler")}

    def plot(self, path: Any = None, **kwargs: Any) -> Any:
        """Both Timelines side by side (``plot_compare``), by default the
        first compared step (both number the steps alike); returns the
        Figure. ``kwargs`` go to ``plot_compare``."""
        steps = self.ours.step_numbers()
        kwargs.setdefault("window", int(steps[0]) if len(steps) else None)
        kwargs.setdefault("labels", ("cutimeline", "torch.profiler, imported"))
        return plot_compare(self.ours, self.theirs, path, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers (times in ns)."""
        return {"meta": dict(self.meta),
                "step_ns": {k: v.tolist() for k, v in self.step_ns.items()},
                "median_ns": self.median_ns, "overhead": self.overhead,
                "match": self.match.to_dict(), "sizes": dict(self.sizes),
                "gpu": None if self.gpu is None else self.gpu.summary()}

    def table(self) -> str:
        """Markdown: step times, trace sizes, op-stream differences, GPU time."""
        m, over, s, mt = self.median_ns, self.overhead, self.sizes, self.match
        lines = [f"cutimeline vs torch.profiler on {self.meta.get('device', '?')}: "
                 f"{self.meta.get('steps', '?')} steps after "
                 f"{self.meta.get('warmup', '?')} warm-up per pass, "
                 f"{self.meta.get('rounds', 1)} round(s)", "",
                 "| pass | median step ms | × uninstrumented |", "|---|---:|---:|"]
        for k in PASSES:
            ratio = "1.00" if k == "none" else f"{over[k]:.2f}"
            lines.append(f"| {_LABEL[k]} | {m[k] / 1e6:.3f} | {ratio} |")
        lines += ["", f"| trace of the compared steps | bytes | bytes / leaf op "
                      f"({s['leaf_ops']:,}) |", "|---|---:|---:|"]
        for k, label in (("ctl", "cutimeline .ctl"), ("kineto_json", "Kineto JSON"),
                         ("kineto_gz", "Kineto JSON, gzip -6")):
            lines.append(f"| {label} | {s[f'{k}_bytes']:,} | {s[f'{k}_bytes_per_op']:.1f} |")
        lines += ["", f"Op stream: {mt.matched:,} of {len(mt.theirs):,} profiler leaf "
                      f"aten ops matched ({100 * mt.fraction:.2f} %); cutimeline "
                      f"saw {len(mt.ours):,}.", ""]
        diffs = [(f"{r['name']} for {r['theirs']}" if r["kind"] == "substituted"
                  else f"{r['kind']} {r['name']}", r["count"],
                  "" if r["at"] is None else
                  mt.example("ours" if r["kind"] == "extra" else "theirs", r["name"], at=r["at"]),
                  r["why"] or "UNEXPLAINED") for r in mt.differences()]
        if diffs:
            lines += ["| difference | count | example | why |", "|---|---:|---|---|"]
            lines += [f"| {d} | {c:,} | {e} | {w} |" for d, c, e, w in diffs]
        if "gpu_not_compared" in self.meta:
            if lines[-1]:  # one blank line between sections
                lines.append("")
            lines.append(f"GPU time not compared: {self.meta['gpu_not_compared']}.")
        if self.gpu is not None:
            g = self.gpu.summary()
            lines += ["", f"GPU time: {g['ops']:,} matched ops with device work; on the "
                          f"{g['single_kernel_ops']:,} with one kernel, median |error| "
                          f"{100 * g['median_abs_error']:.2f} %, "
                          f"{100 * g['within_tolerance']:.1f} % within "
                          f"{100 * g['tolerance']:.0f} %. Summed: cutimeline "
                          f"{g['ours_total_ns'] / 1e6:.3f} ms, torch.profiler "
                          f"{g['theirs_total_ns'] / 1e6:.3f} ms."]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        over = self.overhead
        return (f"<Comparison {self.meta.get('device', '?')}: cutimeline "
                f"×{over['cutimeline']:.2f}, torch.profiler ×{over['profiler']:.2f}, "
                f"op match {100 * self.match.fraction:.1f} %>")
