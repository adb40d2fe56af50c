"""The figure's colours: one per op phase, idle cause and step verdict.

Idle shading is light so that work drawn over it stands out; a verdict's
colour is a deeper shade of the hue of the cause it names (input-bound is
the purple of "waiting for data", launch-bound the blue of "waiting for
launches"), so the strip and the lanes below it read as one picture. No
colour here is red, which only launch lines use.
"""

from __future__ import annotations

__all__ = ["PHASES", "PHASE_COLORS", "CAUSE_COLORS", "CAUSE_LABELS", "VERDICT_COLORS",
           "FLOW_COLOR", "STEP_COLORS", "USER_COLOR", "STREAM_COLORS", "text_color"]

# Phase of an op, by priority (a later one wins): forward is everything
# not claimed by another (the loss, zero_grad...); "no op" is GPU work
# whose launching op is unknown.
PHASES = ("forward / other", "backward", "optimizer", "data", "sync", "no op")
PHASE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#222222", "#9a9a9a")
COMPILED_HATCH, COMPILED_EDGE = "////", "#ffffff"  # over a compiled region's rows
CAUSE_COLORS = {"data": "#cdbfe8", "sync": "#f3d36b", "launch": "#a6dcef",
                "host": "#b9e3b0", "dependency": "#d5d5d5", "unknown": "#efe6cf"}
CAUSE_LABELS = {"data": "waiting for data", "sync": "after a sync",
                "launch": "waiting for launches", "host": "host busy elsewhere",
                "dependency": "dependency / latency", "unknown": "unknown cause"}
VERDICT_COLORS = {"GPU-bound": "#2e7d4f", "input-bound": "#9479c9",
                  "sync-bound": "#e0b21c", "launch-bound": "#4fa6d6",
                  "host-bound": "#7cc46c", "dependency-bound": "#a3a3a3",
                  "communication-bound": "#5b8fd1",
                  "mixed": "#e0925a", "unknown": "#d8c8a0", "host-only": "#cfcfcf"}
# (one for each of ``analysis.verdicts.margins.VERDICTS``; a test keeps them in step)
FLOW_COLOR = "#e00000"
STEP_COLORS = ("#e4e4e4", "#f4f4f4")
USER_COLOR = "#2a9d8f"
STREAM_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")



def text_color(hex_color: str) -> str:
    """Dark text on a light fill, white on a dark one (by luminance)."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#222222" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"
