"""palette.py and the lanes' legend (frame.py): one colour per meaning, a legend of
what is on the figure only (at most 8 entries), colours that stay apart in
greyscale and for a reader with deuteranopia — checked on the palette and on the
rendered PNG, through the Machado et al. (2009) deuteranopia simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cutimeline.analysis.verdicts.margins import BY_CAUSE, VERDICTS
from cutimeline.rendering.figure import plot
from cutimeline.rendering.palette import (CAUSE_COLORS, FLOW_COLOR, MEANINGS, PHASE_COLORS,
                                          PHASES, STEP_COLORS, STREAM_COLORS, USER_COLOR,
                                          VERDICT_COLORS)
from cutimeline.timeline.schema import GpuKind, OpFlag

from figurepixels import colour_columns, column, known_gaps, lane_row, render

# Machado, Oliveira & Fernandes (2009), "A physiologically-based model for
# simulation of color vision deficiency", deuteranopia at severity 1.0: a
# matrix on linear RGB.
DEUTERANOPIA = np.array([[0.367322, 0.860646, -0.227968],
                         [0.280085, 0.672501, 0.047413],
                         [-0.011820, 0.042940, 0.968881]])
# sRGB (D65) linear RGB -> XYZ
XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                [0.0193, 0.1192, 0.9505]])
WHITE = np.array([0.95047, 1.0, 1.08883])


def linear(rgb8: np.ndarray) -> np.ndarray:
    c = np.asarray(rgb8, np.float64) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def encoded(lin: np.ndarray) -> np.ndarray:
    lin = np.clip(lin, 0, 1)
    c = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055)
    return np.rint(c * 255).astype(np.uint8)


def deuteranopia(img: np.ndarray) -> np.ndarray:
    """An RGB image (uint8, ..., 3) as a deuteranope sees it (uint8)."""
    return encoded(linear(img) @ DEUTERANOPIA.T)


def lab(rgb8: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of uint8 RGB (..., 3)."""
    t = (linear(rgb8) @ XYZ.T) / WHITE
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]),
                     200 * (f[..., 1] - f[..., 2])], -1)


def rgb8(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], np.uint8)


def distances(colours: dict[str, np.ndarray]) -> dict[tuple, tuple[float, float, float]]:
    """Per pair: ΔE (CIE76) as seen, ΔE after deuteranopia, ΔL* in greyscale."""
    seen = {k: lab(v) for k, v in colours.items()}
    deut = {k: lab(deuteranopia(v)) for k, v in colours.items()}
    return {(a, b): (float(np.linalg.norm(seen[a] - seen[b])),
                     float(np.linalg.norm(deut[a] - deut[b])),
                     float(abs(seen[a][0] - seen[b][0])))
            for a, b in itertools.combinations(colours, 2)}


# the fills that share figures: the model's work, copies, "no op", the causes
# (which are the verdicts' colours too) and user spans
SHARED = {**{p: rgb8(c) for p, c in zip(PHASES, PHASE_COLORS) if p not in ("data", "sync")},
          **{c: rgb8(v) for c, v in CAUSE_COLORS.items()}, "user": rgb8(USER_COLOR)}
# the strip's verdicts of no cause; host-only is drawn for a Timeline without
# GPU work, where no idle cause and no "unknown" can be
RARE = {v: rgb8(VERDICT_COLORS[v]) for v in ("communication-bound", "mixed", "host-only")}
NEVER_TOGETHER = {("host-only", "unknown"), ("unknown", "host-only")}


def test_the_palette_stays_apart_in_greyscale_and_for_deuteranopes():
    d = distances(SHARED)
    worst = {k: min(d.items(), key=lambda kv: kv[1][i]) for i, k in
             enumerate(("seen", "deuteranopia", "greyscale"))}
    assert worst["seen"][1][0] >= 20, worst
    assert worst["deuteranopia"][1][1] >= 15, worst
    assert worst["greyscale"][1][2] >= 4.5, worst
    for (a, b), (seen, deut, _) in distances({**SHARED, **RARE}).items():
        if (a, b) not in NEVER_TOGETHER:
            assert seen >= 9 and deut >= 9, (a, b, seen, deut)


def test_one_colour_per_meaning():
    # a verdict is drawn in the colour of the cause it names, and the host
    # side of that cause (the fetch, the ops waiting) in the same colour
    for cause, verdict in BY_CAUSE.items():
        if cause in CAUSE_COLORS:   # communication is a verdict's alone: no idle shading
            assert VERDICT_COLORS[str(verdict)] == CAUSE_COLORS[cause]
    assert PHASE_COLORS[PHASES.index("data")] == CAUSE_COLORS["data"] == MEANINGS["data"][0]
    assert PHASE_COLORS[PHASES.index("sync")] == CAUSE_COLORS["sync"] == MEANINGS["sync"][0]
    assert VERDICT_COLORS["GPU-bound"] == PHASE_COLORS[PHASES.index("forward / other")]
    assert set(VERDICT_COLORS) == set(VERDICTS)
    # otherwise every meaning has a colour of its own: copies are not sync's
    meanings = {**{p: c for p, c in zip(PHASES, PHASE_COLORS)}, **CAUSE_COLORS,
                **{v: VERDICT_COLORS[v] for v in RARE}, "user": USER_COLOR,
                "launch line": FLOW_COLOR, "step": STEP_COLORS[0], "step'": STEP_COLORS[1]}
    same = {"data": "data", "sync": "sync"}   # phase and cause: one meaning
    by_colour: dict[str, set] = {}
    for m, c in meanings.items():
        by_colour.setdefault(c.lower(), set()).add(same.get(m, m))
    assert all(len(ms) == 1 for ms in by_colour.values()), by_colour
    assert not set(STREAM_COLORS) & set(by_colour)   # the panels' lines: neutral greys


def legend_swatches(fig, img):
    """(label, [RGB of each swatch's centre in ``img``]) of the lanes' legend."""
    from matplotlib.patches import Rectangle
    legend = fig.legends[0]
    renderer = fig.canvas.get_renderer()
    h = img.shape[0]
    out = []
    # the legend's packing: columns of rows, each row (swatches, text)
    rows = [row for col in legend._legend_handle_box.get_children()
            for row in col.get_children()]
    for row in rows:
        swatches, text = row.get_children()
        rgbs = []
        for r in swatches.findobj(Rectangle):
            if r.get_width() <= 0:
                continue
            (x0, y0), (x1, y1) = r.get_window_extent(renderer).get_points()
            rgbs.append(img[int(h - (y0 + y1) / 2), int((x0 + x1) / 2)])
        out.append((text.get_children()[0].get_text(), rgbs))
    return out


@pytest.fixture(scope="module")
def demo_figure():
    from cutimeline.demo import run_demo
    tl = run_demo(steps=3, device="sim").timeline
    fig = plot(tl, dpi=150)
    return fig, render(fig)


def test_the_legend_holds_what_is_drawn_once_and_reads_for_deuteranopes(demo_figure):
    fig, img = demo_figure
    entries = legend_swatches(fig, img)
    labels = [label for label, _ in entries]
    assert 4 <= len(entries) <= 8, labels
    assert len(set(labels)) == len(labels)
    text = " ".join(labels)
    for word in ("forward", "DataLoader fetch", "input-bound", "GPU idle after a sync",
                 "copy (memcpy, memset)", "launch → start of GPU work"):
        assert word in text, (word, labels)
    assert "step" not in labels   # the steps are named in their row
    # every swatch is a palette colour, drawn exactly
    palette = {tuple(rgb8(c)) for c in (*PHASE_COLORS, *CAUSE_COLORS.values(),
                                        *VERDICT_COLORS.values(), USER_COLOR, FLOW_COLOR)}
    fills = {f"{label}:{i}": rgb for label, rgbs in entries for i, rgb in enumerate(rgbs)}
    assert all(tuple(v) in palette for v in fills.values()), fills
    # the legend's colours, read off the PNG and off its deuteranopia render
    seen = {k: lab(v) for k, v in fills.items()}
    simulated = deuteranopia(img)
    d = {k: lab(simulated[tuple(np.argwhere((img == v).all(-1))[0])]) for k, v in fills.items()}
    pairs = list(itertools.combinations(fills, 2))
    assert min(float(np.linalg.norm(seen[a] - seen[b])) for a, b in pairs) >= 20
    assert min(float(np.linalg.norm(d[a] - d[b])) for a, b in pairs) >= 15
    assert min(abs(float(seen[a][0] - seen[b][0])) for a, b in pairs) >= 4.5


def test_the_known_gaps_legend_names_each_cause_once():
    fig = plot(known_gaps(), flows=0)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) <= 8
    joined = " | ".join(labels)
    for idle, _ in ((MEANINGS[c][3], c) for c in ("data", "sync", "launch", "dependency")):
        assert joined.count(idle) == 1, (idle, labels)
    assert "DataLoader fetch" in joined and "forward" in joined


def test_copies_have_their_own_colour_not_syncs():
    """A blocking host-to-device copy (a sync op whose work is a copy) and an
    imported memcpy row are drawn in the copy colour on the GPU lane, not in
    the sync colour of the host's wait."""
    base = known_gaps()
    strings = list(base.strings) + ["aten::copy_"]
    names = base.ops["name"].copy()
    names[5] = len(strings) - 1                 # D (stream 0, 71.01-90 ms): a copy
    flags = base.ops["flags"].copy()
    flags[5] |= int(OpFlag.SYNC)                # ... that blocks the host
    kinds = base.gpu["kind"].copy()
    kinds[3] = GpuKind.MEMCPY                   # F's row (stream 1, 50.01-55 ms): a memcpy
    tl = type(base)({"ops": {**base.ops.columns, "name": names, "flags": flags},
                     "gpu": {**base.gpu.columns, "kind": kinds},
                     "spans": base.spans, "syncs": base.syncs}, strings, base.meta)
    fig = plot(tl, flows=0)
    img = render(fig)
    ax = fig.axes[0]
    copy = PHASE_COLORS[PHASES.index("copy")]
    s0 = colour_columns(img, lane_row(fig, ax, "GPU0 stream 0"), copy)
    assert np.isin(np.arange(column(ax, 73), column(ax, 88)), s0).all()
    s1 = colour_columns(img, lane_row(fig, ax, "GPU0 stream 1"), copy)
    assert np.isin(np.arange(column(ax, 51), column(ax, 54)), s1).all()
    sync = colour_columns(img, lane_row(fig, ax, "CPU thread 0 (MainThread)"),
                          CAUSE_COLORS["sync"])
    assert np.isin(np.arange(column(ax, 70.2), column(ax, 70.8)), sync).all()
    assert "copy (memcpy, memset)" in [t.get_text() for t in fig.legends[0].get_texts()]
