"""What every integration logs, read from one Report: the run's verdict
and first fix, its headline numbers, one point per recorded step, the
step table, the figure; and the optional packages the integrations need.

The numbers are the step table's as recorded (``Report.steps``):
``step_ms`` a step's duration, ``gpu_busy`` the share of it the primary
GPU computed, ``idle_<cause>`` the share it idled for each cause (with
``gpu_busy`` they add up to 1), ``mfu`` its model FLOPs utilisation
where the report has one. The headline's (``fields``) are the same over
the steady-state steps the verdict covers (all but the first, from three
steps on), with the verdict, its predicted gain and the change to make.
"""

from __future__ import annotations

import importlib
import math
import os
from types import ModuleType
from typing import Any

import numpy as np

from ..analysis import CAUSES, Report, analyze, steady
from ..errors import CutimelineError
from ..timeline.timeline import Timeline

__all__ = ["need", "Logged", "prepared", "check_name"]

#: idle causes of the step table, in its order (communication: collectives alone)
IDLE = (*CAUSES, "communication")


def need(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or a CutimelineError that says to install
    ``cutimeline[extra]``; ``what`` names the integration asking."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise CutimelineError(f"{what} needs the {module.split('.')[0]} package, which is "
                              f"not installed; pip install 'cutimeline[{extra}]'.") from None


def check_name(name: Any, where: str) -> str:
    """``name``, the prefix of every logged key, checked."""
    if not isinstance(name, str) or not name.strip() or name != name.strip() or any(
            c in name for c in "/\\ "):
        raise CutimelineError(f"{where}(name={name!r}) must be a non-empty name without "
                              f"spaces or slashes, such as 'cutimeline'; it prefixes "
                              f"every key logged.")
    return name


class Logged:
    """One recording as the integrations log it: its ``report``, its
    ``timeline`` (the one analysed) and, drawn once on first use, its
    ``figure``."""

    def __init__(self, report: Report):
        self.report, self.timeline = report, report.source
        self._figure: Any = None
        self._fields: dict | None = None

    @property
    def figure(self) -> Any:
        """``ctl.plot`` of the whole Timeline (a matplotlib Figure)."""
        if self._figure is None:
            from ..rendering.figure import plot  # matplotlib, when a figure is logged
            self._figure = plot(self.timeline, report=self.report)
        return self._figure

    def close(self) -> None:
        """Let the figure go (``ctl.plot``'s figures are not pyplot's: no
        ``plt.close`` needed)."""
        self._figure = None

    def png(self, folder: str, base: str) -> str:
        """The figure written as ``folder/base.png``; its path."""
        path = os.path.join(folder, f"{base}.png")
        self.figure.savefig(path, format="png")
        return path

    def summary(self) -> str:
        return self.report.summary()

    def fields(self) -> dict[str, Any]:
        """The run's headline: ``verdict`` (e.g. "launch-bound"), ``fix``
        (the change to make first, in words; "" when none gains),
        ``predicted_gain`` (its predicted share of the step saved, 0..1),
        ``step_ms``, ``gpu_busy``, ``mfu`` over the steady-state steps
        (``mfu`` None without FLOPs or a peak)."""
        if self._fields is None:
            rep = self.report
            said = rep.to_dict()["verdict"]
            part = steady(self.rows())
            span = float(part["duration_ns"].sum())
            compute = rep.compute()
            mfu = None if compute is None else compute.get("mfu")
            self._fields = {
                "verdict": str(said["verdict"]), "fix": str(said.get("change") or ""),
                "predicted_gain": float(said.get("gain") or 0.0),
                "step_ms": span / len(part) / 1e6 if len(part) else 0.0,
                "gpu_busy": float(part["busy_ns"].sum()) / span if span > 0 else 0.0,
                "mfu": None if mfu is None or not math.isfinite(mfu) else float(mfu)}
        return self._fields

    def rows(self) -> np.ndarray:
        """The step rows (the window as one row, number -1, without steps)."""
        s = self.report.steps
        return s if len(s) else np.array([self.report.overall])

    def points(self) -> list[tuple[int, dict[str, float]]]:
        """(step number, {name: value}) for each recorded step: ``step_ms``,
        ``gpu_busy``, ``idle_<cause>`` for every cause, ``mfu`` where
        the step has one."""
        s = self.rows()
        names = s.dtype.names
        out = []
        for row in s:
            span = float(row["duration_ns"])
            share = (lambda ns: float(ns) / span) if span > 0 else (lambda ns: 0.0)
            values = {"step_ms": span / 1e6, "gpu_busy": float(row["busy_frac"])}
            values.update({f"idle_{c}": share(row[f"{c}_ns"]) for c in IDLE
                           if f"{c}_ns" in names})
            if "mfu" in names and math.isfinite(float(row["mfu"])):
                values["mfu"] = float(row["mfu"])
            out.append((int(row["number"]), values))
        return out

    def table(self) -> tuple[list[str], list[list[Any]]]:
        """The step table to read in a dashboard: (columns, rows) of plain
        Python values — step, verdict, fix, gain, then ``points``' values."""
        points = dict(self.points())
        rows = []
        for row in self.rows():
            number = int(row["number"])
            rows.append([number, str(row["verdict"]), str(row["fix"]),
                         float(np.nan_to_num(row["gain"])), *points[number].values()])
        first = next(iter(points.values()))
        return ["step", "verdict", "fix", "gain", *first], rows

    def files(self, folder: str, base: str) -> tuple[str, str]:
        """The recording written into ``folder``: ``base``.ctl and
        ``base``.json.gz (Perfetto); their paths."""
        from ..formats.chrome import export_chrome
        ctl_path = os.path.join(folder, f"{base}.ctl")
        trace = os.path.join(folder, f"{base}.json.gz")
        self.timeline.save(ctl_path)
        export_chrome(self.timeline, trace)
        return ctl_path, trace


def prepared(obj: Any, where: str) -> Logged:
    """A Report, a Timeline (analysed here) or a ``Logged`` as a ``Logged``;
    anything else is a CutimelineError naming what to pass to ``where``."""
    if isinstance(obj, Logged):
        return obj
    if isinstance(obj, Report):
        return Logged(obj)
    if isinstance(obj, Timeline):
        if obj.meta.get("disabled"):
            raise CutimelineError(f"{where} was given the empty Timeline of a recording "
                                  f"made with CUTIMELINE_DISABLE set; there is nothing "
                                  f"to log. Record with it unset.")
        return Logged(analyze(obj))
    raise CutimelineError(f"{where} takes a Report (ctl.analyze(tl)) or a Timeline "
                          f"(rec.timeline, ctl.load(path)), not {type(obj).__name__}.")
