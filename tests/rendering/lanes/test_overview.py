"""The overview of dense windows: chosen by density, and true to the report.

Above ``ROWS_PER_PX`` GPU rows per pixel column of the lanes the GPU lanes
are drawn as per-column bands; the bands' totals must give back the
report's busy and idle-by-cause time (binning moves time between columns,
never adds or loses it).
"""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import LineCollection

from cutimeline.alignment.aligner import align
from cutimeline.analysis.analyzer import analyze
from cutimeline.analysis.idle.gaps import CAUSES
from cutimeline.devices.sim import synthetic_events
from cutimeline.errors import CutimelineError
from cutimeline.rendering import pixels as px
from cutimeline.rendering.figure import plot
from cutimeline.rendering.lanes.overview import ROWS_PER_PX, column_shares
from cutimeline.rendering.palette import FLOW_COLOR, PHASE_COLORS
from cutimeline.rendering.lanes.scene import OVERVIEW_FLOW_PX, Scene


@pytest.fixture(scope="module")
def sim():
    return align(synthetic_events(20_000, streams=3))


def test_overview_above_the_density_threshold_and_not_below(sim):
    rep = analyze(sim)
    fig = plot(sim, flows=0, report=rep)
    width = fig.axes[0].bbox.width
    assert len(sim.gpu) > ROWS_PER_PX * width
    assert fig.cutimeline_overview
    assert "overview" in fig.texts[-1].get_text()
    # a short window holds fewer rows than the threshold: bar by bar
    span = (sim.end_ns - sim.start_ns) / 1e9
    fig = plot(sim, window=(0.0, span / 20), flows=0, report=rep)
    assert not fig.cutimeline_overview
    assert "overview" not in fig.texts[-1].get_text()
    # and a wider figure has room for more rows
    small = align(synthetic_events(2_000, streams=3))
    assert not plot(small, flows=0).cutimeline_overview
    assert plot(small, flows=0, overview=True).cutimeline_overview
    assert not plot(sim, flows=0, overview=False, report=rep).cutimeline_overview
    with pytest.raises(CutimelineError, match="overview='yes' must be True, False or None"):
        plot(sim, overview="yes")


def test_bands_add_up_to_the_reports_busy_and_idle_time(sim):
    rep = analyze(sim)
    scene = Scene(sim, report=rep)
    cols = px.Columns(scene.w0, scene.w1, 900)
    busy, idle = column_shares(scene, cols)
    width_ns = np.diff(cols.time(np.arange(cols.width + 1)))
    assert busy.sum(axis=1).max() <= 1 + 1e-9
    assert (busy.sum(axis=1) + idle.sum(axis=1)).max() <= 1 + 1e-6
    st = rep.streams
    for k, (d, s) in enumerate(scene.keys):
        row = st[(st["device"] == d) & (st["stream"] == s)][0]
        assert (busy[k] * width_ns).sum() == pytest.approx(row["busy_ns"], rel=1e-9)
        if not scene.side[k]:
            for j, c in enumerate(CAUSES):
                assert (idle[k, j] * width_ns).sum() == pytest.approx(row[f"{c}_ns"],
                                                                       rel=1e-9, abs=1)


def test_overview_lanes_show_work_from_the_bottom(sim):
    from figurepixels import lane_row, render, rgb
    fig = plot(sim, flows=0)
    img = render(fig)
    ax = fig.axes[0]
    lane_px = abs(ax.transData.transform((0, 0))[1] - ax.transData.transform((0, 1))[1])
    for lane in ("GPU0 stream 0", "GPU0 stream 1", "GPU0 stream 2"):
        bottom = lane_row(fig, ax, lane) + int(0.4 * lane_px)
        x0, x1 = (int(v) for v in ax.bbox.intervalx)
        work = np.all(img[bottom, x0 + 2:x1 - 2] == rgb(PHASE_COLORS[0]), axis=1)
        assert work.mean() > 0.9, lane


def test_overview_thins_launch_lines(sim):
    fig = plot(sim)
    (lines,) = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)
                and np.allclose(c.get_colors()[0][:3],
                                [int(FLOW_COLOR[i:i + 2], 16) / 255 for i in (1, 3, 5)])]
    assert 0 < len(lines.get_segments()) <= fig.axes[0].bbox.width // OVERVIEW_FLOW_PX
