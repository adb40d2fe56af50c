"""Kineto's trace vocabulary as cutimeline reads and writes it: the event
categories, the arg keys and markers, and how an int arg is spelled.

The import (``kineto``) reads these; the export (``chrome``) writes the
same keys, so its files read back exactly.
"""

from __future__ import annotations

import re
from typing import Any

from ..timeline.schema import GpuKind

__all__ = ["GPU_CATEGORIES", "LAUNCH_CATEGORIES", "READ_CATEGORIES", "NO_STREAM",
           "NON_BLOCKING_SYNCS", "BACKWARD_PREFIX", "STEP_RE", "SHIFT_KEY", "KIND_ARG",
           "EXPORTER"]

GPU_CATEGORIES = {"kernel": GpuKind.KERNEL, "gpu_memcpy": GpuKind.MEMCPY,
                  "gpu_memset": GpuKind.MEMSET}
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
READ_CATEGORIES = ("cpu_op", "user_annotation", "cuda_sync", "Trace",
                   *GPU_CATEGORIES, *LAUNCH_CATEGORIES)
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
