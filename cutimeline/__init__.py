"""cutimeline: what a PyTorch program does on both sides of the CPU/GPU boundary.

    import cutimeline as ctl
    with ctl.record() as rec:
        train_step()
    ctl.plot(rec.timeline, "timeline.png")
    print(ctl.analyze(rec.timeline).summary())

Importing cutimeline is cheap: stages load on first use, and no Numba kernel
is compiled until one runs (they are cached on disk after that).
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import CutimelineError
from .timeline.timeline import Timeline

__version__ = "0.1.0"

# public name -> module that defines it; loaded on first attribute access
_LAZY = {
    "record": "recording.recorder", "Recorder": "recording.recorder", "span": "recording.recorder",
    "schedule": "recording.control.schedule", "ready_writer": "recording.control.schedule",
    "arm": "recording.ondemand", "disarm": "recording.ondemand",
    "SimGPU": "devices.sim",
    "align": "alignment.aligner",
    "analyze": "analysis.analyzer", "Report": "analysis.analyzer",
    "plot": "rendering.figure", "plot_compare": "rendering.figure",
    "plot_what_if": "rendering.whatif",
    "export_chrome": "formats.chrome", "import_chrome": "formats.chrome",
    "compare": "comparison.runner", "Comparison": "comparison.result",
    "merge": "dist.merger",
    "load": "formats.files",
}

__all__ = ["CutimelineError", "Timeline", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cutimeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
