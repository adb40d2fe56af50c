"""The simulated GPU's cost model: GPU profiles and a roofline per aten op.

The time an op takes on a simulated GPU is

    min_kernel_ns + max(FLOPs / (peak FLOP/s · efficiency),
                        bytes · passes / (memory bandwidth · memory_efficiency))

FLOPs come from torch's ``FlopCounterMode`` formulas (matmuls,
convolutions, attention; every other op is bound by memory traffic),
bytes from the op's inputs, outputs and in-place-written arguments;
``devices/opwork.py`` counts both, ``comm.py`` prices collectives. Ops
with a FLOP formula run on tensor cores at their compute dtype's peak
(``OpModel.precision``: fp32 on TF32 where torch allows it). Some ops
read their tensors more than once (``PASSES``).

Where the efficiencies come from (no kernel runs at the datasheet's
peak):

* ``memory_efficiency`` 0.88: streaming kernels reach 85-90 % of HBM
  peak (a STREAM-like triad and device-to-device copies: 3.0-3.1 of
  3.35 TB/s on an H100 SXM; the A100 taken alike).
* ``efficiency`` per family and precision: fitted to published
  single-GPU training throughputs of ResNet-50 v1.5, BERT-base and GPT-2
  124M in TF32 and mixed precision (the table and its sources:
  ``benchmarks/zoo/zoo_calibration.md``), which SimGPU matches within
  25 %. On the A100 the fit lands where cuBLAS benchmarks put matmuls
  (about 80 % of peak) and cuDNN's convolutions in those models far
  lower (about 25 %: layout transforms, small spatial tiles, NCHW in
  TF32). The H100's published figures are only about 1.65× the A100's,
  the ratio of their memory bandwidths, not of their tensor-core peaks
  (3.2×): those kernels reach about a third of Hopper's matmul peak and
  10-15 % in convolutions, which is what its factors say. The H200
  takes the H100's; precisions a profile does not name take
  ``DEFAULT_EFFICIENCY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ...errors import CutimelineError
from ...timeline.gpus import gpu_named
from ..opwork import flop_formula, formula_flops, op_name, tensor_bytes, touched_bytes, work_key

__all__ = ["GpuProfile", "PROFILES", "DEFAULT_EFFICIENCY", "PASSES", "profile_named",
           "profile_for_device", "OpModel"]

_STRIDED = torch.strided


@dataclass(frozen=True)
class GpuProfile:
    """The numbers the simulator needs about one GPU. ``peak_flops`` maps
    a precision ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8") to
    dense FLOP/s (tensor-core peak where the GPU has one, except "fp32",
    which is the non-tensor peak). ``bandwidth`` is memory
    bandwidth in bytes/s. ``link_bandwidth`` is the host link's (PCIe) rate
    in bytes/s one way, what a copy between host and device memory runs
    at: a typical measured rate for pinned memory (CUDA's bandwidthTest).
    ``nvlink_bandwidth`` and ``collective_latency_ns``: a collective's bus
    bandwidth and fixed cost (``comm.py``). Latencies are typical
    measurements of a launch on an idle GPU, not datasheet figures:
    ``launch_latency_ns`` from the start of an op's dispatch to its
    kernel's start (a kernel starts no earlier than its launch returns,
    ``gpu.py``)."""
    name: str
    peak_flops: dict[str, float]
    bandwidth: float
    link_bandwidth: float = 25e9
    launch_latency_ns: int = 4_000
    event_latency_ns: int = 2_000
    min_kernel_ns: int = 2_000
    nvlink_bandwidth: float = 450e9
    collective_latency_ns: int = 15_000
    notes: str = field(default="", compare=False)
    #: the fraction of ``bandwidth`` a streaming kernel achieves
    memory_efficiency: float = 0.88
    #: the fraction of the peak ops reach, by family ("matmul", "conv",
    #: "attention") and precision (``peak_flops``'s keys); what is not named
    #: here, ``DEFAULT_EFFICIENCY``'s
    efficiency: Mapping[str, Mapping[str, float]] = field(default_factory=dict, compare=False)

    def achieved(self, family: str, precision: str) -> float:
        """The fraction of the ``precision`` peak an op of ``family`` reaches."""
        got = self.efficiency.get(family, {}).get(precision)
        if got is None:
            got = DEFAULT_EFFICIENCY.get(family, DEFAULT_EFFICIENCY["matmul"]).get(
                precision, 1.0)
        return got


def _compute(gpu: str, **fill: str) -> dict[str, float]:
    """The dense FLOP/s of the GPU that ``timeline.gpus`` (the datasheet
    table, one copy of those figures) names ``gpu``; ``fill`` runs a
    precision the GPU has no units for at another's rate (the A100 has no
    fp8 units: fp8 work runs as bf16)."""
    peaks = dict(gpu_named(gpu).peak_flops)
    for missing, like in fill.items():
        peaks.setdefault(missing, peaks[like])
    return peaks


#: what a profile that names no efficiency reaches: the A100 fit (module doc);
#: CUDA-core fp32 (no TF32) matmuls at 85 % of the fp32 peak
DEFAULT_EFFICIENCY: dict[str, dict[str, float]] = {
    "matmul": {"fp64": 0.78, "fp32": 0.85, "tf32": 0.78, "bf16": 0.8, "fp16": 0.8,
               "fp8": 0.8, "int8": 0.8},
    "conv": {"fp64": 0.23, "fp32": 0.5, "tf32": 0.23, "bf16": 0.265, "fp16": 0.265,
             "fp8": 0.265, "int8": 0.265},
}
DEFAULT_EFFICIENCY["attention"] = DEFAULT_EFFICIENCY["matmul"]

# The H100's fit (module doc): tensor-core work at about a third of Hopper's
# peak in matmuls and fused attention, 10-15 % in convolutions
_HOPPER = {
    "matmul": {"fp64": 0.35, "tf32": 0.35, "bf16": 0.35, "fp16": 0.35, "fp8": 0.35,
               "int8": 0.35},
    "conv": {"fp64": 0.15, "tf32": 0.15, "bf16": 0.10, "fp16": 0.10, "fp8": 0.10,
             "int8": 0.10},
}
_HOPPER["attention"] = _HOPPER["matmul"]

# Compute from the datasheet table (dense: the datasheets print
# tensor-core numbers "with sparsity", twice the dense rate); memory
# bandwidth from the same datasheets. Host links: PCIe Gen5 x16 (H100,
# H200: 64 GB/s a direction raw, about 55 measured host to device from
# pinned memory) and Gen4 x16 (A100: 32 raw, about 25 measured).
PROFILES: dict[str, GpuProfile] = {
    # NVIDIA H100 SXM5 80 GB: HBM3 3.35 TB/s. Collective bus bandwidth: comm.py.
    "h100": GpuProfile("h100", _compute("NVIDIA H100 80GB HBM3"), 3.35e12, 55e9,
                       notes="NVIDIA H100 SXM5 80GB", efficiency=_HOPPER),
    # NVIDIA A100 SXM4 80 GB: HBM2e 2,039 GB/s.
    "a100": GpuProfile("a100", _compute("NVIDIA A100-SXM4-80GB", fp8="bf16"), 2.039e12,
                       25e9, launch_latency_ns=5_000, event_latency_ns=2_500,
                       min_kernel_ns=2_500, nvlink_bandwidth=230e9,
                       notes="NVIDIA A100 SXM4 80GB"),
    # NVIDIA H200 SXM 141 GB: compute as H100 SXM, HBM3e 4.8 TB/s.
    "h200": GpuProfile("h200", _compute("NVIDIA H200"), 4.8e12, 55e9,
                       notes="NVIDIA H200 SXM 141GB", efficiency=_HOPPER),
}

# Ops that copy between tensors, perhaps between host and device memory.
_COPIES = frozenset({"aten::_to_copy", "aten::copy_"})

# Ops that run no kernel: allocations and metadata changes (views are found
# by their schema, these are not marked as views).
NO_KERNEL = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like",
    "aten::new_empty", "aten::new_empty_strided", "aten::resize_",
    "aten::resize_as_", "aten::set_", "aten::detach", "aten::alias",
    "aten::lift_fresh", "aten::_unsafe_view", "aten::_reshape_alias",
    "aten::record_stream", "_c10d_functional::wait_tensor",  # a stream wait
    "_c10d_functional::_wrap_tensor_autograd"})

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# Memory passes over an op's tensors, relative to one read of each input and
# one write of each output, as the kernels torch runs on CUDA make them:
# batch norm in training (its ``training`` argument, 6th) reads its input
# for the statistics, then again to normalise; its backward reads input and
# gradient for the reductions, then again for the gradient; a layer norm's
# backward computes the weight gradients in a second kernel over the same
# tensors; a softmax over rows longer than a block holds reads them three
# times. Bytes (``devices/opwork.py``): an add of two n-element fp32
# tensors moves 12·n; ``copy_`` reads its source and writes its
# destination once each; a foreach update writes its first list, a fused
# optimizer its parameters and states; views and allocations cost nothing.
_BN_TRAIN = 3 / 2
_BN_BACKWARD = 5 / 3
PASSES: dict[str, float] = {
    "native_batch_norm": _BN_TRAIN, "cudnn_batch_norm": _BN_TRAIN,
    "_native_batch_norm_legit": _BN_TRAIN, "_batch_norm_with_update": _BN_TRAIN,
    "native_batch_norm_backward": _BN_BACKWARD, "cudnn_batch_norm_backward": _BN_BACKWARD,
    "batch_norm_backward": _BN_BACKWARD, "native_group_norm": _BN_TRAIN,
    "native_group_norm_backward": _BN_BACKWARD, "native_layer_norm_backward": _BN_BACKWARD,
    "_softmax": 2.0, "_log_softmax": 2.0}
# ops whose passes depend on their arguments: a batch norm's training flag;
# a softmax's row, held in one block up to this many elements
_BN_FLAGGED = frozenset({"native_batch_norm", "cudnn_batch_norm", "_native_batch_norm_legit"})
_SOFTMAX = frozenset({"_softmax", "_log_softmax"})
_ROW_IN_BLOCK = 1024


def _passes(base: str, args: tuple) -> float:
    """``PASSES`` of op ``base`` for these arguments (1 when it reads once)."""
    if base in _BN_FLAGGED:
        return _BN_TRAIN if len(args) > 5 and args[5] else 1.0
    if base in _SOFTMAX:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return 1.0
        dim = args[1] if len(args) > 1 and isinstance(args[1], int) else -1
        return PASSES[base] if x.size(dim) > _ROW_IN_BLOCK else 1.0
    return PASSES.get(base, 1.0)

_DTYPE_PRECISION = {
    "torch.float64": "fp64", "torch.float32": "fp32", "torch.bfloat16": "bf16",
    "torch.float16": "fp16", "torch.float8_e4m3fn": "fp8",
    "torch.float8_e5m2": "fp8", "torch.float8_e4m3fnuz": "fp8",
    "torch.float8_e5m2fnuz": "fp8", "torch.int8": "int8", "torch.uint8": "int8",
}


def profile_named(profile: str | GpuProfile) -> GpuProfile:
    """A profile by name ("h100", "a100", "h200") or a GpuProfile as is."""
    if isinstance(profile, GpuProfile):
        missing = [p for p in PRECISIONS
                   if not profile.peak_flops.get(p, 0) > 0]
        bad = ("peak_flops " + repr(missing[0]) if missing else
               "bandwidth" if not profile.bandwidth > 0 else
               "link_bandwidth" if not profile.link_bandwidth > 0 else
               "nvlink_bandwidth" if not profile.nvlink_bandwidth > 0 else None)
        if bad is not None:
            raise CutimelineError(
                f"GpuProfile {profile.name!r} needs a positive peak_flops for "
                f"each of {', '.join(PRECISIONS)}, a positive bandwidth, link_band"
                f"width and nvlink_bandwidth (bytes/s); {bad} is not positive.")
        fractions = [("memory_efficiency", profile.memory_efficiency)] + [
            (f"efficiency[{f!r}][{p!r}]", v) for f, by in profile.efficiency.items()
            for p, v in by.items()]
        for what, v in fractions:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise CutimelineError(
                    f"GpuProfile {profile.name!r}: {what}={v!r} must be a fraction of "
                    f"the peak above 0 and at most 1, such as 0.8.")
        return profile
    if isinstance(profile, str) and profile.lower() in PROFILES:
        return PROFILES[profile.lower()]
    raise CutimelineError(
        f"There is no GPU profile {profile!r}; use one of "
        f"{', '.join(map(repr, PROFILES))} or pass a "
        f"cutimeline.devices.sim.GpuProfile.")


def profile_for_device(name: str, sim_profile: str | None = None) -> GpuProfile | None:
    """The profile a recording's GPU is priced with (the GPU-side what-if
    edits, ``analysis/replay/gpuside.py``): a simulated GPU's own profile
    (``sim_profile``, its name in ``PROFILES``); else the GPU the device
    ``name`` names in the datasheet table (``timeline/gpus.py``: peaks and
    memory bandwidth), with the efficiencies of its generation (Hopper's
    fit for H100 and H200, the A100 fit for the others); None for a GPU
    the table does not know or gives no bandwidth."""
    if isinstance(sim_profile, str) and sim_profile.lower() in PROFILES:
        return PROFILES[sim_profile.lower()]
    known = gpu_named(name)
    if known is None or not known.bandwidth:
        return None
    peaks = dict(known.peak_flops)
    for p in PRECISIONS:  # a precision it has no units for runs at fp32's rate
        peaks.setdefault(p, peaks.get("fp32", max(peaks.values())))
    hopper = known.label.startswith(("H100", "H200"))
    return GpuProfile(known.label, peaks, known.bandwidth,
                      efficiency=_HOPPER if hopper else {}, notes=known.source)


def _first_dtype(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.dtype
    if isinstance(obj, (tuple, list)):
        for o in obj:
            d = _first_dtype(o)
            if d is not None:
                return d
    return None


class OpModel:
    """Roofline cost of aten ops on one GPU profile, in ns.

    ``tf32``: None follows torch's TF32 switches at each op; True/False force
    fp32 matmuls and convolutions onto (or off) the TF32 tensor cores.
    """

    #: distinct (op, shapes) remembered before the cache starts over
    CACHE_SIZE = 100_000

    def __init__(self, profile: GpuProfile, tf32: bool | None = None):
        self.profile, self.tf32 = profile, tf32
        # what a streaming kernel reaches of the memory bandwidth (module doc)
        self._min_ns = profile.min_kernel_ns
        self._bandwidth = profile.bandwidth * profile.memory_efficiency
        self._link = profile.link_bandwidth
        # id(func) -> (no_kernel, flop formula or None, is_conv, func, is_copy,
        # family, passes: 1.0, a factor, or None when its arguments say):
        # an OpOverload hashes in Python, its id does not (the entry keeps it alive)
        self._ops: dict[int, tuple] = {}
        # (func, argument summary) -> (bytes, flops): a training loop
        # repeats its shapes, and torch's formulas cost tens of µs per call
        self._work: dict[tuple, tuple[int, int]] = {}

    def _describe(self, func: Any) -> tuple:
        info = self._ops.get(id(func))
        if info is None:
            schema = getattr(func, "_schema", None)
            base = schema.name if schema is not None else op_name(func)
            no_kernel = bool(getattr(func, "is_view", False)) or base in NO_KERNEL
            formula = flop_formula(func)
            short = base.split("::")[-1]
            family = "conv" if "conv" in short else \
                "attention" if "attention" in short or "flash" in short else "matmul"
            passes = None if short in _BN_FLAGGED or short in _SOFTMAX else \
                PASSES.get(short, 1.0)
            # the arguments it writes in place (foreach updates, a fused
            # optimizer's params and states), which it does not return
            writes = tuple(i for i, a in enumerate(schema.arguments if schema else ())
                           if a.alias_info is not None and a.alias_info.is_write
                           and not a.kwarg_only)
            info = (no_kernel, formula, "conv" in base, func, base in _COPIES, family, passes,
                    short, writes)
            if isinstance(func, torch._ops.OpOverload):  # others may be made per call
                self._ops[id(func)] = info
        return info

    def work(self, func: Any, args: tuple, kwargs: dict, out: Any) -> tuple[int, int]:
        """(bytes, FLOPs) of one op. Bytes: input tensors (an ``out=``
        tensor is not read) plus output tensors; FLOPs by torch's registered
        formula, 0 without one; both 0 for views and allocations."""
        no_kernel, formula = (self._ops.get(id(func)) or self._describe(func))[:2]
        if no_kernel:
            return 0, 0
        key = None
        if formula is not None:  # cached: bytes alone are cheaper than a key
            try:
                key = work_key(func, args, kwargs, out)
                found = self._work.get(key)
            except TypeError:  # an unhashable argument: not cached
                key = found = None
            if found is not None:
                return found
        n = tensor_bytes(args) + tensor_bytes(out)
        if kwargs:
            n += tensor_bytes(kwargs, skip=kwargs.get("out"))
        flops = 0
        if formula is not None:
            try:
                flops = formula_flops(formula, args, kwargs, out)
            except (RuntimeError, NotImplementedError):  # a nested tensor has no sizes
                pass
        if key is not None:
            if len(self._work) >= self.CACHE_SIZE:
                self._work.clear()
            self._work[key] = (n, flops)
        return n, flops

    def bytes(self, func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        return self.work(func, args, kwargs, out)[0]

    def flops(self, func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        return self.work(func, args, kwargs, out)[1]

    def precision(self, func: Any, args: tuple) -> str:
        """The precision op ``func`` computes in: its dtype's, and for fp32
        "tf32" where TF32 tensor cores are allowed for it (matmuls:
        ``torch.backends.cuda.matmul.allow_tf32``, False by default;
        convolutions: ``torch.backends.cudnn.allow_tf32``, True by
        default)."""
        precision = _DTYPE_PRECISION.get(str(_first_dtype(args)), "fp32")
        if precision == "fp32":
            tf32 = self.tf32
            if tf32 is None:
                tf32 = (torch.backends.cudnn.allow_tf32 if self._describe(func)[2]
                        else torch.backends.cuda.matmul.allow_tf32)
            precision = "tf32" if tf32 else "fp32"
        return precision

    def peak(self, func: Any, args: tuple) -> float:
        """The datasheet FLOP/s of this op's precision (tensor-core peak)."""
        return self.profile.peak_flops[self.precision(func, args)]

    def rate(self, func: Any, args: tuple) -> float:
        """The FLOP/s this op reaches: its precision's peak times what its
        family achieves of it (``GpuProfile.achieved``)."""
        p = self.precision(func, args)
        family = (self._ops.get(id(func)) or self._describe(func))[5]
        return self.profile.peak_flops[p] * self.profile.achieved(family, p)

    @staticmethod
    def _link_bytes(args: tuple, kwargs: dict) -> int:
        """Bytes a copy op moves over the host link: its source's, where
        source and destination lie on different kinds of device (host and
        simulated device); 0 for a copy within one memory."""
        if len(args) >= 2 and isinstance(args[1], torch.Tensor):  # copy_(dst, src)
            src, dst = args[1], args[0].device
        elif args and isinstance(args[0], torch.Tensor):         # _to_copy(src, device=)
            src, dst = args[0], kwargs.get("device")
            if dst is None:
                return 0
            dst = torch.device(dst)
        else:
            return 0
        if src.device.type == dst.type:
            return 0
        return src.nbytes if src.layout is _STRIDED else touched_bytes(src)

    def cost_ns(self, func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        """Simulated duration of one op in ns (0 for ops with no kernel).
        A copy between host and device memory runs at the host link's rate
        over its source's bytes (a pageable source's staging is the host's
        cost, ``host.dispatch_ns``); other ops by the roofline."""
        info = self._ops.get(id(func)) or self._describe(func)
        if info[1] is None:  # bound by memory alone (most ops): ``work`` in line
            if info[0]:
                return 0
            returned = out
            if info[4]:
                link = self._link_bytes(args, kwargs)
                if link:
                    return self._min_ns + int(round(link / self._link * 1e9))
                if args and out is args[0]:  # copy_(dst, src): dst written, not read
                    out = None
            if type(args) is tuple:  # tensor_bytes(args), one call less
                n = 0
                for o in args:
                    if isinstance(o, torch.Tensor):
                        n += o.nbytes if o.layout is _STRIDED and o.is_contiguous() \
                            else touched_bytes(o)
                    elif isinstance(o, (tuple, list, dict)):
                        n += tensor_bytes(o)
            else:
                n = tensor_bytes(args)
            n += tensor_bytes(out)
            for i in info[8]:  # written in place and not returned: written too
                if i < len(args) and args[i] is not returned:
                    n += tensor_bytes(args[i])
            if kwargs:
                n += tensor_bytes(kwargs, skip=kwargs.get("out"))
            passes = info[6]
            if passes != 1.0:
                n *= _passes(info[7], args) if passes is None else passes
            return self._min_ns + int(round(n / self._bandwidth * 1e9))
        n, flops = self.work(func, args, kwargs, out)
        if not n and not flops and self._describe(func)[0]:
            return 0
        t = n / self._bandwidth
        if flops:
            t = max(t, flops / self.rate(func, args))
        return self.profile.min_kernel_ns + int(round(t * 1e9))
