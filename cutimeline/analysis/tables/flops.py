"""FLOPs, achieved FLOP/s and MFU (model FLOPs utilisation) from the
``flops`` table.

* An op's FLOPs (the ``flops`` table: torch.utils.flop_counter's formulas)
  belong to the step whose host window holds the op's launch
  (``host_begin_ns``), as its GPU work does (``steps.py``).
* Only device work counts toward a step's FLOP/s and MFU: where the ops
  table says which ops ran on a device (recordings: ``ops.device``), the
  FLOPs of ops on the host (NONE) are left out (the op table still lists
  them, with no GPU time); where it says of none (imported traces), all.
* Achieved FLOP/s: a step's FLOPs over its device window's duration; an
  op name's (op table) over the GPU time of its rows (NaN without).
* An op's precision: the first floating-point (or int8) dtype in its shape
  signature ("bf16[8,512], bf16[512,512]" → bf16; Kineto's
  "c10::BFloat16[8,512]" too). fp32 work is measured against the TF32
  tensor-core peak for convolutions (cuDNN may use TF32 by default:
  ``torch.backends.cudnn.allow_tf32``) and for other ops only when the
  Timeline's meta says matmuls may (``meta["float32_matmul_precision"]``
  "high" or "medium", as ``torch.get_float32_matmul_precision()`` spells
  it); otherwise against the plain FP32 peak (torch's default, "highest").
* The run's precision is the one with the most FLOPs in the report's
  window; MFU = achieved FLOP/s / that precision's dense peak.
* The peak: ``analyze(tl, peak_flops=...)`` (FLOP/s; or a dict precision →
  FLOP/s); else a simulated Timeline's GPU profile (``meta["sim"]``); else
  the device name (``meta["device_name"]``) looked up in
  ``timeline/gpus.py``; else no MFU, and a sentence that says why.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ...errors import CutimelineError
from ...text import fmt_mfu, fmt_tflops
from ...timeline.gpus import PRECISIONS, gpu_named
from ...timeline.schema import NONE
from ...timeline.timeline import Timeline

__all__ = ["check_peak", "op_flops", "op_precision", "step_flops", "run_compute",
           "compute_text"]

_DTYPE = {"f64": "fp64", "double": "fp64", "float64": "fp64",
          "f32": "fp32", "float": "fp32", "float32": "fp32",
          "bf16": "bf16", "bfloat16": "bf16", "c10::bfloat16": "bf16",
          "f16": "fp16", "half": "fp16", "float16": "fp16", "c10::half": "fp16",
          "i8": "int8", "int8": "int8"}
_TOKEN = re.compile(r"([A-Za-z_][\w:]*)\s*\[")
_TF32_MATMUL = ("high", "medium")  # torch.get_float32_matmul_precision()


def check_peak(peak_flops):
    """``peak_flops`` as given to ``analyze``: None, a number of FLOP/s or
    a dict precision → FLOP/s, checked; raises a CutimelineError."""
    if peak_flops is None:
        return None
    if isinstance(peak_flops, dict):
        bad = [k for k in peak_flops if k not in PRECISIONS]
        if bad:
            raise CutimelineError(f"peak_flops has no precision {bad[0]!r}; use "
                                  f"{', '.join(PRECISIONS)}.")
        return {k: _positive(v, f"peak_flops[{k!r}]") for k, v in peak_flops.items()}
    return _positive(peak_flops, "peak_flops")


def _positive(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or \
            not math.isfinite(v) or v <= 0:
        raise CutimelineError(f"{what}={v!r} must be a positive number of FLOP/s "
                              f"(an H100 SXM's dense bf16 peak is 989.5e12).")
    return float(v)


def op_flops(tl: Timeline) -> np.ndarray:
    """FLOPs per op row (0 for ops without a ``flops`` row)."""
    f = tl.flops
    return np.bincount(np.asarray(f.op, np.int64), weights=np.asarray(f.flops),
                       minlength=len(tl.ops)).astype(np.float64)


def _precision_of(sig: str) -> str:
    for tok in _TOKEN.findall(sig):
        low = tok.lower()
        if "float8" in low:
            return "fp8"
        if low in _DTYPE:
            return _DTYPE[low]
    return ""


def op_precision(tl: Timeline, ops: np.ndarray) -> np.ndarray:
    """The precision each op row in ``ops`` is measured against (see the
    module doc; "" when its signature names no dtype)."""
    o = tl.ops
    sh = np.asarray(o.shapes, np.int64)[ops]
    uniq, inv = np.unique(sh, return_inverse=True)
    prec = np.array([_precision_of(s) for s in tl.decode(uniq)] + [""], dtype=object)
    out = prec[inv.reshape(-1)] if len(uniq) else np.zeros(0, object)
    fp32 = np.flatnonzero(out == "fp32")
    if len(fp32):
        names = np.asarray(o["name"], np.int64)[ops[fp32]]
        un, ni = np.unique(names, return_inverse=True)
        conv = np.array(["conv" in n for n in tl.decode(un)], bool)[ni.reshape(-1)]
        tf32 = str(tl.meta.get("float32_matmul_precision", "highest")) in _TF32_MATMUL
        out[fp32[conv | tf32]] = "tf32"
    return out


def _peak(tl: Timeline, given, precision: str) -> dict:
    """``{"peak": FLOP/s or None, "label", "why"}`` for ``precision`` (see
    the module doc)."""
    fix = "pass ctl.analyze(tl, peak_flops=...) in FLOP/s to get it"
    if isinstance(given, float):
        return {"peak": given, "label": f"the given peak {fmt_tflops(given, 4)}", "why": ""}
    if not precision:
        return {"peak": None, "label": "", "why": "no MFU: the ops' shape signatures "
                "name no dtype, so the peak's precision is unknown; " + fix + "."}
    if isinstance(given, dict):
        name, table = "the given peak_flops", given
    else:
        sim = tl.meta.get("sim")
        dev = str(tl.meta.get("device_name") or "")
        known = gpu_named(dev)
        if tl.meta.get("simulated") and isinstance(sim, dict) and \
                isinstance(sim.get("peak_flops"), dict):
            name, table = f"SimGPU {sim.get('profile') or ''} (simulated)", sim["peak_flops"]
        elif known is not None:
            name, table = known.label, known.peak_flops
        elif dev:
            return {"peak": None, "label": "", "why": f"no MFU: the device {dev!r} is not "
                    f"in cutimeline's table of GPU peaks (timeline/gpus.py); {fix}."}
        else:
            return {"peak": None, "label": "", "why": "no MFU: the Timeline names no "
                    f"device and no peak was given; {fix}."}
    value = table.get(precision)
    if not (isinstance(value, (int, float)) and value > 0):
        return {"peak": None, "label": "", "why": f"no MFU: {name} has no {precision} "
                f"peak; {fix} (a dict {{{precision!r}: FLOP/s}})."}
    return {"peak": float(value), "why": "",
            "label": f"{name} {precision} dense {fmt_tflops(value, 4)}"}


def step_flops(tl: Timeline, h0, h1, duration_ns, peak_flops) -> tuple[dict, dict]:
    """Per host window [h0, h1) (window 0 the report's, then its steps):
    ``flops``, ``tflop_per_s`` (over ``duration_ns``, the device window)
    and ``mfu`` (NaN without a peak); and the run's ``{"precision",
    "by_precision" (FLOPs per precision in window 0), "peak", "label",
    "why"}``."""
    h0, h1 = np.asarray(h0, np.int64), np.asarray(h1, np.int64)
    f = op_flops(tl)
    dev = np.asarray(tl.ops.device)
    on_host = dev == NONE
    ops = np.flatnonzero((f > 0) & ~on_host) if not on_host.all() else np.flatnonzero(f > 0)
    t = np.asarray(tl.ops.host_begin_ns, np.int64)[ops]
    order = np.argsort(t, kind="stable")
    ops, t = ops[order], t[order]
    cum = np.concatenate([[0.0], np.cumsum(f[ops])])
    a, b = np.searchsorted(t, h0, side="left"), np.searchsorted(t, h1, side="left")
    flops = cum[b] - cum[a]
    mine = ops[a[0]:b[0]]  # window 0: the run's precision
    prec = op_precision(tl, mine)
    by = {p: float(f[mine][prec == p].sum()) for p in dict.fromkeys(prec.tolist())}
    known = {p: v for p, v in by.items() if p}
    precision = max(known, key=lambda p: known[p]) if known else ""
    info = {"precision": precision, "by_precision": by, **_peak(tl, peak_flops, precision)}
    dur = np.asarray(duration_ns, np.float64)
    rate = np.divide(flops, dur, out=np.full(len(dur), np.nan), where=dur > 0)  # FLOP/ns
    mfu = rate * 1e9 / info["peak"] if info["peak"] else np.full(len(dur), np.nan)
    return {"flops": flops, "tflop_per_s": rate / 1e3, "mfu": mfu}, info


def run_compute(c: dict, part: np.ndarray, which: str, ops: np.ndarray) -> dict:
    """``Report.compute()``: FLOPs and MFU over the step rows ``part``
    (named ``which``), with the run's precision and peak ``c``
    (``step_flops``) and the op name with the most FLOPs in ``ops`` (the op
    table)."""
    flops, dur = float(part["flops"].sum()), int(part["duration_ns"].sum())
    rate = flops / dur * 1e9 if dur > 0 else float("nan")
    out = {"steps": which, "flops": flops, "duration_ns": dur, "flop_per_s": rate,
           "mfu": rate / c["peak"] if c["peak"] and dur > 0 else None,
           "precision": c["precision"], "by_precision": c["by_precision"],
           "peak_flop_per_s": c["peak"], "label": c["label"], "why": c["why"],
           "top_op": None}
    total = float(ops["flops"].sum()) if len(ops) else 0.0
    if total > 0:
        top = ops[int(np.argmax(ops["flops"]))]
        out["top_op"] = {"name": str(top["name"]), "share": float(top["flops"]) / total,
                         "flop_per_s": float(top["tflop_per_s"]) * 1e12}
    return out


def compute_text(c: dict) -> str:
    """The summary's line: "Compute (steps 1–9): 41.2 TFLOP/s achieved, MFU
    4.2% of H100 SXM bf16 dense 989.5 TFLOP/s; most FLOPs in aten::mm
    (92%, 612 TFLOP/s on its GPU time)"; ``c``: ``Report.compute()``."""
    rate = c["flop_per_s"]
    text = f"Compute ({c['steps']}): " + (
        f"{fmt_tflops(rate)} achieved" if not math.isnan(rate) else "no device time")
    if c["mfu"] is not None and not math.isnan(rate):
        text += f", MFU {fmt_mfu(c['mfu'])} of {c['label']}"
    elif c["why"]:
        text += f"; {c['why'][0].lower()}{c['why'][1:-1]}"
    top = c.get("top_op")
    if top:
        text += f"; most FLOPs in {top['name']} ({100 * top['share']:.0f}%" + (
            f", {fmt_tflops(top['flop_per_s'])} on its GPU time)"
            if not math.isnan(top["flop_per_s"]) else ")")
    return text
