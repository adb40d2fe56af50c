"""How a Report shows itself in Jupyter: ``Report._repr_html_``.

The summary's verdict line over the step table, one row per step: the
verdict, the fix that gains most with its predicted gain, step time, GPU
busy, idle by cause; every string escaped, and a long table cut in the
middle (``MAX_ROWS``). HTML needs no matplotlib, so the analysis builds it
itself; the Timeline's picture is drawn by ``cutimeline.rendering.notebook``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from ..text import fmt_ns, pct
from .idle.gaps import CAUSES
from .verdicts.margins import fix_words

__all__ = ["MAX_ROWS", "report_html"]

MAX_ROWS = 60            # steps shown; longer tables keep the first and last ones


def report_html(rep: Any) -> str:
    """The verdict line and the step table of ``rep`` as an HTML fragment."""
    first = rep.summary().splitlines()[0]
    steps = rep.steps
    head = ["step", "verdict", "fix that gains most", "step time", "GPU busy",
            "idle by cause"]
    parts = [f"<div class='cutimeline-report'><p><b>{html.escape(first)}</b></p>",
             f"<p>{html.escape(repr(rep))}</p>"]
    if len(steps) == 0:
        parts.append("<p>No steps in this Timeline: the verdict is over the "
                     "whole window.</p></div>")
        return "".join(parts)
    rows = np.arange(len(steps))
    if len(rows) > MAX_ROWS:
        half = MAX_ROWS // 2
        rows = np.concatenate([rows[:half], [-1], rows[-half:]])
    parts.append("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head)
                 + "</tr></thead><tbody>")
    for i in rows:
        if i < 0:
            parts.append(f"<tr><td colspan='{len(head)}'>… {len(steps) - MAX_ROWS} "
                         f"more steps …</td></tr>")
            continue
        parts.append(_row(steps[i]))
    parts.append("</tbody></table></div>")
    return "".join(parts)


def _row(s) -> str:
    v = str(s["verdict"])
    margin = fix_words(str(s["fix"]), float(s["gain"])) \
        if s["fix"] and float(s["gain"]) > 0 else ""
    idle = int(s["idle_ns"])
    causes = sorted(((int(s[f"{c}_ns"]), c) for c in CAUSES), reverse=True)
    by_cause = ", ".join(f"{c} {fmt_ns(ns)}" for ns, c in causes if ns > 0.005 * idle)
    cells = [str(int(s["number"])), v, margin, fmt_ns(int(s["duration_ns"])),
             pct(float(s["busy_frac"])), by_cause or "none"]
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
