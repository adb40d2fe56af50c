"""The frame shared by every figure: its arguments checked, its legends,
its title block.

``figure.py`` (``plot``, ``plot_compare``) and ``whatif.py``
(``plot_what_if``) each lay out their own Axes; what surrounds them is
the same, so it is said once here: a path's format from its extension
(and the file written as every cutimeline file is, ``save_figure``),
the common options checked with a sentence naming the bad value, the
lanes' legend (only what was drawn) beside the top Axes, and the title
block (bold title, the verdict after a square of its colour, a subtitle).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import CutimelineError
from ..text import figure_text
from ..timeline import destination
from .palette import (COMPILED_EDGE, COMPILED_HATCH, FLOW_COLOR, MEANINGS,
                      PHASE_COLORS, PHASES, USER_COLOR, VERDICT_COLORS)
from .placement import FONT

__all__ = ["FORMATS", "check_path", "save_figure", "check_options", "lane_handles",
           "lane_legend", "legends",
           "title_block"]

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def check_path(path: Any) -> str | None:
    """The format to save ``path`` in (None: don't save), checked before
    anything is drawn so that a bad name costs no rendering."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise CutimelineError(f"path={path!r} must be a file name ending in "
                              f".png, .svg or .pdf, or None to not save.")
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext not in FORMATS:
        raise CutimelineError(f"Cannot tell the format of {p!r} from its extension; "
                              f"end the file name in .png, .svg or .pdf.")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder):
        raise CutimelineError(f"The folder {folder!r} for {p!r} does not exist; "
                              f"create it first.")
    destination.check(p)
    return FORMATS[ext]


def save_figure(fig: Any, path: str | os.PathLike, fmt: str, **options: Any) -> None:
    """``fig.savefig`` into ``path`` as ``Timeline.save`` writes a file
    (``timeline/destination.py``): only a regular file or a symlink is
    replaced, the link itself, and only once the figure is whole."""
    with destination.replacing(path) as f:
        fig.savefig(f, format=fmt, dpi=fig.dpi, **options)


def check_options(width: Any, dpi: Any, flows: Any, title: Any, overview: Any = None) -> None:
    """The options every figure takes, each refused with a sentence naming
    its range (a 0-inch or 10^5-dpi figure fails late and obscurely);
    ``overview`` where the figure takes it."""
    def number(v):
        return isinstance(v, (int, float, np.number)) and not isinstance(v, bool)

    if not (number(width) and 4 <= width <= 60):
        raise CutimelineError(f"width={width!r} must be the figure width in "
                              f"inches, from 4 to 60.")
    if not (number(dpi) and 20 <= dpi <= 1200):
        raise CutimelineError(f"dpi={dpi!r} must be a number of pixels per "
                              f"inch from 20 to 1200.")
    if not (isinstance(flows, (int, np.integer)) and not isinstance(flows, bool)
            and flows >= 0):
        raise CutimelineError(f"flows={flows!r} must be the largest number of "
                              f"launch lines to draw, a whole number ≥ 0 (0: none).")
    if title is not None and not isinstance(title, str):
        raise CutimelineError(f"title={title!r} must be a string or None.")
    if overview is not None and not isinstance(overview, bool):
        raise CutimelineError(f"overview={overview!r} must be True, False or None "
                              f"(None: an overview when the window is too dense "
                              f"to draw bar by bar).")


# the verdicts of no cause: the strip's only
VERDICT_ONLY = {"communication-bound": "communication-bound",
                "mixed": "mixed (two fixes alike)", "host-only": "host only (no GPU)"}
WRAP = 30   # characters per legend line (the legend's margin is LEGEND_IN wide)


def _wrapped(parts: list[str]) -> str:
    """Parts joined by " · ", a new line before a part that would pass WRAP."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > WRAP:
            lines.append(part)
        else:
            lines[-1] += " · " + part
    return "\n".join(lines)


def lane_handles(used: dict) -> tuple[list, list[str]]:
    """The legend of what was drawn (``used``, from ``Scene.draw_lanes`` and
    ``draw_strip``): handles and labels, one entry per meaning. The model's
    work is one entry of its phases' swatches; a cause's colour is one
    entry naming the host side, the GPU's idle time and the verdict of that
    colour, as far as each was drawn; steps are named in their row."""
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    phases, causes, spans = used["phases"], used["causes"], used["spans"]
    verdicts = used.get("verdicts", ())
    hs: list = []
    labels: list[str] = []

    def entry(handle, label: str) -> None:
        hs.append(handle)
        labels.append(label)
    # a GPU-bound step is the forward blue: its GPU work bounds it
    work = [p for p in PHASES[:3] if p in phases or p == PHASES[0] and "GPU-bound" in verdicts]
    if work:
        entry(tuple(Patch(color=PHASE_COLORS[PHASES.index(p)]) for p in work),
              _wrapped([p.replace(" / other", "") for p in work] +
                       ["GPU-bound"] * ("GPU-bound" in verdicts)))
    if "copy" in phases:
        entry(Patch(color=PHASE_COLORS[PHASES.index("copy")]), "copy (memcpy, memset)")
    for meaning, (color, host, cause, idle, verdict) in MEANINGS.items():
        parts = []
        if host and (meaning in phases or meaning in spans):
            parts.append(host)
        if cause in causes:
            parts.append(idle)
        if verdict in verdicts:
            parts.append(verdict if verdict != "unknown" else "verdict unknown")
        if parts:
            entry(Patch(color=color), _wrapped(parts))
    for v in ("communication-bound", "mixed", "host-only"):
        if v in verdicts:
            entry(Patch(color=VERDICT_COLORS[v]), VERDICT_ONLY[v])
    if "no op" in phases:
        entry(Patch(color=PHASE_COLORS[PHASES.index("no op")]), "GPU work, op unknown")
    if "user" in spans:
        entry(Patch(color=USER_COLOR), "user span")
    if used.get("compiled"):
        entry(Patch(facecolor="#9a9a9a", edgecolor=COMPILED_EDGE, hatch=COMPILED_HATCH,
                    lw=0), "torch.compile region")
    if used["flows"]:
        entry(Line2D([], [], color=FLOW_COLOR, lw=1.2), "launch → start of GPU work")
    return hs, labels


def lane_legend(target, used: dict, **kw):
    """``target.legend`` (a Figure or an Axes) of ``lane_handles(used)``."""
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.legend_handler import HandlerTuple
    hs, labels = lane_handles(used)
    return target.legend(hs, labels, handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
                         **kw)


def legends(fig, axes, used: list[dict], scenes, lanes_axes: int = 1) -> None:
    merged = {k: set().union(*(u[k] for u in used)) for k in ("phases", "causes", "spans")}
    merged["flows"] = sum(u["flows"] for u in used)
    merged["compiled"] = any(u.get("compiled") for u in used)
    merged["verdicts"] = set().union(*(u.get("verdicts", ()) for u in used))
    # from the top of the strip, when there is one (the last Axes)
    top = axes[-1] if merged["verdicts"] else axes[0]
    x = axes[0].get_position().x1 + 0.12 / fig.get_figwidth()
    lane_legend(fig, merged, loc="upper left", fontsize=FONT - 0.5,
                bbox_to_anchor=(x, top.get_position().y1), frameon=False,
                borderaxespad=0, handlelength=2.0)
    q = axes[lanes_axes]
    handles, names = q.get_legend_handles_labels()
    if handles:
        # matplotlib loads on the first draw (see rendering/__init__.py)
        from matplotlib.lines import Line2D
        lines = [Line2D([], [], color=h.get_color(), ls=h.get_linestyle(), lw=1.2)
                 for h in handles]
        fig.legend(handles=lines, labels=names, loc="upper left", fontsize=FONT - 0.5,
                   bbox_to_anchor=(x, q.get_position().y1), frameon=False,
                   borderaxespad=0, title="streams", title_fontsize=FONT - 0.5)


def title_block(fig, ax, title: str, subtitle: str, verdict: str | None = None,
            run_verdict: str | None = None) -> None:
    """The title block above ``ax``: the title in bold; the verdict line,
    after a square of the run verdict's colour; the subtitle."""
    x = ax.get_position().x0
    h = fig.get_figheight()
    # they hold names from the trace (cutimeline.text)
    title, subtitle = figure_text(title), figure_text(subtitle)
    verdict = None if verdict is None else figure_text(verdict)
    fig.text(x, 1 - 0.2 / h, title, ha="left", va="top", fontsize=FONT + 3,
             fontweight="bold")
    y = 0.47
    if verdict is not None:
        square = VERDICT_COLORS.get(str(run_verdict), VERDICT_COLORS["unknown"])
        fig.text(x, 1 - y / h, "■", ha="left", va="top", fontsize=FONT + 2,
                 color=square)
        fig.text(x + 0.16 / fig.get_figwidth(), 1 - y / h, verdict, ha="left",
                 va="top", fontsize=FONT + 1.5, fontweight="bold", color="#222222")
        y += 0.24
    fig.text(x, 1 - y / h, subtitle, ha="left", va="top", fontsize=FONT,
             color="#444444")
