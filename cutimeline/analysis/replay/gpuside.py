"""The GPU-side what-if edits: recorded kernel durations scaled by the roofline's ratio for each op on its GPU.

A GPU-bound step shortens only when its GPU work does. Four changes a
user can make do that (``GPU_EDITS``: ``tf32``, ``bf16``,
``fused_optimizer``, ``compile``; what each changes: ``_tf32``,
``_bf16``, ``_fused_optimizer``, ``_compile``), each a change of the
replay's inputs (``edits.py``, ``GpuChange``): a gpu row's duration
scaled, rows merged into one (the first takes the group's time, the
others' ops are gone), and the host time of the launches that go.

Each new duration is the recorded one times the roofline's ratio (new ÷
old) for that op on that GPU (``gpuwork.py``), so what a kernel achieved
stays what it achieves. Where the Timeline cannot be priced (a GPU the
table does not know, signatures with no dtypes: ``gpuwork.pricing``) no
GPU-side edit applies, and a GPU-bound summary says why. Not modelled:
the host's launches of the casts ``bf16`` adds, and ``compile``'s own
changes to matmul epilogues or its graph launch cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...timeline.schema import NONE, SpanKind
from ...timeline.timeline import Timeline
from ..idle.activity import HostActivity, subtract
from ..idle.steps import step_windows
from .editname import EditName
from .gpuwork import CONV, MATMUL, TENSOR, Pricing, Rows, pricing, recorded_precision, \
    rows_of, signature

__all__ = ["GPU_EDITS", "PASSES", "GpuChange", "gpu_edit"]

#: the GPU-side edits, by name (``edits.EDITS`` holds their words)
GPU_EDITS = (EditName.TF32, EditName.BF16, EditName.FUSED_OPTIMIZER, EditName.COMPILE)

#: tensors' worth of traffic one fused optimizer kernel makes per parameter:
#: Adam(W) reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg,
#: exp_avg_sq; SGD with momentum reads param, grad, buffer and writes param
#: and buffer (3 without momentum); Adagrad reads param, grad, state_sum and
#: writes param and state_sum
PASSES = {"adam": 7, "adamw": 7, "sgd": 5, "adagrad": 5}

_COPIES = ("_to_copy", "copy_", "to")
_DATA_DEPENDENT = ("nonzero", "masked_select", "unique", "_unique", "_unique2",
                   "unique_consecutive", "repeat_interleave", "bincount", "index")


# -- the edits ------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuChange:
    """A GPU-side edit's replay inputs: ``scale`` per gpu row (new duration
    over recorded), ``drop_ops`` (ops merged into another's row: gone with
    their rows), and the host time of their launches, cut."""
    scale: np.ndarray
    drop_ops: np.ndarray
    cut_b: np.ndarray
    cut_e: np.ndarray


def gpu_edit(tl: Timeline, name: str, act: HostActivity | None = None) -> GpuChange | None:
    """GPU-side edit ``name`` (``GPU_EDITS``) on ``tl``; None where it does
    not apply (nothing it would change) or the work cannot be priced.
    ``act``: the Timeline's host activity, for the launches merged kernels
    no longer make (None: only the merged ops' own host time goes)."""
    p = pricing(tl)
    if isinstance(p, str) or not len(tl.gpu):
        return None
    r = rows_of(tl)
    g = tl.gpu
    dur = np.maximum(np.asarray(g.end_ns, np.int64) - np.asarray(g.begin_ns, np.int64), 0)
    if name == EditName.TF32:
        scale = _tf32(p, r)
        return None if scale is None else _scaled(tl, scale)
    if name == EditName.BF16:
        scale = _bf16(p, r, dur)
        return None if scale is None else _scaled(tl, scale)
    if name == EditName.FUSED_OPTIMIZER:
        return _fused_optimizer(tl, p, r, dur, act)
    if name == EditName.COMPILE:
        return _compile(tl, p, r, dur, act)
    raise ValueError(name)


def _scaled(tl: Timeline, scale: np.ndarray) -> GpuChange:
    none = np.zeros(0, np.int64)
    return GpuChange(scale, np.zeros(len(tl.ops), bool), none, none)


def _ratio(p: Pricing, flops, nbytes, rate_old, nbytes_new, rate_new) -> np.ndarray:
    old = p.ns(flops, nbytes, rate_old)
    return p.ns(flops, nbytes_new, rate_new) / np.maximum(old, 1.0)


def _tf32(p: Pricing, r: Rows) -> np.ndarray | None:
    """``tf32``: fp32 matmuls on TF32 tensor cores
    (``torch.set_float32_matmul_precision("high")``); convolutions too
    where the recording says cuDNN's TF32 was off."""
    fp32 = r.launched & (r.precision == "fp32") & (r.flops > 0)
    m = fp32 & (((r.family == MATMUL) & (not p.matmul_tf32)) |
                ((r.family == CONV) & (not p.conv_tf32)))
    if not m.any():
        return None
    scale = np.ones(len(r.op))
    old = np.where(m, "fp32", "")
    new = np.where(m, "tf32", "")
    scale[m] = _ratio(p, r.flops[m], r.nbytes[m], p.rate(r.family[m], old[m]), r.nbytes[m],
                      p.rate(r.family[m], new[m]))
    return scale


def _bf16(p: Pricing, r: Rows, dur: np.ndarray) -> np.ndarray | None:
    """``bf16``: ``torch.autocast("cuda", dtype=torch.bfloat16)``.
    Matmuls, convolutions and attention at the bf16 rate on half the
    bytes; the memory-bound ops of forward and backward on bf16 tensors
    (half their fp32 bytes), autocast's fp32 ops (norms, softmax, losses,
    reductions: ``FP32_OPS``) reading bf16 and writing fp32; and the casts
    autocast adds, added to the matmul they feed: each forward matmul's
    weight cast to bf16 and its gradient cast back, and its input cast
    where the op before it on its stream is an fp32 one. The optimizer's
    ops stay fp32."""
    active = r.launched & ~r.optimizer
    compute = active & (r.flops > 0) & (r.precision == "fp32")
    if not compute.any():
        return None  # no fp32 matmul or convolution: nothing autocast would change
    scale = np.ones(len(r.op))
    half = r.nbytes - r.fp32_in / 2 - np.where(r.precision == "fp32", r.out / 2, 0)
    m = compute
    fam = r.family[m]
    scale[m] = _ratio(p, r.flops[m], r.nbytes[m], p.rate(fam, recorded_precision(p, r, m)),
                      half[m], p.rate(fam, np.full(m.sum(), "bf16", object)))
    fp32_op = r.fp32_op
    mem = active & (r.flops == 0) & (r.fp32_in > 0) & ~np.isin(r.base, _COPIES)
    # autocast's fp32 ops read bf16 and write fp32; the others run on bf16
    new_bytes = np.where(fp32_op, r.nbytes - r.fp32_in / 2, half)
    zero = np.zeros(mem.sum())
    scale[mem] = _ratio(p, zero, r.nbytes[mem], zero, new_bytes[mem], zero)
    # the casts autocast adds, on the matmul they feed: a forward matmul's
    # weight to bf16 (6 bytes an element: read 4, write 2) and its gradient
    # back in backward; its input where the op before it was an fp32 one
    fwd = np.flatnonzero(compute & ~r.backward)
    bw = p.profile.bandwidth * p.profile.memory_efficiency
    has_backward = bool((r.backward & r.launched).any())
    cast = p.profile.min_kernel_ns + 1e9 * 6 * r.weight[fwd] / bw
    extra = cast * (2 if has_backward else 1)
    prev = _previous_on_stream(r, fwd)
    after_fp32 = (prev >= 0) & fp32_op[np.maximum(prev, 0)]
    inputs = np.maximum(r.fp32_in[fwd] / 4 - r.weight[fwd], 0)  # its other fp32 elements
    extra += np.where(after_fp32, p.profile.min_kernel_ns + 1e9 * 6 * inputs / bw, 0)
    d = np.maximum(dur[fwd], 1)
    scale[fwd] += extra / d
    return scale


def _previous_on_stream(r: Rows, rows: np.ndarray) -> np.ndarray:
    """The launched gpu row before each of ``rows`` on its stream (-1 none)."""
    out = np.full(len(rows), -1, np.int64)
    launched = np.flatnonzero(r.launched)
    for s in np.unique(r.stream[rows]):
        mine = launched[r.stream[launched] == s]
        pos = np.searchsorted(mine, rows[r.stream[rows] == s])
        out[r.stream[rows] == s] = np.where(pos > 0, mine[np.maximum(pos - 1, 0)], -1)
    return out


def _merged(tl: Timeline, r: Rows, dur: np.ndarray, groups: list[np.ndarray],
            new_ns: list[float], act: HostActivity | None) -> GpuChange | None:
    """Each group of gpu rows (launch order) becomes its first row lasting
    ``new_ns``; the other rows' ops are gone. Their dispatching goes too,
    as the ``graphs`` edit takes it: the launch path (``act.launch_only``:
    ops, views and the glue between them, outside fetches and syncs) from
    the end of the group's first launch to the end of its last, so the
    recorder's own cost between them goes with it (``edits.combined``)."""
    if not groups:
        return None
    scale = np.ones(len(r.op))
    drop = np.zeros(len(tl.ops), bool)
    for rows, ns in zip(groups, new_ns):
        scale[rows[0]] = ns / max(float(dur[rows[0]]), 1.0)
        drop[r.op[rows[1:]]] = True
    heads = r.op[[g[0] for g in groups]]
    drop[heads] = False  # an op with several rows keeps its first
    o = tl.ops
    oe = np.asarray(o.host_end_ns, np.int64)
    pb = oe[heads]
    pe = np.array([oe[r.op[g]].max() for g in groups], np.int64)
    keep = pe > pb
    order = np.argsort(pb[keep], kind="stable")
    pb, pe = pb[keep][order], np.maximum.accumulate(pe[keep][order]) if keep.any() else pe[keep]
    if len(pb):  # the spans may nest (one group inside another's host time): unite
        starts = np.concatenate([[True], pb[1:] > pe[:-1]])
        pb, pe = pb[starts], np.maximum.reduceat(pe, np.flatnonzero(starts))
    if act is not None:
        lb, le = act.launch_only
        pb, pe = subtract((pb, pe), subtract((pb, pe), (lb, le)))
    else:  # no activity: the ops' own host time
        d = np.flatnonzero(drop)
        pb, pe = np.asarray(o.host_begin_ns, np.int64)[d], oe[d]
        order = np.argsort(pb, kind="stable")
        pb, pe = pb[order], pe[order]
    return GpuChange(scale, drop, np.asarray(pb, np.int64), np.asarray(pe, np.int64))


def _fused_optimizer(tl: Timeline, p: Pricing, r: Rows, dur: np.ndarray,
                     act: HostActivity | None) -> GpuChange | None:
    """``fused_optimizer``: ``fused=True`` (Adam, AdamW, SGD, Adagrad):
    each optimizer step's foreach kernels become one kernel making one
    pass over parameters, gradients and state (``PASSES``), launched
    once."""
    s = tl.spans
    o = tl.ops
    steps = np.flatnonzero(np.asarray(s.kind) == int(SpanKind.OPTIMIZER))
    names = tl.decode(np.asarray(s["name"], np.int64)[steps]) if len(steps) else []
    ob = np.asarray(o.host_begin_ns, np.int64)
    groups, new_ns = [], []
    for k, name in zip(steps, names):
        kind = _optimizer_kind(str(name))
        if kind is None:
            continue
        b0, b1 = int(s.begin_ns[k]), int(s.end_ns[k])
        inside = np.flatnonzero(r.launched & (r.op != NONE))
        inside = inside[(ob[r.op[inside]] >= b0) & (ob[r.op[inside]] < b1)]
        # the update follows the step's last forward or backward work (a
        # closure the step called, as Lightning's): the optimizer's rows after it
        model = inside[~r.optimizer[inside]]
        after = ob[r.op[model]].max() if len(model) else b0 - 1
        rows = inside[r.optimizer[inside] & (ob[r.op[inside]] > after) & (r.flops[inside] == 0)]
        if len(rows) < 2 or any(str(b).startswith("_fused_") for b in r.base[rows]):
            continue  # one kernel already, or fused
        foreach = np.array([str(b).startswith("_foreach_") for b in r.base[rows]], bool)
        if not foreach.any():
            continue  # the per-parameter path: its parameters' bytes are not said
        param = _param_bytes(tl, r, rows[foreach])
        if not param:
            continue
        passes = PASSES[kind] if kind != "sgd" or foreach.sum() > 2 else 3
        old = p.ns(np.zeros(len(rows)), r.nbytes[rows], np.zeros(len(rows))).sum()
        new = p.ns(np.zeros(1), np.array([passes * param]), np.zeros(1))[0]
        groups.append(rows)
        new_ns.append(float(dur[rows].sum()) * new / max(old, 1.0))
    return _merged(tl, r, dur, groups, new_ns, act)


def _optimizer_kind(name: str) -> str | None:
    low = name.lower()
    for kind in ("adamw", "adagrad", "adam", "sgd"):
        if re.search(rf"\b{kind}\b", low.replace(".", " ").replace("#", " ")):
            return kind
    return None


def _param_bytes(tl: Timeline, r: Rows, rows: np.ndarray) -> float:
    """The parameters' bytes a foreach path updates: the bytes of its ops
    over one tensor list (the fewest tensors among them)."""
    counts = []
    for i in rows:
        text = tl.string(int(tl.ops.shapes[r.op[i]]))
        counts.append((len(TENSOR.findall(text)), signature(text)[0]))
    n = min(c for c, _ in counts)
    one = [b for c, b in counts if c == n]
    return float(np.median(one)) if one else 0.0


def _compile(tl: Timeline, p: Pricing, r: Rows, dur: np.ndarray,
             act: HostActivity | None) -> GpuChange | None:
    """``compile``: ``torch.compile`` (default mode). Each chain of
    memory-bound kernels between two compute, copy or sync points of a
    stream (in one step and one phase, forward or backward) becomes one
    kernel reading the chain's first inputs and writing its last output,
    launched once; matmuls, convolutions and attention stay as they
    are."""
    _, hb, _ = step_windows(tl)
    o = tl.ops
    ob = np.asarray(o.host_begin_ns, np.int64)
    base = r.base
    fusable = r.launched & ~r.optimizer & (r.flops == 0) & (r.op != NONE) & \
        ~np.isin(base, _COPIES) & ~np.isin(base, _DATA_DEPENDENT)
    groups, new_ns = [], []
    launched = np.flatnonzero(r.launched & (r.op != NONE))
    for s in np.unique(r.stream[launched]):
        mine = launched[r.stream[launched] == s]
        mine = mine[np.argsort(ob[r.op[mine]], kind="stable")]
        step = np.searchsorted(hb, ob[r.op[mine]], side="right")
        f = fusable[mine]
        # a chain: consecutive fusable rows of one step, phase and stream
        brk = np.ones(len(mine), bool)
        brk[1:] = ~f[:-1] | ~f[1:] | (step[1:] != step[:-1]) | \
            (r.backward[mine][1:] != r.backward[mine][:-1])
        heads = np.flatnonzero(brk)
        ends = np.append(heads[1:], len(mine))
        for h, e in zip(heads, ends):
            if e - h < 2 or not f[h]:
                continue
            rows = mine[h:e]
            old = p.ns(np.zeros(len(rows)), r.nbytes[rows], np.zeros(len(rows))).sum()
            once = r.nbytes[rows[0]] - r.out[rows[0]] + r.out[rows[-1]]
            new = p.ns(np.zeros(1), np.array([once]), np.zeros(1))[0]
            groups.append(rows)
            new_ns.append(float(dur[rows].sum()) * new / max(old, 1.0))
    return _merged(tl, r, dur, groups, new_ns, act)


