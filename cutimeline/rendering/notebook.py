"""How a Report and a Timeline show themselves in Jupyter.

``Report._repr_html_`` is the summary's verdict line over the step table
(one row per step: verdict, the fix that gains most with its predicted
gain, step time, GPU busy, idle by cause),
every string escaped; ``Timeline._repr_png_`` is ``ctl.plot`` of the whole
Timeline as PNG bytes, at a size bounded in pixels (``MAX_PX``) so a
long or many-lane Timeline cannot flood a notebook. Both hooks live on
their classes as one-line delegations here: the lower stages may not
import this one (the import contract), so they load it by name.
"""

from __future__ import annotations

import html
import io
from typing import Any

import numpy as np

from ..analysis.idle.gaps import CAUSES
from ..analysis.verdicts.margins import fix_words
from ..analysis.words import fmt_ns, pct
from ..errors import CutimelineError
from .figure import plot
from .palette import VERDICT_COLORS

__all__ = ["MAX_ROWS", "MAX_PX", "report_html", "timeline_png"]

MAX_ROWS = 60            # steps shown; longer tables keep the first and last ones
MAX_PX = (1400, 2000)    # largest PNG, width × height in pixels
WIDTH_IN, DPI = 14.0, 100


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
    swatch = (f"<span style='display:inline-block;width:0.8em;height:0.8em;"
              f"background:{VERDICT_COLORS.get(v, VERDICT_COLORS['unknown'])};"
              f"margin-right:0.3em'></span>")
    margin = fix_words(str(s["fix"]), float(s["gain"])) \
        if s["fix"] and float(s["gain"]) > 0 else ""
    idle = int(s["idle_ns"])
    causes = sorted(((int(s[f"{c}_ns"]), c) for c in CAUSES), reverse=True)
    by_cause = ", ".join(f"{c} {fmt_ns(ns)}" for ns, c in causes if ns > 0.005 * idle)
    cells = [str(int(s["number"])), v, margin, fmt_ns(int(s["duration_ns"])),
             pct(float(s["busy_frac"])), by_cause or "none"]
    cells = [html.escape(c) for c in cells]
    cells[1] = swatch + cells[1]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def timeline_png(tl: Any) -> bytes | None:
    """``ctl.plot(tl)`` as PNG bytes no larger than MAX_PX; None (no PNG,
    the notebook shows the text repr) for a Timeline that cannot be
    plotted, such as one not yet aligned."""
    try:
        fig = plot(tl, width=WIDTH_IN, dpi=DPI)
    except CutimelineError:
        return None
    w, h = fig.get_size_inches()
    dpi = min(DPI, MAX_PX[0] / w, MAX_PX[1] / h)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
