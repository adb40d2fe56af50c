"""Kineto's trace vocabulary as cutimeline reads and writes it: the event
categories, the arg keys and markers, and how an int arg is spelled.

The import (``kineto``) reads these; the export (``chrome``) writes the
same keys, so its files read back exactly.
"""

from __future__ import annotations

import re
from typing import Any

from ..timeline.schema import NONE, GpuKind

__all__ = ["GPU_CATEGORIES", "LAUNCH_CATEGORIES", "READ_CATEGORIES", "OLD_CATEGORIES",
           "STREAM_TID", "NO_STREAM",
           "NON_BLOCKING_SYNCS", "BACKWARD_PREFIX", "STEP_RE", "SHIFT_KEY", "KIND_ARG",
           "EXPORTER"]

GPU_CATEGORIES = {"kernel": GpuKind.KERNEL, "gpu_memcpy": GpuKind.MEMCPY,
                  "gpu_memset": GpuKind.MEMSET}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
READ_CATEGORIES = ("cpu_op", "user_annotation", "cuda_sync", "Trace",
                   *GPU_CATEGORIES, *LAUNCH_CATEGORIES)
# Kineto's first traces (torch 1.8-1.10) named the same categories so; their
# GPU rows sit on tid "stream <n>" of pid <device>.
OLD_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel",
                  "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
STREAM_TID = re.compile(r"stream\s*(\d+)$")
# Kineto writes the "no stream" of device-wide syncs both ways.
NO_STREAM = (-1, 4294967295)
# cudaStreamWaitEvent: a device-side wait, the host does not block.
NON_BLOCKING_SYNCS = ("Stream Wait Event",)
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
# Written by export_chrome when it shifted times to keep ns precision.
SHIFT_KEY = "cutimelineTimeShiftNanoseconds"
# Written by export_chrome so kinds Kineto lacks (op, graph) survive.
KIND_ARG = "cutimeline kind"
# export_chrome's "exportedBy": its External ids link GPU work to ops exactly.
EXPORTER = "cutimeline"


def _int(v: Any, default: int) -> int:
    """An int from a Kineto arg (ints, or hex strings such as "0x0")."""
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return default
    return default


def _stream(arg: Any, tid: Any) -> int:
    """A GPU row's stream: ``args.stream``, else its tid (an int, or the
    "stream <n>" of the first traces), else NONE."""
    v = _int(arg, NONE)
    if v != NONE or arg is not None:
        return v
    if isinstance(tid, str):
        m = STREAM_TID.match(tid.strip())
        if m:
            return int(m.group(1))
    return _int(tid, NONE)
