"""What each gpu row of a Timeline is and what it costs on its GPU: the roofline the GPU-side what-if edits scale recorded kernels by.

The GPU's profile (``pricing``) is the simulated GPU's own, else the
datasheet table ``timeline/gpus.py`` (peaks, memory bandwidth) with the
family efficiencies of its generation (``devices/sim/roofline.py``);
where neither applies (an unknown GPU, signatures with no dtypes) it is
a sentence saying why. A row's bytes are its shape signature's tensors
and an output the size of the largest (``signature``).
``Pricing.ns`` is the roofline,
``min_kernel + max(FLOPs ÷ rate, bytes ÷ bandwidth)``. ``conv_advice``
says what a convolution net may change that no roofline prices (cuDNN's
autotuning, channels_last).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...devices.sim.roofline import GpuProfile, profile_for_device
from ...timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ...timeline.timeline import Timeline
from ..tables.flops import op_flops
from ..thresholds import THRESHOLDS

__all__ = ["Pricing", "pricing", "cannot_price", "Rows", "rows_of", "recorded_precision",
           "signature", "TENSOR", "FP32_OPS", "MATMUL", "CONV", "ATTENTION",
           "gpu_time_words", "gpu_top_text", "conv_advice", "CONV_ADVICE_SHARE"]

#: aten base names autocast runs in fp32 (its CUDA fp32 list, as aten names)
FP32_OPS = frozenset({
    "native_layer_norm", "native_layer_norm_backward", "layer_norm", "native_group_norm",
    "native_group_norm_backward", "group_norm", "_softmax", "_log_softmax",
    "_softmax_backward_data", "_log_softmax_backward_data", "softmax", "log_softmax",
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "mse_loss", "mse_loss_backward", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy_with_logits", "kl_div", "sum", "prod", "cumsum", "cumprod",
    "logsumexp", "exp", "log", "log1p", "expm1", "pow", "rsqrt", "reciprocal",
    "norm", "linalg_vector_norm", "cdist", "pdist", "dist", "renorm", "softplus"})

_ELEM = {"f32": 4, "float": 4, "float32": 4, "f16": 2, "half": 2, "float16": 2,
         "bf16": 2, "bfloat16": 2, "c10::bfloat16": 2, "c10::half": 2, "f64": 8,
         "double": 8, "float64": 8, "i64": 8, "long": 8, "int64": 8, "i32": 4, "int": 4,
         "int32": 4, "i16": 2, "i8": 1, "u8": 1, "b8": 1, "bool": 1, "c64": 8,
         "c128": 16, "unsigned char": 1, "signed char": 1, "short": 2}
_PRECISION = {"f32": "fp32", "float": "fp32", "float32": "fp32", "bf16": "bf16",
              "bfloat16": "bf16", "c10::bfloat16": "bf16", "f16": "fp16", "half": "fp16",
              "float16": "fp16", "c10::half": "fp16", "f64": "fp64", "double": "fp64",
              "float64": "fp64"}
TENSOR = re.compile(r"([A-Za-z_][\w:]*(?: [a-z]+)?)\s*\[([^\]]*)\]")
MATMUL, CONV, ATTENTION = 1, 2, 3


@dataclass(frozen=True)
class Pricing:
    """What a Timeline's GPU work is priced with: the ``profile`` (peaks,
    bandwidth, efficiencies) and whether fp32 matmuls (``matmul_tf32``) and
    convolutions (``conv_tf32``) ran on TF32 tensor cores when recorded."""
    profile: GpuProfile
    matmul_tf32: bool
    conv_tf32: bool

    def rate(self, family: np.ndarray, precision: np.ndarray) -> np.ndarray:
        """FLOP/s per row of ``family`` computing in ``precision`` (str)."""
        out = np.zeros(len(family))
        p = self.profile
        for fam, name in ((MATMUL, "matmul"), (CONV, "conv"), (ATTENTION, "attention")):
            for prec in np.unique(precision[family == fam]):
                m = (family == fam) & (precision == prec)
                peak = p.peak_flops.get(str(prec), p.peak_flops["fp32"])
                out[m] = peak * p.achieved(name, str(prec))
        return out

    def ns(self, flops: np.ndarray, nbytes: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """The roofline's time (ns, float) of rows of ``flops`` at ``rate``
        over ``nbytes``."""
        p = self.profile
        mem = nbytes / (p.bandwidth * p.memory_efficiency)
        comp = np.divide(flops, rate, out=np.zeros(len(flops)), where=rate > 0)
        return p.min_kernel_ns + 1e9 * np.maximum(mem, comp)


def pricing(tl: Timeline) -> Pricing | str:
    """The Timeline's ``Pricing``, or a sentence saying why its GPU work
    cannot be priced."""
    sim = tl.meta.get("sim")
    name = str(tl.meta.get("device_name") or "")
    profile = profile_for_device(name, sim.get("profile") if isinstance(sim, dict) else None)
    if profile is None:
        return (f"the GPU {name!r} is not in cutimeline's table of GPUs "
                f"(timeline/gpus.py: peaks and memory bandwidth)" if name else
                "the Timeline names no GPU to price its kernels on")
    if not len(tl.ops) or not tl.ops.remember("shapes", "names tensors", lambda c: any(
            TENSOR.search(s) for s in tl.decode(np.unique(c[c >= 0])[:64]))):
        return "its ops carry no shapes or dtypes (record_shapes=False?)"
    tf32 = str(tl.meta.get("float32_matmul_precision", "highest")) in ("high", "medium")
    conv = bool(tl.meta.get("cudnn_allow_tf32", True))
    forced = sim.get("tf32") if isinstance(sim, dict) else None
    if isinstance(forced, bool):  # SimGPU(tf32=...) ruled over torch's switches
        tf32 = conv = forced
    return Pricing(profile, tf32, conv)


def cannot_price(tl: Timeline) -> str:
    """Why the GPU-side edits do not apply to ``tl`` ("" where they may)."""
    p = pricing(tl)
    return p if isinstance(p, str) else ""


# -- what each gpu row is ----------------------------------------------------------

@dataclass(frozen=True)
class Rows:
    """Per gpu row (arrays over ``tl.gpu``) what pricing needs: its op (NONE
    without), ``family`` (0 memory-bound, MATMUL, CONV, ATTENTION),
    ``precision`` ("fp32", "bf16"... as str; "" unknown), ``flops``,
    ``nbytes`` (inputs and an output), ``fp32_in`` (bytes of fp32 inputs),
    ``out`` (the output's bytes), ``weight`` (elements of its last tensor
    of two or more dimensions: a linear layer's or convolution's weight, as
    ``addmm``, ``mm`` and ``convolution`` take them; 0 for batched matmuls
    and attention, which multiply activations), ``base`` (the op's
    base name), ``fp32_op`` (one autocast keeps in fp32), ``backward`` (under autograd's backward), ``optimizer``
    (inside an optimizer step), ``stream`` and ``launched`` (a row of
    device work the edits may change)."""
    op: np.ndarray
    family: np.ndarray
    precision: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    fp32_in: np.ndarray
    out: np.ndarray
    weight: np.ndarray
    base: np.ndarray
    fp32_op: np.ndarray
    backward: np.ndarray
    optimizer: np.ndarray
    stream: np.ndarray
    launched: np.ndarray


def signature(text: str) -> tuple[float, float, float, float, str]:
    """(bytes, fp32 bytes, largest tensor's bytes, elements of the last
    tensor of two or more dimensions, first floating dtype's precision) of
    a shape signature."""
    total = fp32 = big = 0.0
    weight = 0.0
    first = ""
    for dtype, dims in TENSOR.findall(text):
        d = dtype.lower()
        size = _ELEM.get(d, 1 if "float8" in d else 4)
        parts = [x for x in dims.split(",") if x.strip()]
        try:
            n = float(np.prod([int(x) for x in parts])) if parts else 1.0
        except ValueError:  # "*": a nested tensor's ragged dimension
            n = 0.0
        total += n * size
        big = max(big, n * size)
        if _PRECISION.get(d) == "fp32":
            fp32 += n * size
        if len(parts) >= 2 and n:
            weight = n
        if not first and d in _PRECISION:
            first = _PRECISION[d]
        elif not first and "float8" in d:
            first = "fp8"
    return total, fp32, big, weight, first


def rows_of(tl: Timeline) -> Rows:
    """The ``Rows`` of ``tl``'s gpu table, remembered by it."""
    return tl.gpu.remember("op", "gpu-side rows", lambda _: _rows(tl))


def _rows(tl: Timeline) -> Rows:
    o, g = tl.ops, tl.gpu
    op = np.asarray(g.op, np.int64)
    has = op != NONE
    at = np.where(has, op, 0)
    sig = np.asarray(o.shapes, np.int64)
    uniq, inv = np.unique(sig, return_inverse=True)
    parsed = [signature(s) if i >= 0 else (0.0, 0.0, 0.0, 0.0, "")
              for i, s in zip(uniq, tl.decode(np.maximum(uniq, 0)))]
    table = np.array([p[:4] for p in parsed], np.float64).reshape(-1, 4)
    prec_u = np.array([p[4] for p in parsed] or [""], dtype=object)
    per_op = table[inv.reshape(-1)] if len(o) else np.zeros((0, 4))
    prec_op = prec_u[inv.reshape(-1)] if len(o) else np.zeros(0, object)
    names = np.asarray(o["name"], np.int64)
    un, ni = np.unique(names, return_inverse=True)
    base_u = np.array([n.split("::")[-1].split(".")[0] for n in tl.decode(un)] or [""],
                      dtype=object)
    base_op = base_u[ni.reshape(-1)] if len(o) else np.zeros(0, object)
    fam_u = np.array([_family(b) for b in base_u], np.int8)
    f32_u = np.array([b in FP32_OPS for b in base_u], bool)
    f32_op = f32_u[ni.reshape(-1)] if len(o) else np.zeros(0, bool)
    fam_op = fam_u[ni.reshape(-1)] if len(o) else np.zeros(0, np.int8)
    flops_op = op_flops(tl)
    fam_op = np.where(flops_op > 0, np.maximum(fam_op, MATMUL), 0).astype(np.int8)
    bwd_op = (np.asarray(o.grad_fn, np.int64) != NONE) | _in_spans(tl, SpanKind.BACKWARD)
    # an optimizer's own ops: inside its step, but neither a module's forward
    # nor backward (Lightning runs the whole training step in a closure the
    # optimizer's step calls)
    opt_op = _in_spans(tl, SpanKind.OPTIMIZER) & ~bwd_op & \
        ~_in_spans(tl, SpanKind.FORWARD) & ~_in_spans(tl, SpanKind.MODULE)
    launched_op = (np.asarray(o.flags) & (OpFlag.SYNC | OpFlag.COLLECTIVE)) == 0
    kinds = np.asarray(g.kind)
    work = has & np.isin(kinds, [int(GpuKind.OP), int(GpuKind.KERNEL)])
    pick = per_op[at] if len(o) else np.zeros((len(g), 4))
    nbytes, fp32_in, big, weight = (pick[:, i] for i in range(4))
    batched = np.array([b.startswith(("bmm", "baddbmm")) for b in base_u] or [False], bool)
    no_weight = (batched[ni.reshape(-1)] if len(o) else np.zeros(0, bool)) | \
        (fam_op == ATTENTION)
    weight = np.where(has & ~(no_weight[at] if len(o) else False), weight, 0.0)
    return Rows(op=op, family=np.where(has, fam_op[at] if len(o) else 0, 0),
                precision=np.where(has, prec_op[at] if len(o) else "", ""),
                flops=np.where(has, flops_op[at] if len(o) else 0.0, 0.0),
                nbytes=nbytes + big, fp32_in=fp32_in, out=big, weight=weight,
                base=np.where(has, base_op[at] if len(o) else "", ""),
                fp32_op=has & (f32_op[at] if len(o) else False),
                backward=has & (bwd_op[at] if len(o) else False),
                optimizer=has & (opt_op[at] if len(o) else False),
                stream=np.asarray(g.stream, np.int64),
                launched=work & (launched_op[at] if len(o) else False))


def _family(base: str) -> int:
    if "conv" in base:
        return CONV
    if "attention" in base or "flash" in base:
        return ATTENTION
    return 0  # matmul-like when it has FLOPs (``_rows``)


def _in_spans(tl: Timeline, kind: SpanKind) -> np.ndarray:
    """Per op: whether its launch lies inside a span of ``kind`` of its thread."""
    o, s = tl.ops, tl.spans
    out = np.zeros(len(o), bool)
    m = np.flatnonzero(np.asarray(s.kind) == int(kind))
    if not len(m) or not len(o):
        return out
    b, th = np.asarray(o.host_begin_ns, np.int64), np.asarray(o.thread, np.int64)
    for t in np.unique(np.asarray(s.thread)[m]):
        mm = m[np.asarray(s.thread)[m] == t]
        sb, se = np.asarray(s.begin_ns, np.int64)[mm], np.asarray(s.end_ns, np.int64)[mm]
        order = np.argsort(sb, kind="stable")
        sb, se = sb[order], np.maximum.accumulate(se[order])
        i = np.searchsorted(sb, b, side="right") - 1
        inside = (i >= 0) & (b < se[np.maximum(i, 0)]) & (th == t)
        out |= inside
    return out


def recorded_precision(p: Pricing, r: Rows, m: np.ndarray) -> np.ndarray:
    """The precision rows ``m`` computed in as recorded (fp32 on TF32 cores where allowed)."""
    prec = r.precision[m].astype(object)
    tf = (prec == "fp32") & (((r.family[m] == MATMUL) & p.matmul_tf32) |
                             ((r.family[m] == CONV) & p.conv_tf32))
    prec[tf] = "tf32"
    return prec


# -- where the GPU's time goes, in words ---------------------------------------------

_FAMILY_WORDS = {MATMUL: "matmuls", CONV: "convolutions", ATTENTION: "attention kernels",
                 0: "memory-bound ops"}


def _in_windows(tl: Timeline, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The gpu rows launched inside the host windows [begins, ends)."""
    g = tl.gpu
    t = np.asarray(g.launch_ns, np.int64)
    t = np.where(t != NONE, t, np.asarray(g.begin_ns, np.int64))
    b, e = np.asarray(begins, np.int64), np.asarray(ends, np.int64)
    i = np.searchsorted(b, t, side="right") - 1
    return (i >= 0) & (t < e[np.maximum(i, 0)])


def gpu_time_words(tl: Timeline, begins: np.ndarray, ends: np.ndarray) -> str:
    """Where the GPU time of the windows goes, by kind of work: "matmuls
    are 74% of GPU time, at fp32" ("" where it cannot be priced)."""
    p = pricing(tl)
    if isinstance(p, str) or not len(tl.gpu):
        return ""
    r = rows_of(tl)
    m = _in_windows(tl, begins, ends) & r.launched
    dur = np.maximum(np.asarray(tl.gpu.end_ns, np.int64) - np.asarray(tl.gpu.begin_ns,
                                                                      np.int64), 0)
    total = float(dur[m].sum())
    if not total:
        return ""
    share = {f: float(dur[m & (r.family == f)].sum()) / total for f in _FAMILY_WORDS}
    top = max(share, key=share.get)
    text = f"{_FAMILY_WORDS[top]} are {share[top]:.0%} of GPU time"
    if top:
        mm = m & (r.family == top)
        prec = recorded_precision(p, r, mm)
        if len(prec):
            un = np.unique(prec)
            took = [float(dur[mm][prec == u].sum()) for u in un]
            text += f", at {un[int(np.argmax(took))]}" if str(un[int(np.argmax(took))]) else ""
    return text


def gpu_top_text(tl: Timeline, begins: np.ndarray, ends: np.ndarray, k: int = 3) -> str:
    """The top GPU ops of the windows by GPU time, each with its share,
    achieved TFLOP/s (compute) or TB/s (memory-bound) and what share of
    the GPU's peak that is ("" where it cannot be priced)."""
    p = pricing(tl)
    if isinstance(p, str) or not len(tl.gpu):
        return ""
    r = rows_of(tl)
    m = _in_windows(tl, begins, ends) & r.launched
    if not m.any():
        return ""
    g = tl.gpu
    dur = np.maximum(np.asarray(g.end_ns, np.int64) - np.asarray(g.begin_ns, np.int64), 0)
    names = np.asarray(tl.ops["name"], np.int64)[r.op[m]]
    un, inv = np.unique(names, return_inverse=True)
    t = np.bincount(inv, weights=dur[m], minlength=len(un))
    fl = np.bincount(inv, weights=r.flops[m], minlength=len(un))
    by = np.bincount(inv, weights=r.nbytes[m], minlength=len(un))
    total = float(dur[m].sum())
    prec_all = recorded_precision(p, r, m)
    parts = []
    for j in np.argsort(-t, kind="stable")[:k]:
        if t[j] < 0.005 * total:  # what would read "0%" says nothing
            continue
        sec = t[j] / 1e9
        name = tl.string(int(un[j]))
        if fl[j] > 0:
            precs = prec_all[inv == j]
            prec = str(precs[0]) if len(precs) and precs[0] else "fp32"
            peak = p.profile.peak_flops.get(prec, p.profile.peak_flops["fp32"])
            parts.append(f"{name} {t[j] / total:.0%} at {fl[j] / sec / 1e12:.1f} TFLOP/s "
                         f"({fl[j] / sec / peak:.0%} of the {prec} peak)")
        else:
            parts.append(f"{name} {t[j] / total:.0%} at {by[j] / sec / 1e12:.2f} TB/s "
                         f"({by[j] / sec / p.profile.bandwidth:.0%} of memory bandwidth)")
    return "top GPU work: " + "; ".join(parts) if parts else ""


CONV_ADVICE_SHARE = THRESHOLDS.conv_advice_share  # why: analysis/thresholds.py


def conv_advice(tl: Timeline, begins: np.ndarray, ends: np.ndarray) -> list[str]:
    """Advice without a prediction for a convolution net (convolutions
    ``CONV_ADVICE_SHARE`` of the windows' GPU time or more): cuDNN's
    autotuning where the recording says it was off, and channels_last. No
    honest number exists for either: which algorithm cuDNN picks, and what
    layout transforms the kernels make, are known only when they run."""
    if not len(tl.gpu):
        return []
    r = rows_of(tl)
    m = _in_windows(tl, begins, ends) & r.launched
    dur = np.maximum(np.asarray(tl.gpu.end_ns, np.int64) - np.asarray(tl.gpu.begin_ns,
                                                                      np.int64), 0)
    total = float(dur[m].sum())
    share = float(dur[m & (r.family == CONV)].sum()) / total if total else 0.0
    if share < CONV_ADVICE_SHARE:
        return []
    out = []
    if tl.meta.get("cudnn_benchmark") is False:
        out.append(f"convolutions are {share:.0%} of GPU time and cuDNN did not benchmark "
                   f"them: torch.backends.cudnn.benchmark = True lets it time its "
                   f"algorithms for each shape and keep the fastest (advice: no prediction)")
    out.append(f"convolutions are {share:.0%} of GPU time: in channels_last "
               f"(model.to(memory_format=torch.channels_last) and the inputs) cuDNN's "
               f"tensor-core kernels need no layout transforms, if the model is not in it "
               f"already (advice: no prediction)")
    return out
