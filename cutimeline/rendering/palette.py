"""The figure's colours: one colour per meaning, wherever it is drawn.

A meaning is one colour on every surface: "data" is the same purple for
a DataLoader fetch on the host-spans row, the ops inside it, the GPU idle
time spent waiting for it and an input-bound step in the verdict strip,
and the legend says it once; the same for sync, launch, host, dependency
and unknown. The model's own work is drawn in blues (forward, backward
dark, optimizer light), and a GPU-bound step, which its GPU work bounds, in
the forward blue; copies (memcpy, memset) in teal, never in another
meaning's colour. Red is only for launch lines, which are lines; the
panels' streams are neutral greys, apart from every meaning above.

The colours are chosen to stay apart for readers with deuteranopia and in
greyscale: the fills that share a figure (work, copies, the causes,
user spans, "no op") differ in lightness and in CIELAB after the
Machado 2009 deuteranopia simulation; ``tests/rendering/test_palette.py``
checks both, on the palette and on the legends of drawn figures.
"""

from __future__ import annotations

__all__ = ["PHASES", "PHASE_COLORS", "CAUSE_COLORS", "CAUSE_LABELS", "VERDICT_COLORS",
           "MEANINGS", "FLOW_COLOR", "STEP_COLORS", "USER_COLOR", "STREAM_COLORS",
           "COMPILED_HATCH", "COMPILED_EDGE", "text_color"]

# -- one colour per meaning --------------------------------------------------
DATA = "#7b4a95"        # DataLoader fetch; GPU waiting for it; input-bound
SYNC = "#f8db2d"        # the host blocked on the GPU; GPU idle after it; sync-bound
LAUNCH = "#e69e4e"      # GPU waiting for launches; launch-bound
HOST = "#52a255"        # GPU waiting, the host busy elsewhere; host-bound
DEPENDENCY = "#9e9e9e"  # work queued but waiting (streams, events); dependency-bound
UNKNOWN = "#f1ead7"     # idle or a step whose cause is unknown
COMMUNICATION = "#411b01"
FORWARD = "#0c6dbc"     # forward / other work; a GPU-bound step
MIXED = "#dfc5d7"       # two fixes gain about alike
HOST_ONLY = "#d8d3cb"   # no GPU work to judge

# Phase of an op, by priority (a later one wins): forward is everything
# not claimed by another (the loss, zero_grad...); "no op" is GPU work
# whose launching op is unknown; "copy" is a memcpy or memset on a GPU
# (of any phase).
PHASES = ("forward / other", "backward", "optimizer", "data", "sync", "no op", "copy")
PHASE_COLORS = (FORWARD, "#372a63", "#7ac8de", DATA, SYNC, "#454545", "#1f91a0")
COMPILED_HATCH, COMPILED_EDGE = "////", "#ffffff"  # over a compiled region's rows
CAUSE_COLORS = {"data": DATA, "sync": SYNC, "launch": LAUNCH, "host": HOST,
                "dependency": DEPENDENCY, "unknown": UNKNOWN}
CAUSE_LABELS = {"data": "waiting for data", "sync": "after a sync",
                "launch": "waiting for launches", "host": "host busy elsewhere",
                "dependency": "dependency / latency", "unknown": "unknown cause"}
VERDICT_COLORS = {"GPU-bound": FORWARD, "input-bound": DATA, "sync-bound": SYNC,
                  "launch-bound": LAUNCH, "host-bound": HOST,
                  "dependency-bound": DEPENDENCY, "communication-bound": COMMUNICATION,
                  "mixed": MIXED, "unknown": UNKNOWN, "host-only": HOST_ONLY}
# (one for each of ``analysis.verdicts.margins.VERDICTS``; a test keeps them in step)
# The meanings the legend names once each: meaning -> (colour, what the
# host side drawn in it is, the idle cause of that colour and its words,
# the verdict of that colour).
MEANINGS = {
    "data": (DATA, "DataLoader fetch", "data", "GPU waits for data", "input-bound"),
    "sync": (SYNC, "host waits for GPU", "sync", "GPU idle after a sync", "sync-bound"),
    "launch": (LAUNCH, None, "launch", "GPU waits for launches", "launch-bound"),
    "host": (HOST, None, "host", "GPU waits, host busy", "host-bound"),
    "dependency": (DEPENDENCY, None, "dependency", "GPU waits on a dependency",
                   "dependency-bound"),
    "unknown": (UNKNOWN, None, "unknown", "GPU idle, cause unknown", "unknown"),
}
FLOW_COLOR = "#e00000"
STEP_COLORS = ("#e4e4e4", "#f4f4f4")
USER_COLOR = "#936f68"
STREAM_COLORS = ("#1f1f1f", "#8c8c8c", "#555555", "#bcbcbc")


def text_color(hex_color: str) -> str:
    """Dark text on a light fill, white on a dark one (by luminance)."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#222222" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"
