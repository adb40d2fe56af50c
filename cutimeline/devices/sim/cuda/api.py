"""The ``torch.cuda`` calls a program makes, answered by a SimGPU while CUDA is mapped to it.

``patches(gpu, mapping)`` lists (owner, attribute, replacement) for
``mapping.py`` to set for the run and restore after it. What each answers:

* the device: ``is_available`` True, one device (``device_count`` 1,
  ``current_device`` 0, ``set_device(0)``; another index is an error),
  ``get_device_name``/``get_device_properties``/``get_device_capability``
  the profile's GPU, labelled simulated; ``is_bf16_supported`` True on
  profiles with bf16 tensor cores; ``is_initialized``/``init`` trivially;
  and ``torch.accelerator``'s twins (torch ≥ 2.6).
* time: ``synchronize`` waits for the simulated device (a sync while
  recording); ``Event(enable_timing=True)`` records on a simulated stream
  and ``elapsed_time`` gives simulated milliseconds; ``Stream``,
  ``stream(s)``, ``current_stream``/``default_stream``,
  ``wait_stream``/``wait_event`` are the simulator's streams. Outside a
  recording the simulated device keeps no time: an event pair there
  measures 0.0 ms, said once in a warning.
* memory: ``memory_allocated``/``max_memory_allocated``/
  ``reset_peak_memory_stats``/``memory_reserved``/``mem_get_info``/
  ``empty_cache`` from the mapping's storage meter (the bytes of the
  simulated tensors alive).
* seeds and RNG state: ``manual_seed``/``manual_seed_all``/``seed``/
  ``get_rng_state``/``set_rng_state`` (a state kept here; meta tensors
  draw no random numbers).
* graphs: ``torch.cuda.graph``/``CUDAGraph``/``make_graphed_callables``/
  ``graph_pool_handle`` cannot be simulated: a ``CutimelineError`` naming
  the line, raised when one is made or called (the classes stay classes,
  for annotations and isinstance checks); so is
  ``torch.distributed.init_process_group("nccl")`` (NCCL across processes:
  torch's fake process group simulates one rank instead).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import namedtuple
from typing import Any, Callable

import torch

from ....errors import CutimelineError

__all__ = ["patches", "SimCudaStream", "SimCudaEvent", "Properties"]

#: what ``get_device_properties`` answers (the fields programs read)
Properties = namedtuple("Properties", "name total_memory major minor multi_processor_count "
                                      "is_integrated is_multi_gpu_board uuid")

# per profile: (compute capability, SMs, memory in bytes); others read as an H100's
_GPUS = {"h100": ((9, 0), 132, 80 * 2**30), "h200": ((9, 0), 132, 141 * 2**30),
         "a100": ((8, 0), 108, 80 * 2**30)}


class SimCudaStream:
    """``torch.cuda.Stream`` on the simulated GPU: a simulator stream id.
    ``torch.cuda.Stream(...)`` is this class while CUDA is mapped (a class,
    not a function: libraries name it in annotations and isinstance checks);
    making one opens a new simulated stream."""

    #: the mapping these streams belong to (set while CUDA is mapped)
    mapping: Any = None

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "SimCudaStream":
        return cls.mapping.new_stream(device, priority)

    def __init__(self, *args: Any, **kwargs: Any):
        pass  # made by of(), which __new__ asks

    @classmethod
    def of(cls, mapping: Any, stream_id: int) -> "SimCudaStream":
        """The stream object of simulator stream ``stream_id``."""
        s = object.__new__(cls)
        s._m, s.stream_id = mapping, stream_id
        s.device_index, s.device_type = 0, "cuda"
        s.priority = 0
        return s

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimCudaStream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("simcuda", self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:0 stream={self.stream_id} (simulated)>"

    def wait_event(self, event: "SimCudaEvent") -> None:
        event.wait(self)

    def wait_stream(self, stream: "SimCudaStream") -> None:
        if self._m.timing():
            self._m.gpu.wait_stream(self.stream_id, stream.stream_id)

    def record_event(self, event: "SimCudaEvent | None" = None) -> "SimCudaEvent":
        event = event if event is not None else SimCudaEvent()
        event.record(self)
        return event

    def synchronize(self) -> None:
        self._m.synchronize(self.stream_id)

    def is_capturing(self) -> bool:
        return False  # no CUDA graph captures on the simulated GPU

    def query(self) -> bool:
        return self._m.drained(self.stream_id)

    def __enter__(self) -> "SimCudaStream":
        self._ctx = self._m.gpu.stream(self.stream_id)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


class SimCudaEvent:
    """``torch.cuda.Event`` on the simulated GPU: a simulator event."""

    #: the mapping these events belong to (set while CUDA is mapped)
    mapping: Any = None

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False):
        self.enable_timing = enable_timing
        self._sim: Any = None  # the SimEvent, while recording
        self._recorded = False

    def record(self, stream: SimCudaStream | None = None) -> None:
        m = self.mapping
        sid = stream.stream_id if stream is not None else m.gpu.current_stream()
        self._recorded = True
        self._sim = m.gpu.record_event(sid) if m.timing() else None

    def wait(self, stream: SimCudaStream | None = None) -> None:
        m = self.mapping
        if self._sim is not None and m.timing():
            sid = stream.stream_id if stream is not None else m.gpu.current_stream()
            m.gpu.wait_event(self._sim, sid)

    def synchronize(self) -> None:
        m = self.mapping
        if self._sim is not None and m.timing():
            m.synchronize(self._sim.stream)

    def query(self) -> bool:
        m = self.mapping
        return self._sim is None or not m.timing() or m.drained(self._sim.stream)

    def elapsed_time(self, end: "SimCudaEvent") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument "
                               "'enable_timing=True'.")
        if not (self._recorded and end._recorded):
            raise RuntimeError("Both events must be recorded before calculating "
                               "elapsed time.")
        if self._sim is None or end._sim is None:
            self.mapping.untimed("torch.cuda.Event.elapsed_time")
            return 0.0
        return (end._sim.done_ns - self._sim.done_ns) / 1e6

    def __repr__(self) -> str:
        return "<torch.cuda.Event (simulated)>"


def patches(gpu: Any, m: Any) -> list[tuple[Any, str, Any]]:
    """(owner, name, replacement) for every ``torch.cuda`` call above, for
    the mapping ``m`` of CUDA onto SimGPU ``gpu``."""
    cap, sms, total = _GPUS.get(gpu.profile.name.lower(), _GPUS["h100"])
    name = f"{gpu.profile.name} (simulated by cutimeline)"
    props = Properties(name, total, cap[0], cap[1], sms, 0, 0, "simulated")
    bf16 = cap >= (8, 0)
    cuda = torch.cuda
    state = {"rng": torch.zeros(16, dtype=torch.uint8)}

    def one(device: Any = None) -> int:
        if device is None:
            return 0
        if isinstance(device, str):
            device = torch.device(device)
        index = device.index if isinstance(device, torch.device) else device
        if isinstance(device, torch.device) and device.type not in ("cuda", "meta"):
            raise ValueError(f"Expected a cuda device, but got: {device}")
        if index not in (None, 0, -1):
            raise CutimelineError(
                f"cuda:{index} was asked for, but the simulated GPU is one device "
                f"(cuda:0); simulate one rank per process, as torchrun runs them.")
        return 0

    def answer(value: Any) -> Callable:
        """A call taking an optional device (cuda:0 only) that answers ``value``."""
        def call(device: Any = None) -> Any:
            one(device)
            return value
        return call

    def set_device(device: Any) -> None:
        one(device)

    def synchronize(device: Any = None) -> None:
        one(device)
        m.synchronize(None)

    def set_rng_state(new_state: Any, device: Any = "cuda") -> None:
        state["rng"] = new_state.clone()

    def stream_of(stream: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if stream is None else stream

    def no_graphs(*args: Any, **kwargs: Any) -> Any:
        raise CutimelineError(
            f"CUDA graphs cannot run on the simulated GPU (at {m.site()}); record on a "
            f"GPU, or leave the graph out of the simulated run.")

    # classes, not functions: libraries name them in annotations at import
    # (``torch.cuda.CUDAGraph | None``) and in isinstance checks
    class CUDAGraph:
        __init__ = no_graphs

    class graph:
        __init__ = no_graphs

    fixed: dict[str, Callable] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": set_device,
        "is_bf16_supported": lambda including_emulation=True: bf16,
        "get_device_name": answer(name),
        "get_device_capability": answer(cap),
        "get_device_properties": answer(props),
        "synchronize": synchronize,
        "current_stream": lambda device=None: m.stream(gpu.current_stream()),
        "default_stream": lambda device=None: m.stream(0),
        "set_stream": lambda stream: m.set_stream(stream),
        "stream": stream_of,
        "Stream": SimCudaStream,
        "Event": SimCudaEvent,
        "memory_allocated": lambda device=None: m.memory()[0],
        "max_memory_allocated": lambda device=None: m.memory()[1],
        "memory_reserved": lambda device=None: m.memory()[0],
        "max_memory_reserved": lambda device=None: m.memory()[1],
        "reset_peak_memory_stats": lambda device=None: m.reset_peak(),
        "reset_max_memory_allocated": lambda device=None: m.reset_peak(),
        "empty_cache": lambda: None,
        "mem_get_info": lambda device=None: (total - m.memory()[0], total),
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "initial_seed": lambda: 0,
        "get_rng_state": lambda device="cuda": state["rng"].clone(),
        "get_rng_state_all": lambda: [state["rng"].clone()],
        "set_rng_state": set_rng_state,
        "set_rng_state_all": lambda states: set_rng_state(states[0]),
        "CUDAGraph": CUDAGraph,
        "graph": graph,
        "make_graphed_callables": no_graphs,
        "graph_pool_handle": no_graphs,
    }
    out = [(cuda, k, v) for k, v in fixed.items() if hasattr(cuda, k)]
    dist = torch.distributed
    if dist.is_available() and hasattr(dist, "init_process_group"):
        start = dist.init_process_group

        def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
            if isinstance(backend, str) and "nccl" in backend.lower():
                raise CutimelineError(
                    f"init_process_group(backend={backend!r}) at {m.site()}: NCCL across "
                    f"processes cannot run on the simulated GPU; simulate one rank with "
                    f"torch's fake process group (dist.init_process_group('fake', "
                    f"store=FakeStore(), rank=0, world_size=N), README), or record on GPUs.")
            return start(backend, *args, **kwargs)
        out.append((dist, "init_process_group", init_process_group))
    acc = getattr(torch, "accelerator", None)  # torch >= 2.6
    if acc is not None:
        for k, v in (("is_available", lambda: True), ("device_count", lambda: 1),
                     ("current_accelerator", lambda check_available=False:
                      torch.device("cuda")),
                     ("current_device_index", lambda: 0), ("current_device_idx", lambda: 0),
                     ("set_device_index", set_device), ("synchronize", synchronize),
                     ("current_stream", lambda device=None: m.stream(gpu.current_stream()))):
            if hasattr(acc, k):
                out.append((acc, k, v))
    return out


def warn_untimed(what: str, site: str) -> None:
    warnings.warn(
        f"cutimeline: {what} at {site} ran outside the recorded steps, where the "
        f"simulated GPU keeps no time: it measured 0.0 ms. Time inside the recorded "
        f"steps (cutimeline record --skip/--steps) to read simulated times.",
        RuntimeWarning, stacklevel=3)
