"""The verdict strip above the lanes: one cell per step, the answer first.

Each step is a cell over its device window (``begin_ns``..``end_ns`` of
the report's step table), coloured by its verdict (``palette``), labelled
where the cell is wide enough with the longest of: "step 3 · input-bound ·
64.9 ms · GPU 66%", "step 3 · 64.9 ms · GPU 66%", "64.9 ms · GPU 66%",
"64.9 ms". Where the report's step table has FLOPs (fields ``flops``, per
step, and ``mfu``, NaN when no peak is known), a step with FLOPs gets its
achieved rate first in that list ("... · GPU 66% · 41.2 TFLOP/s · MFU
4.2%"): the field ``tflop_per_s`` where the analysis gives it, else its
``flops`` over its ``duration_ns``. A Timeline without steps gets one
cell for the whole window with the report's overall verdict. Steps
narrower than a few pixels are merged per pixel column by verdict
(``pixels.runs``), as the lanes are.
Every number comes from the report; the verdict line of the title
(``verdict_line``) is the first sentence of ``Report.summary()``.
"""

from __future__ import annotations

import numpy as np

from ..text import figure_text, fmt_mfu, fmt_ns, fmt_tflops, pct
from . import pixels as px
from .artists import boxes
from .palette import VERDICT_COLORS, text_color

__all__ = ["STRIP_LABEL", "verdict_line", "strip_cells", "draw_strip", "compute_text"]

STRIP_LABEL = "step verdicts"
MIN_CELL_PX = 4   # narrower cells are merged per pixel column by verdict
CHAR_PX = 5.3     # ~width of a character of 7-pt text at 100 dpi, with room
FONT = 7


def verdict_line(rep) -> str:
    """The run's verdict with the fix that gains most and the steps it
    holds for, in the words of the summary's first line, short enough for
    a title: "Verdict: sync-bound: −48% with no host reads of GPU values
    inside the step (steps 1–5, all but the first)"."""
    h = rep.headline()
    return f"Verdict: {h['short']} ({h['steps']})"


def strip_cells(scene) -> np.ndarray:
    """The step rows (or the overall row, for a Timeline without steps)
    whose device window meets the scene's window, in time order."""
    rep = scene.report
    rows = rep.steps if len(rep.steps) else np.array([rep.overall])
    rows = rows[(rows["end_ns"] > scene.w0) & (rows["begin_ns"] < scene.w1)]
    return rows[np.argsort(rows["begin_ns"], kind="stable")]


def _labels(row) -> list[str]:
    time, busy = fmt_ns(int(row["duration_ns"])), pct(float(row["busy_frac"]))
    if row["number"] < 0:
        plain = [f"no steps — {row['verdict']} · {time} · GPU busy {busy}",
                 f"{row['verdict']} · GPU {busy}", f"GPU {busy}"]
    else:
        n, v = int(row["number"]), row["verdict"]
        plain = [f"step {n} · {v} · {time} · GPU {busy}", f"step {n} · {time} · GPU {busy}",
                 f"{time} · GPU {busy}", time]
    rate = compute_text(row)
    return [f"{t} · {rate}" for t in plain[:-1]] + plain if rate else plain


def compute_text(row) -> str:
    """"41.2 TFLOP/s · MFU 4.2%" of a step row whose report has FLOPs
    ("" without them, or where the step has none)."""
    names = row.dtype.names or ()
    if "flops" not in names or not float(row["flops"]) > 0 or row["duration_ns"] <= 0:
        return ""
    if "tflop_per_s" in names and np.isfinite(row["tflop_per_s"]):
        per_s = float(row["tflop_per_s"]) * 1e12
    else:
        per_s = float(row["flops"]) / (int(row["duration_ns"]) / 1e9)
    text = fmt_tflops(per_s)
    mfu = float(row["mfu"]) if "mfu" in names else float("nan")
    if np.isfinite(mfu):
        text += f" · MFU {fmt_mfu(mfu)}"
    return text


def draw_strip(scene, ax, cols: px.Columns, *, labels=None,
               name: str = STRIP_LABEL) -> set[str]:
    """Draw the strip into ``ax`` (sharing the lanes' x axis); returns the
    verdicts drawn, for the legend. ``labels``: a function of a step row
    giving its candidate labels, longest first (default: the module
    doc's); ``name``: the strip's label at its left. ``cols`` may reach
    past the scene's window (a shorter Timeline on a longer one's axis)."""
    ax.set_ylim(0.5, -0.5)
    ax.set_yticks([0], [name])
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelbottom=False, length=0)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    rows = strip_cells(scene)
    if len(rows) == 0:
        return set()
    b = np.maximum(rows["begin_ns"], scene.w0)
    e = np.minimum(rows["end_ns"], scene.w1)
    verdicts = [str(v) for v in rows["verdict"]]
    colors = np.array([VERDICT_COLORS.get(v, VERDICT_COLORS["unknown"]) for v in verdicts])
    c0, c1 = cols.floor(b), cols.ceil(e)
    wide = (c1 - c0) >= MIN_CELL_PX
    if wide.all():
        # a pixel of white between neighbouring cells keeps them apart
        gap = cols.span / 1e6 / cols.width
        boxes(ax, (b - scene.w0) / 1e6 + gap, (e - scene.w0) / 1e6, -0.45, 0.45,
              colors, zorder=2)
    else:
        kinds = sorted(set(verdicts))
        g, k0, k1 = px.runs(np.array([kinds.index(v) for v in verdicts]), b, e,
                            len(kinds), cols)
        boxes(ax, cols.ms(k0), cols.ms(k1), -0.45, 0.45,
              np.array([VERDICT_COLORS.get(kinds[i], VERDICT_COLORS["unknown"])
                        for i in g]).reshape(-1), zorder=2)
    _label(ax, scene, cols, rows[wide], b[wide], e[wide], colors[wide], labels or _labels)
    return set(verdicts)


def _label(ax, scene, cols, rows, b, e, colors, labels) -> None:
    # matplotlib loads on the first draw (see rendering/__init__.py)
    from matplotlib.transforms import Bbox, TransformedBbox
    scale = ax.figure.dpi / 100
    for row, x0, x1, color in zip(rows, b, e, colors):
        room = (x1 - x0) * cols.width / cols.span - 6
        # a label may take two lines (its longest must fit): the strip is
        # tall enough for two lines of 7-pt text
        text = next((t for t in labels(row)
                     if max(map(len, t.split("\n"))) * CHAR_PX * scale <= room), None)
        if text is None:
            continue
        m0, m1 = (x0 - scene.w0) / 1e6, (x1 - scene.w0) / 1e6
        t = ax.text((m0 + m1) / 2, 0, figure_text(text), ha="center", va="center", fontsize=FONT,
                    color=text_color(color), zorder=3, linespacing=1.0)
        t.set_clip_box(TransformedBbox(Bbox([[m0, -0.5], [m1, 0.5]]), ax.transData))
        t.set_clip_on(True)
