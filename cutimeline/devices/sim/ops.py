"""SimGPU's op stream: the ops torch dispatches for CUDA, and the values meta tensors read back.

A simulated program runs on ``meta`` tensors, where torch would take other
paths than on CUDA: optimizers fall back to one op per parameter (their
foreach and fused kernels are for CUDA-like devices) and
``F.scaled_dot_product_attention`` decomposes into ~20 ops. While a SimGPU
that owns meta tensors records, ``SimOps.as_cuda`` makes torch treat meta
as it treats CUDA there, and undoes it when the last one stops; a 0-dim
tensor formats (``f"{loss:.3f}"``) and a tensor prints as on CUDA, by a
read. And a meta tensor has no values: ``SimOps.run`` answers a read-back
(``.item()``, ``bool()``, ``.tolist()``, ``.cpu()``) with the values the
value model gives it (``values.py``: exact where the host decided them,
modelled where the data would), after the host waited for the device as
it would on CUDA (the recorder's sync rules do that), and an op whose
output size depends on the values (``x[mask]``, ``nonzero``,
``unique``...) with a modelled count (``datadep.py``).
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as fn
import torch.optim.optimizer as optim
import torch.utils._foreach_utils as fe
from torch.amp.autocast_mode import autocast

from ...errors import CutimelineError
from ..opwork import op_name
from .comm import COMM_STREAM, SimComm, install as install_comm, uninstall as uninstall_comm, \
    wait_tensor
from .datadep import SUBSTITUTES as DATA_DEPENDENT, DataDependent
from .host import SimHost
from .local import SimLocal
from .roofline import OpModel
from .streams import SimStreams
from .values import SimValues

__all__ = ["SimOps"]


@dataclass(eq=False)
class SimOps:
    """The op-stream part of ``SimGPU``: what each op is (its name, value
    substitute and dispatch cost, once per ``OpOverload``), running it for
    the recorder (``run``), its simulated duration, and torch's CUDA-only
    paths opened to meta tensors while recording (``as_cuda``)."""

    local: SimLocal
    host: SimHost
    streams: SimStreams
    comm: SimComm
    datadep: DataDependent
    #: tensor device types that are device work (the ``owns`` option)
    owns: frozenset
    #: the ``cost`` option: None (roofline), a dict {op name: ns} or a callable
    cost: Any
    #: the roofline
    model: OpModel
    #: what reads of simulated tensors return (values.py)
    values: SimValues = field(default_factory=SimValues)
    #: id(OpOverload) -> ``info``
    seen: dict[int, tuple] = field(default_factory=dict, init=False)
    #: sentences on what this recording does not simulate, for meta["warnings"]
    warnings: list[str] = field(default_factory=list, init=False)
    #: op base name -> its value substitute, bound to the part it works on
    substitutes: dict[str, Callable] = field(init=False)
    #: how many hold torch's CUDA paths open for meta (a recording, a CUDA mapping)
    holds: int = field(default=0, init=False)
    #: CUDA is mapped to this SimGPU (``cuda/mapping.py``): autocast is simulated
    mapped: bool = field(default=False, init=False)
    #: while mapped, what the mapping answers, for the recording's meta["cuda_mapped"]
    mapping_said: dict = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        v = self.values
        self.substitutes = {
            # ops sized by their values: a modelled count (datadep.py)
            **{k: partial(f, self.datadep) for k, f in DATA_DEPENDENT.items()},
            # reads: the value model's answer (values.py)
            "_local_scalar_dense": partial(_scalar, v), "is_nonzero": partial(_is_nonzero, v),
            "_to_copy": partial(_to_copy, v), "copy_": partial(_copy_, v),
            "wait_tensor": partial(wait_tensor, self.comm)}

    def as_cuda(self, on: bool) -> None:
        """While recording, torch's optimizers and ``clip_grad_norm_`` treat
        meta tensors as they treat CUDA ones: they default to their foreach
        kernels (one launch per tensor group, not one per parameter) and
        accept ``fused=True``; ``F.scaled_dot_product_attention`` on meta
        tensors is one fused kernel (forward and backward) as CUDA picks it
        on an H100 (flash attention for fp16/bf16 without a mask, else
        memory-efficient attention), where meta would decompose it into
        ~20 ops; and ``F.dropout`` in training is one ``native_dropout``
        kernel, as on CUDA, not meta's three. The patches act only while a SimGPU that owns meta tensors
        is recording (one dropped unharvested stops counting when it is
        collected) and are undone when the last one harvests. Calls
        nest: a CUDA mapping holds them open around its recordings."""
        self.holds = max(self.holds + (1 if on else -1), 0)
        if self.holds:  # every SimGPU runs collectives: Work.wait's hook (comm.py)
            _COMMUNICATING.add(self.comm)
            install_comm(_COMMUNICATING)
        else:
            _COMMUNICATING.discard(self.comm)
            if not _COMMUNICATING:
                uninstall_comm()
        if self.holds and "meta" in self.owns:
            _RECORDING.add(self)
            _install()
        elif not self.holds:
            _RECORDING.discard(self)
            if not _RECORDING:
                _uninstall()

    # -- values a meta tensor cannot give ------------------------------------
    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run op ``func`` for the recorder (``SimGPU.run``). On simulated
        (meta) tensors a read-back has no value to read: ``.item()``,
        ``bool()``, ``.tolist()`` and copies to the host return zeros (the
        host still waits for the device, as it would on CUDA); and torch
        asks which fused attention kernel to use, which on meta would be
        none. Then the launch waits for room in its stream's queue
        (``SimStreams.room``), inside the op as CUDA's launch call would;
        most launches find room at a glance, without the lock."""
        info = self.seen.get(id(func)) or self.info(func)
        name, sub, call = info[0], info[1], info[3]
        loc = self.local
        loc.op = (name, args, kwargs)  # for its dispatch cost
        if sub is None:
            out = call(*args, **kwargs) if kwargs else call(*args)
        else:
            out = sub(args, kwargs)
            if out is NotImplemented:
                out = call(*args, **kwargs)
            else:
                sub = False  # its output is the substitute's: no values to give
        # values for small outputs: when any tensor has some, or the op makes them
        if sub is not False and (self.values.store or info[5]):
            self.values.after(func, args, kwargs, out)
        if info[2] is not None:  # its dispatch cost, for end() or wait()
            loc.ns = info[2]
        streams = self.streams
        if streams.launch_queue:
            q = streams.pending.get(loc.stream)
            if q and len(q) >= streams.launch_queue:
                streams.room(name, args, kwargs)
        return out

    def info(self, func: Any) -> tuple[str, Any, int | None, Any, Any, bool]:
        """(name, value substitute or None, dispatch cost when the name fixes
        it, the callable that runs it, func, whether it makes values from
        none: a factory, a copy, an op with a rule in ``values.py``) of op
        ``func``: worked out once per
        ``OpOverload`` (the per-op path reads one dict), every time for
        anything else (a compiled region's name object is new each time).
        Keyed by ``id(func)``: an OpOverload hashes in Python; the entry
        keeps it alive."""
        info = self.seen.get(id(func))
        if info is not None:
            return info
        name = op_name(func)
        k = self.values.kind(func) if isinstance(func, torch._ops.OpOverload) else None
        makes = k is not None and bool(k.factory or k.rule or k.base in ("_to_copy", "copy_"))
        info = (name, self.substitutes.get(getattr(func, "__name__", "").split(".")[0]),
                self.host.fixed_ns(name), getattr(func, "_op", func), func, makes)
        if isinstance(func, torch._ops.OpOverload):
            self.seen[id(func)] = info
        return info

    def cost_ns(self, func: Any, args: tuple, kwargs: dict, out: Any,
                stream: int | None = None) -> int:
        """The simulated duration of op ``func``: ``cost`` (an override by
        name or a callable) or the model: a collective's (work on the
        communication stream) by ``comm.comm_ns``, else the roofline
        (``roofline.OpModel``)."""
        cost = self.cost
        if isinstance(cost, dict) or cost is None:
            name = self.info(func)[0]
            ns = None if cost is None else cost.get(name)
            if ns is None and cost is not None:
                ns = cost.get(name.split(".")[0])
            if ns is not None:
                return ns
            if stream == COMM_STREAM:
                return self.comm.cost_ns(func, args, kwargs, out)
            return self.model.cost_ns(func, args, kwargs, out)
        name = self.info(func)[0]
        ns = cost(name, args, kwargs, out)
        if isinstance(ns, bool) or not isinstance(ns, (int, float, np.number)) \
                or not math.isfinite(ns) or ns < 0:
            raise CutimelineError(f"The SimGPU cost function returned {ns!r} for "
                                  f"{name}; it must return a duration ≥ 0 in ns.")
        return int(round(ns))


_RECORDING: "weakref.WeakSet[Any]" = weakref.WeakSet()  # SimGPUs recording now
_COMMUNICATING: "weakref.WeakSet[Any]" = weakref.WeakSet()  # any owns, recording now
_SAVED: dict[tuple[Any, str], Callable] = {}  # (module, name) -> torch's own


def _install() -> None:
    if _SAVED:
        return
    for mod in (optim, fe):
        for name in ("_get_foreach_kernels_supported_devices",
                     "_get_fused_kernels_supported_devices"):
            f = getattr(mod, name, None)
            if f is not None:
                _SAVED[mod, name] = f
                setattr(mod, name, _with_meta(f))
    _SAVED[fn, "scaled_dot_product_attention"] = f = fn.scaled_dot_product_attention
    fn.scaled_dot_product_attention = _fused_attention(f)
    _SAVED[fn, "dropout"] = f = fn.dropout
    fn.dropout = _fused_dropout(f)
    for name, make in (("__format__", _formatted), ("__repr__", _shown)):
        _SAVED[torch.Tensor, name] = f = torch.Tensor.__dict__[name]
        setattr(torch.Tensor, name, make(f))
    _SAVED[autocast, "__enter__"] = f = autocast.__dict__["__enter__"]
    autocast.__enter__ = _said_autocast(f)


def _uninstall() -> None:
    for (mod, name), f in _SAVED.items():
        setattr(mod, name, f)
    _SAVED.clear()


def _with_meta(f: Callable) -> Callable:
    def devices() -> list[str]:
        return [*f(), "meta"] if _RECORDING else f()
    devices.__wrapped__ = f  # type: ignore[attr-defined]
    return devices


def _fused_attention(sdpa: Callable) -> Callable:
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, **kw):
        if not _RECORDING or not (_meta(query) and _meta(key) and _meta(value)) \
                or kw.get("enable_gqa") or query.dim() != 4 \
                or not query.dtype.is_floating_point:
            return sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, **kw)
        aten = torch.ops.aten
        if query.dtype == torch.float32 and any(o.mapped for o in _RECORDING) \
                and torch.is_autocast_enabled("cuda"):  # autocast's cast, before the choice
            low = torch.get_autocast_dtype("cuda")
            query, key, value = (t.to(low) for t in (query, key, value))
        if attn_mask is None and query.dtype in (torch.float16, torch.bfloat16) \
                and query.size(-1) <= 256:
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, scale=scale)[0]
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros((), dtype=query.dtype, device=query.device) \
                .masked_fill(~attn_mask, float("-inf"))
        grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]
    scaled_dot_product_attention.__wrapped__ = sdpa  # type: ignore[attr-defined]
    return scaled_dot_product_attention


def _fused_dropout(drop: Callable) -> Callable:
    """``F.dropout`` (``nn.Dropout``) that runs as on CUDA: one
    ``native_dropout`` kernel (aten's dropout takes its fused kernel for
    CUDA tensors), where meta would run three (``bernoulli_``, ``div_``,
    ``mul``) over the tensor."""
    def dropout(input, p=0.5, training=True, inplace=False):
        if _RECORDING and training and not inplace and _meta(input) and 0 < p < 1 \
                and input.is_floating_point() and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return drop(input, p, training, inplace)
    dropout.__wrapped__ = drop  # type: ignore[attr-defined]
    return dropout


def _meta(t: Any) -> bool:
    # is_meta, not device.type: a CUDA mapping answers device as cuda:0
    return isinstance(t, torch.Tensor) and t.is_meta


AUTOCAST = ("torch.autocast('cuda') does nothing to meta tensors: the ops inside it are "
            "simulated in their tensors' own dtype (fp32, on TF32 tensor cores where torch "
            "allows it), not in the autocast dtype; cast the model and its inputs to "
            "bfloat16 to simulate mixed precision.")


def _said_autocast(enter: Callable) -> Callable:
    """``torch.autocast.__enter__`` that tells each recording SimGPU, once,
    that a CUDA autocast region is priced in fp32 (``AUTOCAST``): autocast
    casts only tensors of its device type, and meta is none."""
    def __enter__(self):
        if getattr(self, "device", None) == "cuda":
            for ops in list(_RECORDING):
                if AUTOCAST not in ops.warnings and not ops.mapped:
                    ops.warnings.append(AUTOCAST)
                    warnings.warn(f"cutimeline: {AUTOCAST}", RuntimeWarning, stacklevel=2)
        return enter(self)
    __enter__.__wrapped__ = enter  # type: ignore[attr-defined]
    return __enter__


def _formatted(fmt: Callable) -> Callable:
    """``Tensor.__format__`` that formats a simulated 0-dim tensor by its
    value, as torch does a CUDA one (``'{:6.2f}'.format(acc)``: a read),
    where torch's own gives up on meta tensors."""
    def __format__(self, format_spec):
        if _RECORDING and type(self) is torch.Tensor and self.is_meta and self.dim() == 0:
            return self.item().__format__(format_spec)
        return fmt(self, format_spec)
    __format__.__wrapped__ = fmt  # type: ignore[attr-defined]
    return __format__


def _shown(rep: Callable) -> Callable:
    """``Tensor.__repr__`` (``print(t)``, ``str(t)``) that shows a simulated
    tensor's values, read from the device as CUDA's printing reads them
    (a sync), where torch's own prints ``tensor(..., device='meta')``."""
    def __repr__(self, *, tensor_contents=None):
        if not (_RECORDING and type(self) is torch.Tensor and self.is_meta) \
                or self.is_nested or self.layout != torch.strided:
            return rep(self, tensor_contents=tensor_contents)
        with torch.no_grad():
            if self.numel() <= _SHOWN:
                host = self.cpu()
            else:  # a summary is all that prints: one value read, spread
                host = self.reshape(-1)[:1].cpu().expand(self.shape)
        text = rep(host, tensor_contents=tensor_contents)
        extra = f", device='{self.device}'"  # cuda:0 where CUDA is mapped
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return text[:-1] + extra + ")" if text.endswith(")") else text
    __repr__.__wrapped__ = rep  # type: ignore[attr-defined]
    return __repr__


_SHOWN = 1 << 20  # elements a print reads whole (a larger tensor: one value)


def _scalar(values: SimValues, args: tuple, kwargs: dict) -> Any:
    """``t.item()`` (``int(t)``, ``float(t)``): the value model's number."""
    if not _meta(args[0]):
        return NotImplemented
    return values.scalar(args[0])


def _is_nonzero(values: SimValues, args: tuple, kwargs: dict) -> Any:
    """``bool(t)`` (``if t:``, ``while t:``), with torch's errors for a
    tensor that has no single value."""
    x = args[0]
    if not _meta(x):
        return NotImplemented
    if x.numel() != 1:
        raise RuntimeError(f"Boolean value of Tensor with "
                           f"{'no values' if x.numel() == 0 else 'more than one value'} "
                           f"is ambiguous")
    return bool(values.scalar(x))


def _to_copy(values: SimValues, args: tuple, kwargs: dict) -> Any:
    """A copy of a simulated tensor to the host: its values."""
    dst = kwargs.get("device")
    if not _meta(args[0]) or dst is None or torch.device(dst).type == "meta":
        return NotImplemented
    x = args[0]
    v = values.host(x)
    return v.to(dtype=kwargs.get("dtype") or x.dtype,
                memory_format=kwargs.get("memory_format") or torch.preserve_format)


def _copy_(values: SimValues, args: tuple, kwargs: dict) -> Any:
    """``host.copy_(simulated)``: the host tensor takes its values."""
    dst, src = args[0], args[1]
    if not _meta(src) or _meta(dst):
        return NotImplemented
    return dst.copy_(values.host(src))
