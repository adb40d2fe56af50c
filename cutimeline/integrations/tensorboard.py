"""A recording logged to TensorBoard, and a ``ctl.schedule`` window
handler in the spirit of torch.profiler's ``tensorboard_trace_handler``.

    from torch.utils.tensorboard import SummaryWriter
    import cutimeline.integrations.tensorboard as ctl_tb
    ctl_tb.log(ctl.analyze(tl), SummaryWriter("runs/exp"), step=100)

    with ctl.record(schedule=ctl.schedule(wait=5, warmup=1, active=3),
                    on_trace_ready=ctl_tb.trace_handler("runs/exp")):
        train()

``log`` writes, under ``name`` (default "cutimeline"): the timeline
figure (``add_figure``, tag ``name/timeline``), the summary
(``add_text``, tag ``name/summary``) at ``step``, and the scalars
``name/step_ms``, ``name/gpu_busy``, ``name/idle_<cause>`` (one per
idle cause) and ``name/mfu`` (where the report has it), one point per
recorded step (``logged.py`` says what each is). The i-th recorded step's
point is at ``step + i``; ``step`` defaults to the first recorded step's
number, so a schedule's windows land at the steps of the user's loop.
The writer is torch's ``SummaryWriter`` (``pip install
'cutimeline[tensorboard]'`` for the ``tensorboard`` package it needs),
or any writer with ``add_figure``, ``add_text`` and ``add_scalar``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ..analysis import Report
from ..errors import CutimelineError
from ..timeline.timeline import Timeline
from .logged import check_name, need, prepared

__all__ = ["log", "trace_handler", "summary_writer"]

_WRITES = ("add_figure", "add_text", "add_scalar")


def summary_writer(logdir: str | os.PathLike, where: str) -> Any:
    """torch's ``SummaryWriter`` on ``logdir`` (it needs ``tensorboard``)."""
    need("tensorboard", "tensorboard", where)
    from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter(log_dir=os.fspath(logdir))


def _checked_writer(writer: Any, where: str) -> Any:
    if not all(callable(getattr(writer, w, None)) for w in _WRITES):
        raise CutimelineError(
            f"{where} needs a TensorBoard writer (torch.utils.tensorboard.SummaryWriter, "
            f"or a Lightning TensorBoardLogger's .experiment), not "
            f"{type(writer).__name__}; it has no {', '.join(_WRITES)}.")
    return writer


def log(report: Any, writer: Any, step: int | None = None, *,
        name: str = "cutimeline") -> Report:
    """Log a recording (a ``Report``, or a ``Timeline`` analysed here) to
    ``writer``: figure and summary at ``step``, per-step scalars from
    ``step`` on (see the module doc). Returns the Report."""
    where = "cutimeline.integrations.tensorboard.log"
    name = check_name(name, where)
    _checked_writer(writer, where)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise CutimelineError(f"{where}(step={step!r}) must be a whole step number, or "
                              f"None for the first recorded step's number.")
    logged = prepared(report, where)
    owned = logged is not report  # else the caller closes its figure
    points = logged.points()
    first = points[0][0]
    at = (max(first, 0) if step is None else step) - first  # added to each step's number
    try:
        writer.add_figure(f"{name}/timeline", logged.figure, global_step=first + at,
                          close=False)
    finally:
        if owned:
            logged.close()
    # indented: TensorBoard renders text as Markdown, and this is preformatted
    text = "\n".join("    " + line for line in logged.summary().splitlines())
    writer.add_text(f"{name}/summary", text, global_step=first + at)
    for number, values in points:
        for key, value in values.items():
            writer.add_scalar(f"{name}/{key}", value, global_step=number + at)
    if callable(getattr(writer, "flush", None)):
        writer.flush()
    return logged.report


def trace_handler(logdir_or_writer: Any, *, name: str = "cutimeline") -> Callable[[Timeline], str]:
    """An ``on_trace_ready`` handler for ``ctl.record(schedule=...)``: each
    window is analysed, logged with ``log`` at its own step numbers and
    saved as ``step-<a>-<b>.ctl`` in the log folder (``logdir_or_writer``:
    a folder, made now, whose ``SummaryWriter`` is opened at the first
    window; or a writer, whose ``get_logdir()`` takes the files). The
    handler returns the file's path."""
    where = "cutimeline.integrations.tensorboard.trace_handler"
    name = check_name(name, where)
    held: dict[str, Any] = {}
    if isinstance(logdir_or_writer, (str, os.PathLike)) and os.fspath(logdir_or_writer):
        folder = os.fspath(logdir_or_writer)
        need("tensorboard", "tensorboard", where)
        os.makedirs(folder, exist_ok=True)
    else:
        held["writer"] = _checked_writer(logdir_or_writer, where)
        folder = getattr(logdir_or_writer, "get_logdir", lambda: None)()
        if not isinstance(folder, str):
            raise CutimelineError(f"{where} was given a writer without get_logdir(); "
                                  f"give the log folder instead, or a SummaryWriter.")

    def handle(tl: Timeline) -> str:
        steps = tl.meta.get("steps")
        if not (isinstance(steps, list) and len(steps) == 2):
            raise CutimelineError(f"{where} logs the windows of ctl.record(schedule=...), "
                                  f"and this Timeline has no meta 'steps' [first, last].")
        if "writer" not in held:
            held["writer"] = summary_writer(folder, where)
        log(tl, held["writer"], step=None, name=name)
        path = os.path.join(folder, f"step-{steps[0]}-{steps[1]}.ctl")
        tl.save(path)
        return path

    return handle
