"""``ctl.load``: any file cutimeline reads, told apart by its first bytes.

A ``.ctl`` file is a zip archive (``PK``); a torch.profiler (Kineto) trace
is JSON (``{``) or gzipped JSON (``1f 8b``), read as ``import_chrome``
reads it. ``meta["source"]`` of the Timeline says which it was: "kineto"
for a trace, what recorded or merged it for a ``.ctl`` file.
"""

from __future__ import annotations

import os
from typing import Callable

from ..errors import CutimelineError
from ..timeline.budgets import input_file
from ..timeline.timeline import Timeline, load as load_ctl
from .kineto import import_chrome

__all__ = ["load"]


def load(path: str | os.PathLike, *,
         progress: Callable[[str, float], None] | None = None,
         steps_from: str | None = None, max_bytes: int | None = None) -> Timeline:
    """A Timeline from a ``.ctl`` file or a torch.profiler trace (``.json``,
    ``.json.gz``); anything else raises ``CutimelineError`` naming the file
    and what it is not. ``progress`` and ``steps_from`` are
    ``import_chrome``'s, for a trace: ``steps_from`` names the ranges that
    end each step (``"Optimizer.step"``, ``"train_step"``) where the trace
    has no ``ProfilerStep#N`` or they should not rule
    (``formats/kineto/steps.py``); a ``.ctl`` file keeps the steps it was
    recorded with. ``max_bytes``: the memory a file may claim to need
    through load → analyze → plot → export, checked before it is read
    (``timeline/budgets.py``; by default ``$CUTIMELINE_MAX_BYTES``, else
    4 GiB or half this machine's memory)."""

    if not isinstance(path, (str, os.PathLike)):
        raise CutimelineError(f"load wants the path of a .ctl file or a torch.profiler "
                              f"trace (a str or os.PathLike); got {type(path).__name__}.")
    path = os.fspath(path)
    if not isinstance(path, str):
        raise CutimelineError(f"load wants a path as text; got {type(path).__name__} "
                              f"{path!r:.40}: decode it first.")
    if progress is not None and not callable(progress):
        raise CutimelineError(f"load's progress wants a function (stage, fraction); got "
                              f"{type(progress).__name__}.")
    if not os.path.exists(path):
        raise CutimelineError(f"{path} does not exist.")
    if os.path.isdir(path):
        raise CutimelineError(f"{path} is a folder; give a .ctl file or a "
                              f"torch.profiler trace (.json, .json.gz).")
    try:
        with input_file(path) as f:
            head = f.read(64)
    except OSError as exc:
        raise CutimelineError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return import_chrome(path, progress=progress, steps_from=steps_from,
                             max_bytes=max_bytes)
    if steps_from is not None and head[:2] == b"PK":
        raise CutimelineError(
            f"steps_from={steps_from!r} picks the ranges a torch.profiler trace's "
            f"steps are made from; {os.path.basename(path)} is a cutimeline file, "
            f"whose steps were recorded with it. Leave steps_from out.")
    return load_ctl(path, max_bytes=max_bytes)
