"""memory.py: the memory panel under the lanes.

On ``test_figure``'s hand-built Timeline (steps [0, 50) and [50, 100) ms)
with memory readings of known values added: the panel is there only with
readings, draws each device's bytes in use as the largest value per pixel
column, and labels its peak.
"""

from __future__ import annotations

import numpy as np
import pytest

from cutimeline.errors import CutimelineError
from cutimeline.rendering.figure import plot
from cutimeline.timeline.schema import NONE
from cutimeline.timeline.timeline import Timeline

from figurepixels import T0, known_gaps

GIB, MIB = 2**30, 2**20


def with_memory(readings) -> Timeline:
    """known_gaps with memory rows (ms, device, bytes in use)."""
    tl = known_gaps()
    n = len(readings)
    memory = {"op": np.full(n, NONE), "device": [r[1] for r in readings],
              "host_ns": [T0 + int(r[0] * 1e6) for r in readings],
              "allocated": np.zeros(n), "freed": np.zeros(n),
              "in_use": [r[2] for r in readings]}
    tables = {t: tl.table(t).columns for t in ("ops", "gpu", "spans", "syncs")}
    return Timeline({**tables, "memory": memory}, list(tl.strings), dict(tl.meta))


# a 3.5 GiB spike 1 µs long at 30 ms: far narrower than a pixel
READINGS = [(10, 0, 1 * GIB), (30, 0, 3 * GIB + 512 * MIB), (30.001, 0, 1 * GIB),
            (45, 0, 2 * GIB), (80, 0, GIB // 2)]


@pytest.fixture(scope="module")
def tl():
    return with_memory(READINGS)


def panel_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_the_panel_draws_bytes_in_use_with_the_peak_marked(tl):
    fig = plot(tl, flows=0)
    assert len(fig.axes) == 5
    ax = fig.axes[4]
    assert ax.get_ylabel() == "GPU memory (GiB)"
    (line,) = ax.lines
    x, y = line.get_xdata(), line.get_ydata()
    # nothing before the first reading; the spike survives the per-column max
    assert np.isnan(y[x < 9.9]).all() and not np.isnan(y[x > 10.1]).any()
    assert np.nanmax(y) == 3.5
    at = np.searchsorted(x, 30.0, side="right") - 1
    assert y[at] == 3.5 and y[np.searchsorted(x, 31.0)] == 1.0
    assert y[-1] == 0.5
    assert panel_texts(ax) == ["peak 3.5 GiB"]
    assert ax.texts[0].xy == (pytest.approx(30.0), 3.5)
    # between the lanes and the queue depth
    lanes, queue = fig.axes[0].get_position(), fig.axes[1].get_position()
    pos = ax.get_position()
    assert queue.y1 < pos.y0 and pos.y1 < lanes.y0


def test_a_window_shows_its_own_peak_and_the_value_held_into_it(tl):
    fig = plot(tl, window=(0.05, 0.1), flows=0)
    ax = fig.axes[4]
    assert panel_texts(ax) == ["peak 2 GiB"]   # held from 45 ms into [50, 100)
    assert ax.texts[0].xy[0] == 0.0
    y = ax.lines[0].get_ydata()
    assert not np.isnan(y).any() and y.max() == 2.0


def test_the_overview_keeps_the_panel(tl):
    fig = plot(tl, flows=0, overview=True)
    assert fig.cutimeline_overview and len(fig.axes) == 5
    assert panel_texts(fig.axes[4]) == ["peak 3.5 GiB"]


def test_one_line_and_peak_per_device_in_mib_when_small():
    tl = with_memory([(5, 0, 100 * MIB), (20, 1, 300 * MIB), (60, 0, 50 * MIB)])
    ax = plot(tl, flows=0).axes[4]
    assert ax.get_ylabel() == "GPU memory (MiB)"
    assert [ln.get_label() for ln in ax.lines] == ["GPU0", "GPU1"]
    assert panel_texts(ax) == ["GPU0 peak 100 MiB", "GPU1 peak 300 MiB"]


def test_no_readings_no_panel_and_the_option_is_checked(tl):
    plain = known_gaps()
    assert len(plot(plain, flows=0).axes) == 4
    assert len(plot(tl, flows=0, memory=False).axes) == 4
    with pytest.raises(CutimelineError, match="no memory readings.*ctl.record"):
        plot(plain, memory=True)
    with pytest.raises(CutimelineError, match="memory='yes' must be True, False or None"):
        plot(tl, memory="yes")
