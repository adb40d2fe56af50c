"""CUDA mapped to a SimGPU for a block of the program: unmodified CUDA code runs on the simulated GPU.

A CPU-only torch aborts on any tensor that claims to be CUDA (its C++
device guard), and a CUDA build without a driver fails in autograd; so
the mapping works at the API boundary, never at the tensor's device:

* ``CudaMode``, a ``TorchFunctionMode``, rewrites every CUDA device a
  torch function is given (``device="cuda"``, an index, ``.to("cuda")``,
  ``.cuda()``, hence ``Module.to``) to ``meta``, the simulated GPU's
  tensors; answers ``tensor.device`` and ``is_cuda`` for them as CUDA
  would, so code that branches on the device takes its CUDA path; marks
  ``pin_memory()``'d host tensors pinned; applies
  ``torch.autocast("cuda")``'s casts (``autocast.py``);
* ``torch.cuda``'s and ``torch.accelerator``'s functions answer for the
  SimGPU (``api.py``), patched for the block and restored after;
* ``Values``, a ``TorchDispatchMode`` under the recorder's, keeps the
  simulated tensors' values and the storage meter outside recordings
  too, so ``print(loss)``, ``.item()`` and
  ``torch.cuda.memory_allocated()`` work anywhere in the block.

What differs from CUDA: ``tensor.is_meta`` stays True (torch's own code
reads it to know there is no data); ``torch.device("cuda")`` objects the
program makes are mapped where used; meta tensors the program makes
itself (deferred initialisation) are simulated GPU tensors too; the
mapping holds in the thread that entered it (and DataLoader's pinning
thread). A module moved on or off keeps its Parameter objects, as on
CUDA (``moves.py``); a parameter moved off and used again is a warning
naming both lines. ``torch.compile``d functions and custom CUDA
extensions are not simulated (a warning, ``ops.py``); CUDA graphs are an
error.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.utils.data._utils.pin_memory as pinning
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ....errors import CutimelineError
from ..host import pin
from ..memory import StorageMeter
from ..values import user_site
from .api import SimCudaEvent, SimCudaStream, patches, warn_untimed
from .autocast import Casts
from .moves import LEFT, mark, patches as move_patches

__all__ = ["CudaMapping", "mapped_gpu"]

_META = torch.device("meta")
_CUDA0 = torch.device("cuda", 0)
_DEVICE, _IS_CUDA = torch.Tensor.device, torch.Tensor.is_cuda
_Tensor = torch.Tensor
_LOCK = threading.Lock()
_ACTIVE: list["CudaMapping"] = []  # at most one


def mapped_gpu() -> Any:
    """The SimGPU CUDA is mapped to now (``SimGPU.as_cuda``), or None."""
    return _ACTIVE[0].gpu if _ACTIVE else None


def is_cuda(device: Any) -> bool:
    """Whether ``device`` (a str, torch.device or index) names a CUDA device."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":")[0].strip() == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


def _meta_tensors(args: tuple, kwargs: dict) -> bool:
    for a in args:
        if isinstance(a, _Tensor):
            if a.is_meta:
                return True
        elif type(a) is list or type(a) is tuple:
            for b in a:
                if isinstance(b, _Tensor) and b.is_meta:
                    return True
    d = kwargs.get("device")
    return d is not None and torch.device(d).type == "meta"


class CudaMode(TorchFunctionMode):
    """The function mode of a ``CudaMapping`` (see the module doc)."""

    def __init__(self, mapping: "CudaMapping"):
        super().__init__()
        self.m = mapping
        host = mapping.gpu.virtual_host
        # the simulated host clock's reading, and this thread's state where
        # the mode's own time goes (SimHost.runqueue_ns takes it out)
        self.now, self.local = host.clock.now, host.local
        #: what torch's call into the mode costs beside the time measured
        #: inside it (``calibrate``)
        self.entry_ns = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # The mode's own time is not the program's: a program on CUDA runs
        # none of it. What it spends around ``func`` (and torch's call into
        # it) is counted to the simulated host as lost (SimLocal.discount).
        now = self.now
        t0 = now()
        name = getattr(func, "__name__", "")
        if name == "__get__":  # a property of a tensor
            owner = getattr(func, "__self__", None)
            if (owner is _DEVICE or owner is _IS_CUDA) and args[0].is_meta:
                self.local.discount += now() - t0 + self.entry_ns
                return _CUDA0 if owner is _DEVICE else True
            t1 = now()
            out = func(*args)
            self.local.discount += t1 - t0 + self.entry_ns
            return out
        kwargs = kwargs or {}
        d = kwargs.get("device")
        if d is not None and is_cuda(d):
            kwargs = {**kwargs, "device": _META}
        if self.m.off:  # a model moved off the simulated GPU: is it used?
            self.m.used_off(name, args, kwargs)
        special = _SPECIAL.get(name)
        if special is not None:
            t1 = now()
            out = special(self.m, func, args, kwargs)
        else:
            if torch.is_autocast_enabled("cuda"):
                cast = self.m.casts.cast(name, args, kwargs, torch.get_autocast_dtype("cuda"))
                if cast is not None:
                    args, kwargs = cast
            # a torch function written in Python (F.cross_entropy, F.multi_head_
            # attention_forward) runs its body with the mode off: torch's modes
            # see its call, not the calls inside it
            t1 = now()
            out = func(*args, **kwargs)
        self.local.discount += t1 - t0 + self.entry_ns
        return out

    def calibrate(self, calls: int = 2000) -> None:
        """``entry_ns``: per call, what a cheap torch call costs more with
        the mode than without, beyond the time measured inside it."""
        x = torch.zeros(1)
        with torch._C.DisableTorchFunction():
            t = self.now()
            for _ in range(calls):
                x.dim()
            bare = self.now() - t
        before = self.local.discount
        t = self.now()
        for _ in range(calls):
            x.dim()
        moded = self.now() - t
        inside = self.local.discount - before
        self.local.discount = before
        self.entry_ns = max(int((moded - bare - inside) / calls), 0)


def _to(m: "CudaMapping", func: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.to(...)``: a CUDA device given by position is meta too."""
    if len(args) > 1 and isinstance(args[1], (str, torch.device, int)) \
            and not isinstance(args[1], bool) and is_cuda(args[1]):
        args = (args[0], _META, *args[2:])
    return func(*args, **kwargs)


def _cuda(m: "CudaMapping", func: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.cuda(device=None, non_blocking=False, memory_format=...)``."""
    t = args[0]
    device = args[1] if len(args) > 1 else kwargs.pop("device", None)
    if device is not None and not is_cuda(device) and device != _META:
        raise CutimelineError(f"Tensor.cuda({device!r}) at {user_site()}: give a CUDA "
                              f"device or none.")
    rest = {k: v for k, v in kwargs.items() if k in ("non_blocking", "memory_format")}
    if len(args) > 2:
        rest["non_blocking"] = args[2]
    return t.to(_META, **rest)


def _pin(m: "CudaMapping", func: Any, args: tuple, kwargs: dict) -> Any:
    t = args[0]
    return t if t.is_meta else pin(t)


def _is_pinned(m: "CudaMapping", func: Any, args: tuple, kwargs: dict) -> Any:
    return bool(getattr(args[0], "_cutimeline_pinned", False))


def _get_device(m: "CudaMapping", func: Any, args: tuple, kwargs: dict) -> Any:
    return 0 if args[0].is_meta else func(*args, **kwargs)


_SPECIAL = {"to": _to, "cuda": _cuda, "pin_memory": _pin,
            "is_pinned": _is_pinned, "get_device": _get_device}


def _record_stream(tensor: Any, stream: Any) -> None:
    """``Tensor.record_stream`` while CUDA is mapped."""


class Values(TorchDispatchMode):
    """Outside a recording, ops on simulated tensors keep their values (and
    reads get them) as inside one; always, the storage meter counts them."""

    def __init__(self, mapping: "CudaMapping"):
        super().__init__()
        self.m = mapping

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        m = self.m
        if not _meta_tensors(args, kwargs):
            return func(*args, **kwargs)
        try:
            if m.gpu.streams.recording:  # the recorder ran it through the SimGPU
                out = func(*args, **kwargs)
            else:
                out = m.gpu.run(func, args, kwargs)
        except NotImplementedError as e:
            ns = getattr(func, "namespace", "aten")
            if ns in ("aten", "prims") or "Meta" not in str(e):
                raise
            # a custom extension's op (a CUDA kernel of its own): no meta
            # kernel says what it makes, so it cannot run simulated
            raise CutimelineError(
                f"{func} at {user_site()} is a custom op with no meta kernel, so it "
                f"cannot run on the simulated GPU; register one "
                f"(torch.library.register_fake) or record on a GPU.") from e
        m.count(func, args, kwargs, out)
        return out


class CudaMapping:
    """For the ``with`` block, CUDA means SimGPU ``gpu`` (``SimGPU.as_cuda()``)."""

    def __init__(self, gpu: Any):
        self.gpu = gpu
        self.casts = Casts()
        self.meter: StorageMeter | None = None
        self.peak = 0
        self._streams = {0: SimCudaStream.of(self, 0)}
        self._warned: set[str] = set()
        self.off = False  # some parameter moved off the simulated GPU (``left``)
        self._saved: list[tuple[Any, str, Any]] = []
        self._modes: list[Any] = []
        self.thread = 0

    # -- entering and leaving ----------------------------------------------------
    def __enter__(self) -> "CudaMapping":
        with _LOCK:
            if _ACTIVE:
                raise CutimelineError("CUDA is already mapped to a simulated GPU; the "
                                      "mappings do not nest.")
            if torch.cuda.is_available():
                warnings.warn("cutimeline: CUDA is mapped to a simulated GPU although "
                              "a real one is here; the run is simulated.",
                              RuntimeWarning, stacklevel=2)
            _ACTIVE.append(self)
        self.thread = threading.get_ident()
        self.meter = StorageMeter()
        SimCudaEvent.mapping = SimCudaStream.mapping = self
        self.gpu.ops.mapped = True
        self.gpu.ops.as_cuda(True)
        try:
            for owner, name, new in [*patches(self.gpu, self), *move_patches(self.left),
                                     (pinning, "pin_memory", self._pin_batch),
                                     # torch parses a stream argument before any
                                     # mode sees the call; the simulator frees
                                     # nothing early, so there is nothing to note
                                     (_Tensor, "record_stream", _record_stream),
                                     *self._autocast_exit()]:
                self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
                setattr(owner, name, new)
            self.gpu.ops.mapping_said = {
                "devices": "cuda, cuda:0, torch.device('cuda') and device indices in torch "
                           "calls are the simulated GPU's meta tensors; tensor.device reads "
                           "cuda:0 for them",
                "autocast": "torch.autocast('cuda') casts by CUDA autocast's op lists",
                "answered": sorted(f"{getattr(o, '__name__', type(o).__name__)}.{n}"
                                   for o, n, _ in self._saved)}
            for mode in (Values(self), CudaMode(self)):
                mode.__enter__()
                self._modes.append(mode)
            self._modes[-1].calibrate()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> bool:
        while self._modes:
            self._modes.pop().__exit__(None, None, None)
        while self._saved:
            owner, name, old = self._saved.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self.gpu.ops.as_cuda(False)
        self.gpu.ops.mapped = False
        if self.meter is not None:
            self.meter.close()
        SimCudaEvent.mapping = SimCudaStream.mapping = None
        self.casts.clear()
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        return False

    def _autocast_exit(self) -> list[tuple[Any, str, Any]]:
        """``autocast.__exit__`` that empties the weight cache when the last
        CUDA autocast region ends, as autocast's own cache is."""
        cls = torch.amp.autocast_mode.autocast
        leave = cls.__dict__["__exit__"]
        casts = self.casts

        def __exit__(self: Any, *exc: Any) -> Any:
            out = leave(self, *exc)
            if not torch.is_autocast_enabled("cuda"):
                casts.clear()
            return out
        return [(cls, "__exit__", __exit__)]

    def _pin_batch(self, data: Any, device: Any = None) -> Any:
        """DataLoader's ``pin_memory(batch)``: each host tensor marked pinned."""
        if isinstance(data, _Tensor):
            return pin(data) if data.device.type == "cpu" else data
        if isinstance(data, Mapping):
            pinned = {k: self._pin_batch(v) for k, v in data.items()}
            try:
                return type(data)(pinned)
            except TypeError:  # a mapping that cannot be made from a dict
                return pinned
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*(self._pin_batch(v) for v in data))
        if isinstance(data, (list, tuple)):
            return type(data)(self._pin_batch(v) for v in data)
        if hasattr(data, "pin_memory"):  # a custom batch type, as DataLoader asks it
            return data.pin_memory()
        return data

    # -- what api.py asks ------------------------------------------------------------
    def timing(self) -> bool:
        """Whether the simulated device keeps time now (it is recording)."""
        return bool(self.gpu.streams.recording)

    def synchronize(self, stream: int | None) -> None:
        if self.timing():
            self.gpu.synchronize(stream)

    def drained(self, stream: int | None) -> bool:
        return not self.timing() or self.gpu.drained_at(stream) <= self.gpu.host_now()

    def stream(self, stream_id: int) -> SimCudaStream:
        s = self._streams.get(stream_id)
        if s is None:
            s = self._streams[stream_id] = SimCudaStream.of(self, stream_id)
        return s

    def new_stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> SimCudaStream:
        return self.stream(max(self._streams) + 1)

    def set_stream(self, stream: SimCudaStream) -> None:
        self.gpu.set_stream(stream.stream_id)

    def memory(self) -> tuple[int, int]:
        """(bytes of simulated tensors alive, the peak since the last reset)."""
        if self.meter is not None:
            self.meter.read(None, (), {}, None)  # take in the storages freed
            self.peak = max(self.peak, self.meter.in_use)
            return self.meter.in_use, self.peak
        return 0, 0

    def reset_peak(self) -> None:
        self.peak = self.memory()[0]

    def count(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """The storage meter takes op ``func``'s simulated outputs."""
        meter = self.meter
        if meter is None:
            return
        outs = [o for o in (out if type(out) in (tuple, list) else (out,))
                if isinstance(o, _Tensor) and o.is_meta]
        if outs:
            meter.read(func, args, kwargs, outs)
            if meter.in_use > self.peak:
                self.peak = meter.in_use

    def left(self, params: list) -> None:
        """``params`` of a module moved off the simulated GPU (``moves.py``):
        marked with the line that moved them, watched for their next use."""
        mark(params, user_site())
        self.off = True

    def used_off(self, name: str, args: tuple, kwargs: dict) -> None:
        """Warn, once, when torch function ``name`` uses a parameter that
        moved off the simulated GPU: that model now trains on the CPU."""
        for a in (*args, *kwargs.values()):
            for t in (a if type(a) in (list, tuple) else (a,)):
                moved = getattr(t, LEFT, None) if isinstance(t, torch.nn.Parameter) else None
                if moved is not None and not t.is_meta:
                    self.off = False  # said once: from here the CPU is the program's choice
                    warnings.warn(
                        f"cutimeline: {name} at {user_site()} uses a parameter of shape "
                        f"{tuple(t.shape)} that was moved off the simulated GPU at {moved} "
                        f"(a model moved to the CPU): from there it runs on the CPU with "
                        f"modelled values, not on the simulated GPU.",
                        RuntimeWarning, stacklevel=4)
                    return

    def untimed(self, what: str) -> None:
        site = user_site()
        if site not in self._warned:
            self._warned.add(site)
            warn_untimed(what, site)

    def site(self) -> str:
        return user_site()


_MISSING = object()
