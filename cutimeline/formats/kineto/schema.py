"""Kineto's trace vocabulary as cutimeline reads and writes it: the event
categories, the arg keys and markers, how an int arg is spelled, and the
ranges the import accepts for each number.

The import (this package) reads these; the export (``formats.chrome``)
writes the same keys, so its files read back exactly.
"""

from __future__ import annotations

import re
from typing import Any

from ...timeline.invariants import TIME_LIMIT_NS as INVARIANT_TIME_LIMIT_NS
from ...timeline.schema import NON_BLOCKING_SYNC_KINDS, NONE, GpuKind

__all__ = ["GPU_CATEGORIES", "LAUNCH_CATEGORIES", "RUNTIME_SYNCS", "UNREAD_DEVICE_CATEGORIES",
           "READ_CATEGORIES", "OLD_CATEGORIES", "MEMORY_EVENT", "READ_INSTANTS",
           "GPU_DEVICE_TYPE", "SYNC_OP_NAMES", "FREED_ARG", "STREAM_TID", "NO_STREAM",
           "NON_BLOCKING_SYNCS", "BACKWARD_PREFIX", "STEP_RE", "SHIFT_KEY", "KIND_ARG",
           "SYNC_STREAM_ARG",
           "EXPORTER", "TIME_LIMIT_NS", "DEVICES", "STREAMS", "INT64",
           "int_arg", "gpu_stream", "arg_keys"]

GPU_CATEGORIES = {"kernel": GpuKind.KERNEL, "gpu_memcpy": GpuKind.MEMCPY,
                  "gpu_memset": GpuKind.MEMSET}
# Launch calls: CUDA's runtime and driver APIs (ROCm's hip* calls sit in
# cuda_runtime too), and the runtimes of the backends whose device work
# Kineto writes as kernel/gpu_memcpy/gpu_memset rows like CUDA's (Intel XPU,
# out-of-tree PrivateUse1 devices, MTIA's launches).
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver", "xpu_runtime", "xpu_driver",
                     "privateuse1_runtime", "privateuse1_driver", "mtia_runtime")
# Host-blocking runtime calls → the kind Kineto's cuda_sync events give the
# same wait. A cuda_sync event is only written with
# experimental_config(enable_cuda_sync_events=True), so in most traces these
# calls are the only record that the host waited; the import reads them as
# syncs unless a cuda_sync event of their correlation id is there.
# (cudaStreamWaitEvent is a device-side wait and is not one.)
RUNTIME_SYNCS = {
    **dict.fromkeys(("cudaStreamSynchronize", "cuStreamSynchronize",
                     "hipStreamSynchronize"), "Stream Sync"),
    **dict.fromkeys(("cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize",
                     "hipDeviceSynchronize", "hipCtxSynchronize"), "Context Sync"),
    **dict.fromkeys(("cudaEventSynchronize", "cuEventSynchronize",
                     "hipEventSynchronize"), "Event Sync"),
}
# Device work Kineto writes in categories of its own, which the import does
# not read as gpu rows: category → the device it is.
UNREAD_DEVICE_CATEGORIES = {"mtia_ccp_events": "MTIA", "hpu_op": "Intel Gaudi (HPU)"}
READ_CATEGORIES = ("cpu_op", "user_annotation", "cuda_sync", "Trace", "python_function",
                   *GPU_CATEGORIES, *LAUNCH_CATEGORIES)
# Instant events read: profile_memory=True's allocations and frees.
MEMORY_EVENT = "[memory]"
READ_INSTANTS = (MEMORY_EVENT,)
# "Device Type" of a [memory] event on a GPU (c10::DeviceType::CUDA; ROCm
# builds report theirs as CUDA too); 0 is the CPU.
GPU_DEVICE_TYPE = 1
# Host ops that wait for the GPU, whose source line an import looks up
# (besides the ops the trace's cuda_sync events flag SYNC).
SYNC_OP_NAMES = ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize",
                 "cudaDeviceSynchronize")
# export_chrome's [memory] events: the bytes a row freed (Bytes is the net).
FREED_ARG = "cutimeline freed"
# Kineto's first traces (torch 1.8-1.10) named the same categories so; their
# GPU rows sit on tid "stream <n>" of pid <device>.
OLD_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
                  "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
STREAM_TID = re.compile(r"stream\s*(\d+)$")
# Kineto writes the "no stream" of device-wide syncs both ways.
NO_STREAM = (-1, 4294967295)
# cudaStreamWaitEvent: a device-side wait, the host does not block.
NON_BLOCKING_SYNCS = NON_BLOCKING_SYNC_KINDS  # waits of a stream, not the host
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
# At most 18 digits: a step number fits int64 ("ProfilerStep#<30 digits>" is
# no step, just a range of that name).
STEP_RE = re.compile(r"ProfilerStep#(\d{1,18})$")
# Written by export_chrome when it shifted times to keep ns precision.
SHIFT_KEY = "cutimelineTimeShiftNanoseconds"
# Written by export_chrome so kinds Kineto lacks (op, graph) survive.
KIND_ARG = "cutimeline kind"
# export_chrome's cuda_sync events: the stream waited on, read before
# Kineto's "stream" (which HolisticTraceAnalysis takes for GPU work).
SYNC_STREAM_ARG = "cutimeline stream"
# export_chrome's "exportedBy": its External ids link GPU work to ops exactly.
EXPORTER = "cutimeline"


# The ranges read: times within ±2^62 ns (±146 years), so that sums and
# differences of two stay inside int64; devices fit ops.device (int16);
# streams are CUDA's (unsigned) handles or NONE.
TIME_LIMIT_NS = INVARIANT_TIME_LIMIT_NS   # the Timeline's own (``timeline/invariants.py``)
DEVICES = (0, 2**15 - 1)
STREAMS = (NONE, 2**63 - 1)
INT64 = (-2**63, 2**63 - 1)


def int_arg(v: Any, default: int, bounds: tuple[int, int] = INT64) -> int:
    """An int from a Kineto arg (ints, or hex strings such as "0x0"), or
    ``default`` where it is none or lies outside ``bounds`` (inclusive)."""
    if type(v) is not int:
        if type(v) is not str:
            return default
        try:
            v = int(v, 0)
        except ValueError:
            return default
    return v if bounds[0] <= v <= bounds[1] else default


def gpu_stream(arg: Any, tid: Any) -> int:
    """A GPU row's stream: ``args.stream``, else its tid (an int, or the
    "stream <n>" of the first traces), else NONE."""
    v = int_arg(arg, NONE, STREAMS)
    if v != NONE or arg is not None:
        return v
    if isinstance(tid, str):
        m = STREAM_TID.match(tid.strip())
        return int_arg(m.group(1), NONE, STREAMS) if m else NONE
    return int_arg(tid, NONE, STREAMS)


def arg_keys(args: list[dict], key: str) -> list:
    """``args[key]`` of each event, for use as a dict key: values that
    cannot be one (lists, dicts) read as None, linking nothing."""
    out = [a.get(key) for a in args]
    if {list, dict}.isdisjoint(map(type, out)):
        return out
    return [None if type(v) in (list, dict) else v for v in out]
