"""cutimeline: what a PyTorch program does on both sides of the CPU/GPU boundary.

    import cutimeline as ctl
    with ctl.record() as rec:
        train_step()
    ctl.plot(rec.timeline, "timeline.png")
    print(ctl.analyze(rec.timeline).summary())

    tl = ctl.record_script("train.py", device="sim")  # a script, unedited

The top level holds the verbs and the types a user holds (``__all__``);
everything else lives in the stage that owns it, e.g.
``cutimeline.alignment.align``, ``cutimeline.rendering.plot_compare``,
``cutimeline.comparison.Comparison``, ``cutimeline.recording.recorder.Recorder``
(what ``record`` returns), ``cutimeline.recording.control.schedule.Schedule`` and
``cutimeline.recording.ondemand.Trigger`` (what ``schedule`` and ``arm``
return). The spellings that used to sit at the top still work, with a
``DeprecationWarning`` that names the new one (``DEPRECATED``).

Importing cutimeline is cheap: stages load on first use, and no Numba kernel
is compiled until one runs (they are cached on disk after that).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from ._version import __version__
from .errors import CutimelineError
from .timeline.timeline import Timeline

# public name -> module that defines it; loaded on first attribute access
_LAZY = {
    "record": "recording.recorder", "span": "recording.recorder",
    "record_script": "recording.script",
    "schedule": "recording.control.schedule", "arm": "recording.ondemand",
    "SimGPU": "devices.sim",
    "analyze": "analysis.analyzer", "Report": "analysis.analyzer",
    "plot": "rendering.figure",
    "load": "formats.files", "export_chrome": "formats.chrome",
    "compare": "comparison.runner",
    "merge": "dist.merger",
}

__all__ = ["CutimelineError", "Timeline", "__version__", *_LAZY]

# old top-level name -> (module that defines it, the spelling to use instead);
# README.md's "Deprecated names" lists the same
DEPRECATED = {
    "import_chrome": ("formats.kineto", "ctl.load(path)"),
    "plot_what_if": ("rendering.whatif", "ctl.plot(tl, path, what_if=...)"),
    "plot_compare": ("rendering.figure", "Comparison.plot() or "
                     "cutimeline.rendering.plot_compare(a, b)"),
    "Comparison": ("comparison.result", "cutimeline.comparison.Comparison"),
    "align": ("alignment.aligner", "cutimeline.alignment.align(tl)"),
    "Recorder": ("recording.recorder", "cutimeline.recording.recorder.Recorder"),
    "ready_writer": ("recording.control.schedule",
                     "cutimeline.recording.control.schedule.ready_writer"),
    "disarm": ("recording.ondemand", "trigger.disarm() on the Trigger ctl.arm() returned, "
               "or cutimeline.recording.ondemand.disarm()"),
}


def _first_picture(tl: Timeline) -> bytes | None:
    """A Timeline's picture in a notebook until rendering has loaded: loading
    it sets its own ``Timeline.notebook_png`` in this one's place."""
    from .rendering.notebook import timeline_png
    return timeline_png(tl)


if Timeline.notebook_png is None:
    Timeline.notebook_png = _first_picture


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    if name in DEPRECATED:
        # never cached: each use warns (once per place, by warnings' filter)
        module, instead = DEPRECATED[name]
        warnings.warn(f"ctl.{name} is deprecated; use {instead}.", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module 'cutimeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
