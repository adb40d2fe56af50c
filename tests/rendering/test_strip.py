"""The verdict strip and the title block: the figure answers first.

On the hand-built Timeline of ``test_figure`` (two steps whose verdicts
the analysis gives: mixed and sync-bound) and on the demo's
simulated loop: one cell per step over its device window, in its
verdict's colour, labelled where wide; the title states the window and
the run's verdict line.
"""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex
from numpy.lib import recfunctions

from cutimeline.analysis.analyzer import analyze
from cutimeline.analysis.verdicts.margins import VERDICTS
from cutimeline.rendering.figure import plot
from cutimeline.rendering.palette import VERDICT_COLORS
from cutimeline.rendering.strip import STRIP_LABEL, compute_text, verdict_line
from cutimeline.timeline.schema import SpanKind
from cutimeline.text import fmt_mfu
from cutimeline.timeline.timeline import Timeline

from figurepixels import T0, known_gaps, render, rgb


@pytest.fixture(scope="module")
def tl():
    return known_gaps()


def strip_cells(fig):
    """(x0 ms, x1 ms, colour) of each cell of the strip (fig.axes[3])."""
    ax = fig.axes[3]
    assert [t.get_text() for t in ax.get_yticklabels()] == [STRIP_LABEL]
    (cells,) = ax.collections
    xs = [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in cells.get_paths()]
    return [(a, b, to_hex(c)) for (a, b), c in zip(xs, cells.get_facecolors())]


def test_every_verdict_has_its_own_colour():
    assert set(VERDICT_COLORS) == set(VERDICTS)
    assert len(set(VERDICT_COLORS.values())) == len(VERDICTS)


def test_one_cell_per_step_over_its_device_window_in_its_verdict_colour(tl):
    rep = analyze(tl)
    fig = plot(tl, flows=0, report=rep)
    cells = strip_cells(fig)
    assert len(cells) == len(rep.steps) == 2
    gap = fig.axes[0].get_xlim()[1] / fig.axes[0].bbox.width  # the pixel between cells
    for (x0, x1, color), s in zip(cells, rep.steps):
        assert x0 == pytest.approx((s["begin_ns"] - T0) / 1e6 + gap)
        assert x1 == pytest.approx((s["end_ns"] - T0) / 1e6)
        assert color == VERDICT_COLORS[s["verdict"]]
    # and the colour is on the canvas, in the strip's row
    img = render(fig)
    ax = fig.axes[3]
    h = fig.canvas.get_width_height()[1]
    row = int(round(h - ax.transData.transform((0, 0))[1]))
    for x0, x1, color in cells:
        # just inside the cell's left edge, clear of the centred label
        left = int(np.ceil(ax.transData.transform((x0, 0))[0])) + 2
        assert (img[row, left:left + 5] == rgb(color)).all(), (img[row, left], color)


def test_wide_cells_carry_step_time_and_busy(tl):
    rep = analyze(tl)
    texts = [t.get_text() for t in plot(tl, flows=0, report=rep).axes[3].texts]
    assert texts == ["step 0 · mixed · 60 ms · GPU 72%",
                     "step 1 · sync-bound · 30 ms · GPU 63%"]
    # narrower: shorter labels, or none, never one wider than its cell
    narrow = [t.get_text() for t in plot(tl, flows=0, width=6).axes[3].texts]
    assert narrow and all(len(a) < len(b) for a, b in zip(narrow, texts))
    assert all("ms" in t for t in narrow)


def test_window_draws_the_cells_it_meets(tl):
    fig = plot(tl, window=1, flows=0)
    cells = strip_cells(fig)
    # step 1's device window begins at 60 ms, 10 ms into the window of step 1
    # (host 50-100 ms); step 0's runs to 60 ms, so its end shows too
    assert [c[2] for c in cells] == [VERDICT_COLORS["mixed"], VERDICT_COLORS["sync-bound"]]
    assert cells[1][0] == pytest.approx(10.0, abs=0.1)


def test_title_states_the_window_and_the_run_verdict(tl):
    rep = analyze(tl)
    line = verdict_line(rep)
    # the run's verdict with its fix, short: the summary's first sentence says
    # the same verdict and gain at length
    first = rep.summary().splitlines()[0]
    assert line == ("Verdict: host-bound: −30% with the Python between ops moved out of the "
                    "step (steps 0–1)")
    assert first.startswith("Verdict: host-bound — the Python between ops moved out of the "
                            "step would save a predicted 30% of the step")
    for window, words in ((None, "the whole recording"), (1, "step 1"),
                          ((0, 1), "steps 0–1"), ((0.02, 0.045), "0.02–0.045 s")):
        texts = [t.get_text() for t in plot(tl, window=window, flows=0, report=rep).texts]
        assert texts[0].endswith(f" — {words}"), texts[0]
        assert line in texts
    texts = [t.get_text() for t in plot(tl, flows=0, title="my run").texts]
    assert texts[0] == "my run — the whole recording"


def test_a_given_axes_gets_window_and_verdict_in_its_title(tl):
    from matplotlib.figure import Figure
    ax = Figure(figsize=(10, 4)).add_subplot()
    plot(tl, ax=ax, window=(0, 1))
    title = ax.get_title(loc="left")
    assert "steps 0–1" in title and "Verdict: host-bound" in title


def test_imported_trace_without_steps_is_drawn_first_to_last_device_activity(tl):
    s = tl.spans
    keep = {c: s[c][s.kind != SpanKind.STEP] for c in s.columns}
    imported = tl.replace(spans=keep, meta={**tl.meta, "source": "kineto"})
    fig = plot(imported, flows=0)
    assert fig.texts[0].get_text().endswith("— first to last device activity")
    g = tl.gpu
    assert fig.axes[0].get_xlim()[1] == pytest.approx((g.end_ns.max() - g.begin_ns.min()) / 1e6)
    # one cell, the overall verdict, saying there are no steps
    (cell,) = strip_cells(fig)
    rep = analyze(imported)
    assert cell[2] == VERDICT_COLORS[rep.overall["verdict"]]
    assert fig.axes[3].texts[0].get_text().startswith("no steps — ")
    # a recording without steps still shows all of itself
    recorded = tl.replace(spans=keep)
    assert plot(recorded, flows=0).texts[0].get_text().endswith("— the whole recording")


def test_many_narrow_steps_merge_per_pixel_by_verdict(tl):
    from cutimeline.alignment.aligner import align
    from cutimeline.devices.sim import synthetic_events
    sim = align(synthetic_events(20_000, streams=2))
    b = np.sort(sim.ops.host_begin_ns[::10])  # 2,000 steps of 10 ops
    e = np.append(b[1:], sim.ops.host_end_ns.max())
    n = len(b)
    spans = {"kind": np.full(n, int(SpanKind.STEP)), "name": np.full(n, -1),
             "thread": np.zeros(n, np.int64), "depth": np.zeros(n, np.int64),
             "number": np.arange(n), "begin_ns": b, "end_ns": e}
    stepped = sim.replace(spans=spans)
    fig = plot(stepped, flows=0)
    cells = strip_cells(fig)
    assert 0 < len(cells) < fig.axes[3].bbox.width  # merged, not 2,000 cells
    assert fig.axes[3].texts == [] or all(len(t.get_text()) < 20 for t in fig.axes[3].texts)


# -- FLOPs: achieved TFLOP/s and MFU in the cells ---------------------------------
def with_compute(rep, flops, mfu, rate=None):
    """The report's step table with the analysis's FLOPs fields added."""
    fields = {"flops": np.asarray(flops, float), "mfu": np.asarray(mfu, float)}
    if rate is not None:
        fields["tflop_per_s"] = np.asarray(rate, float)
    rep.steps  # the verdicts first: the rows they are written into
    whole = {k: np.concatenate([[np.nan], v]) for k, v in fields.items()}  # row 0: the window
    rep._rows = recfunctions.append_fields(rep._rows, list(whole), list(whole.values()),
                                           usemask=False)
    return rep


def strip_texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[3].texts]


def test_step_cells_carry_achieved_tflops_and_mfu():
    tl = known_gaps()
    rep = with_compute(analyze(tl), [5e12, 0.0], [0.41, np.nan])
    fig = plot(tl, flows=0, report=rep, width=30)
    first, second = strip_texts(fig)
    seconds = rep.steps["duration_ns"][0] / 1e9
    rate = f"{5e12 / seconds / 1e12:.3g} TFLOP/s"
    assert first.endswith(f" · {rate} · MFU 41%") and first.startswith("step 0 · ")
    assert "TFLOP/s" not in second   # a step without FLOPs gets none


def test_compute_text_reads_the_analysis_fields():
    rep = with_compute(analyze(known_gaps()), [1e12, 1e12], [0.042, np.nan],
                       rate=[41.2, 2.0])
    assert compute_text(rep.steps[0]) == "41.2 TFLOP/s · MFU 4.2%"
    assert compute_text(rep.steps[1]) == "2 TFLOP/s"
    assert compute_text(analyze(known_gaps()).steps[0]) == ""   # no FLOPs fields


def test_the_analysis_flops_reach_the_cells():
    """End to end: the flops table → analyze (with a peak) → the strip."""
    tl = known_gaps()
    tables = {k: tl.table(k).columns for k in ("ops", "gpu", "spans", "syncs")}
    tl = Timeline({**tables, "flops": {"op": [0, 2, 5], "flops": [1e12, 3e12, 2e12]}},
                  list(tl.strings), dict(tl.meta))
    rep = analyze(tl, peak_flops=1e15)
    texts = strip_texts(plot(tl, flows=0, report=rep, width=30))
    for text, step in zip(texts, rep.steps):
        rate = step["flops"] / (step["duration_ns"] / 1e9)
        assert text.endswith(f" · {rate / 1e12:.3g} TFLOP/s · MFU {fmt_mfu(rate / 1e15)}")
