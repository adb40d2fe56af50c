"""``ctl.plot`` and ``plot_compare`` (two Timelines): the dual-execution timeline.

    fig = ctl.plot(tl, "timeline.png", window=3)     # step 3

The figure answers first: a title block (what was recorded, the window
drawn, ``titles.py``; the run's verdict with its margin, the first
sentence of ``summary()``; the counts), then the verdict strip
(``strip.py``). ``fig.axes``, in this order, for ``plot`` without ``ax``:

* ``[0]`` the lanes (``lanes/scene.py``): host spans, one lane per CPU
  thread, one per GPU stream grouped by device; work coloured by phase
  (``lanes/phases.py``), GPU idle time shaded by its cause from
  ``analyze``; a red line from each launch to the start of its work (at
  most ``flows``, evenly spread); a dense window drawn as an overview
  (``lanes/overview.py``, and the title's last line says so).
* ``[1]`` queue depth per stream; ``[2]`` CPU lead per stream in ms, GPU
  begin − host launch (``panels.py``).
* ``[3]`` the verdict strip, drawn above the lanes.
* ``[4]`` only with memory readings (or ``memory=True``): device bytes
  in use (``memory.py``), drawn between the lanes and the queue depth.

The time axis is ms from the window's start (the x label says where that
lies in the recording); a simulated Timeline says SIMULATED. Work is
merged at the lanes' pixel resolution before drawing (``pixels.py``), so
10^6 ops draw as a few rectangles per lane and pixel column, no artist
per op. Figures are ``matplotlib.figure.Figure`` on the Agg canvas:
nothing here touches pyplot or the user's backend.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..errors import CutimelineError
from ..text import figure_text
from ..timeline.timeline import Timeline
from . import pixels as px
from .frame import (check_options, check_path, lane_legend, legends, save_figure,
                    title_block)
from .lanes import Scene
from .memory import draw_memory, has_memory
from .panels import draw_lead, draw_queue
from .placement import FONT, layout as _layout, px_width as _px_width, style as _style
from .strip import draw_strip, verdict_line
from .titles import SEP, counts_text, source_name, window_text, xlabel
from .whatif import plot_what_if

__all__ = ["plot", "plot_compare"]


def plot(tl: Timeline, path: str | os.PathLike | None = None, *, window: Any = None,
         ax: Any = None, width: float = 14.0, dpi: int = 100, flows: int = 500,
         title: str | None = None, report: Any = None, overview: bool | None = None,
         memory: bool | None = None, what_if: Any = None):
    """Draw a Timeline; returns the matplotlib ``Figure``.

    ``path``: write the figure, as PNG, SVG or PDF by its extension (None:
    don't save). ``window``: a step (3), a range of steps ((3, 5) or
    range(3, 6)) or seconds from the start ((0.5, 0.75)); default the whole
    Timeline (for an imported trace without steps, first to last device
    activity). ``ax``: draw only the lanes (no strip, no panels) into this
    Axes, with its title, x label and a legend just right of it, outside:
    leave room, or save with ``bbox_inches="tight"`` as ``plot`` does when
    given a path; the figure is ``ax.figure``. ``width``: figure
    width in inches (ignored with ``ax``); ``dpi``: pixels per inch of the
    figure and of the saved PNG. ``flows``: at most this many launch lines
    (0: none). ``title``: replaces the generated name of the source in the
    first title line (the window and the verdict are still stated).
    ``report``: ``ctl.analyze(tl)`` if you have it (else it is made here).
    ``overview``: True or False to force or forbid the overview of dense
    windows; None (default) picks it by density. ``memory``: the memory
    panel (device bytes in use, ``memory.py``) under the lanes: None
    (default) when the Timeline has memory readings, False never, True
    always (an error without readings); not drawn with ``ax``.
    ``what_if``: a fix's name (``analysis.replay.edits.EDITS``: data, sync, host,
    graphs, launch, ...) or True (the one predicted to gain most): the
    Timeline over its replay under that fix, step times labelled
    (``whatif.plot_what_if``; not with ``ax`` or ``memory``).
    """
    if what_if is not None:
        if ax is not None or memory:
            raise CutimelineError("what_if draws the recording over its replay in a "
                                  "figure of their own, without a memory panel; leave "
                                  "ax and memory unset with what_if.")
        return plot_what_if(tl, path, what_if=what_if, window=window, width=width,
                            dpi=dpi, flows=flows, title=title, report=report,
                            overview=overview)
    fmt = check_path(path)
    check_options(width, dpi, flows, title, overview)
    show_memory = _check_memory(memory, tl)
    scene = Scene(tl, window, report=report)
    head = f"{title or source_name(scene)} — {window_text(scene)}"
    if ax is not None:
        fig = _figure_of(ax)
        cols = px.Columns(scene.w0, scene.w1, int(round(ax.bbox.width)))
        dense = scene.dense(cols) if overview is None else overview
        used = scene.draw_lanes(ax, cols, flows, dense)
        _style(ax)
        ax.set_title(figure_text(f"{head}\n{verdict_line(scene.report)}"), loc="left",
                     fontsize=FONT + 1)
        ax.set_xlabel(xlabel(scene), fontsize=FONT)
        lane_legend(ax, used, loc="upper left", fontsize=FONT - 1,
                    bbox_to_anchor=(1.005, 1.0), borderaxespad=0, frameon=False)
    else:
        fig, axes = _layout([scene.labels], width, dpi, panels=True, strip=True,
                            memory=show_memory)
        cols = px.Columns(scene.w0, scene.w1, _px_width(axes[0]))
        dense = scene.dense(cols) if overview is None else overview
        used = scene.draw_lanes(axes[0], cols, flows, dense)
        used["verdicts"] = draw_strip(scene, axes[3], cols)
        if show_memory:
            draw_memory(scene, axes[4], cols)
        _panels(axes[1:3], [scene], cols)
        legends(fig, axes[:4], [used], [scene])   # not the memory panel: the strip last
        axes[2].set_xlabel(xlabel(scene), fontsize=FONT)
        title_block(fig, axes[3], head, counts_text(scene, dense),
                verdict_line(scene.report), scene.report.overall["verdict"])
    fig.cutimeline_overview = dense  # which way the GPU lanes were drawn
    if fmt:
        # into a given Axes the lane labels and the legend stick out of it:
        # a tight bounding box keeps them in the file
        save_figure(fig, path, fmt, bbox_inches="tight" if ax is not None else None)
    return fig


def plot_compare(a: Timeline, b: Timeline, path: str | os.PathLike | None = None, *,
                 labels: Sequence[str] | None = None, window: Any = None,
                 width: float = 14.0, dpi: int = 100, flows: int = 500,
                 title: str | None = None):
    """Two Timelines stacked on one time axis; returns the ``Figure``.

    Each is drawn from its own window start (time 0 is where each window
    begins: the first op of each recording, or the step given), so a run
    with ``num_workers=0`` and one with 4, or cutimeline against a
    torch.profiler import of the same work, line up step for step. The
    same ``window`` applies to both. ``labels``: the two names (default
    from each Timeline's source). Axes: a's lanes, b's lanes, queue depth
    (a solid, b dashed), CPU lead; no memory panel. Other options as for
    ``plot``.
    """
    fmt = check_path(path)
    check_options(width, dpi, flows, title)
    if labels is not None and (isinstance(labels, str) or len(labels) != 2
                               or not all(isinstance(s, str) for s in labels)):
        raise CutimelineError(f"labels={labels!r} must be two strings, one per "
                              f"Timeline, such as ('num_workers=0', 'num_workers=4').")
    scenes = [Scene(t, window, what="plot_compare") for t in (a, b)]
    if labels is None:
        labels = (source_name(scenes[0]), source_name(scenes[1]))
    # room above the first lanes for their own title under the figure's
    fig, axes = _layout([s.labels for s in scenes], width, dpi, panels=True, top=0.95)
    span = max(s.span_ms for s in scenes)
    used = []
    for scene, ax, label in zip(scenes, axes[:2], labels):
        # one pixel grid for both: columns of the longer window
        cols = px.Columns(scene.w0, scene.w0 + int(round(span * 1e6)), _px_width(ax))
        used.append(scene.draw_lanes(ax, cols, flows))
        ax.set_xlim(0, span)
        ax.set_title(figure_text(f"{'ab'[len(used) - 1]}: {label}"), loc="left",
                     fontsize=FONT + 0.5, pad=3)
    for i, scene in enumerate(scenes):
        cols = px.Columns(scene.w0, scene.w0 + int(round(span * 1e6)), _px_width(axes[2]))
        _panels(axes[2:], [scene], cols, prefix=f"{'ab'[i]}: ", ls=("-", "--")[i])
    legends(fig, axes, used, scenes, lanes_axes=2)
    axes[-1].set_xlabel("time (ms) from the start of each window", fontsize=FONT)
    title_block(fig, axes[0], title or "cutimeline comparison",
            f"{window_text(scenes[0])}, each Timeline from the start of its own "
            f"window{SEP}queue depth and CPU lead: a solid, b dashed")
    if fmt:
        save_figure(fig, path, fmt)
    return fig


# -- arguments ---------------------------------------------------------------

def _check_memory(memory: Any, tl: Any) -> bool:
    """Whether to draw the memory panel (``plot``'s ``memory``)."""
    if memory is not None and not isinstance(memory, bool):
        raise CutimelineError(f"memory={memory!r} must be True, False or None "
                              f"(None: the memory panel when the Timeline has "
                              f"memory readings).")
    present = isinstance(tl, Timeline) and has_memory(tl)
    if memory and not present:
        raise CutimelineError("memory=True, but the Timeline has no memory readings "
                              "(its memory table is empty); record with "
                              "ctl.record(memory=True), import a trace recorded with "
                              "profile_memory=True, or leave memory=None.")
    return present if memory is None else memory


def _figure_of(ax: Any):
    fig = getattr(ax, "figure", None)
    if fig is None or not hasattr(ax, "add_collection"):
        raise CutimelineError(f"ax={ax!r} must be a matplotlib Axes (from "
                              f"fig.add_subplot() or plt.subplots()).")
    return fig


# -- panels and legends ------------------------------------------------------

def _panels(axes, scenes, cols, prefix: str = "", ls: str = "-") -> None:
    q, lead = axes
    for scene in scenes:
        draw_queue(scene, q, cols, prefix=prefix, ls=ls)
        draw_lead(scene, lead, cols, ls=ls)
    for ax, label in ((q, "queue depth"), (lead, "CPU lead (ms)")):
        ax.set_ylabel(label, fontsize=FONT)
        ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    q.set_ylim(bottom=0)
    q.yaxis.get_major_locator().set_params(integer=True)
    lead.set_ylim(bottom=0)
    if all(s.lanes is None for s in scenes):
        for ax in axes:
            ax.text(0.5, 0.5, "no GPU work in this Timeline", transform=ax.transAxes,
                    ha="center", va="center", fontsize=FONT, color="#666666")
