"""ctl.plot / rendering.plot_compare, judged by the pixels they render.

A hand-built Timeline with gaps of known cause (worked out by hand from
the rules in ``gaps.py``) is drawn into an Agg canvas; the tests find the
lanes through the y tick labels and the times through the axes transform,
and read the colours there.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from cutimeline.errors import CutimelineError
from cutimeline.rendering.figure import plot, plot_compare
from cutimeline.rendering.lanes.scene import CAUSE_COLORS, FLOW_COLOR, PHASE_COLORS
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag
from cutimeline.timeline.timeline import Timeline

from figurepixels import T0, colour_columns, column, known_gaps, lane_row, render, rgb

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
KINETO = sorted(glob.glob(os.path.join(DATA, "kineto", "**", "*.json.gz"), recursive=True))


def red_mask(img) -> np.ndarray:
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return (r > 170) & (g < 110) & (b < 110)


@pytest.fixture(scope="module")
def tl():
    return known_gaps()


@pytest.fixture(scope="module")
def drawn(tl):
    fig = plot(tl, flows=0)
    return fig, render(fig)


def test_one_lane_per_thread_and_stream_named(drawn):
    fig, _ = drawn
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["host spans", "CPU thread 0 (MainThread)", "CPU thread 1 (worker)",
                      "GPU0 stream 0", "GPU0 stream 1"]
    assert len(fig.axes) == 4  # lanes, queue depth, CPU lead, verdict strip


@pytest.mark.parametrize("lane, cause, lo, hi", [
    ("GPU0 stream 0", "data", 20.0, 30.0),
    ("GPU0 stream 0", "data", 35.0, 40.0),
    ("GPU0 stream 0", "launch", 40.0, 41.01),
    ("GPU0 stream 0", "sync", 60.0, 71.01),
    ("GPU0 stream 1", "dependency", 20.0, 30.0),
])
def test_gap_shading_where_the_cause_is(drawn, lane, cause, lo, hi):
    fig, img = drawn
    ax = fig.axes[0]
    # the shading spans the lane beyond the work boxes: read above the box
    row = lane_row(fig, ax, lane) - int(0.42 * abs(ax.transData.transform((0, 0))[1]
                                                   - ax.transData.transform((0, 1))[1]))
    cols = colour_columns(img, row, CAUSE_COLORS[cause])
    a, b = column(ax, lo), column(ax, hi)
    inner = np.arange(a + 2, b - 1)
    assert len(inner) > 0 and np.isin(inner, cols).all(), (cause, a, b, cols[:5])
    # and nowhere else on this lane, give or take a column at each end
    if cause not in ("launch", "data"):  # those two show twice on the lane
        assert ((cols >= a - 1) & (cols <= b + 1)).all()


def test_idle_beside_a_busy_stream_is_left_unshaded(drawn):
    # stream 1 idles over [1.01, 20) and stream 0 over [30, 35) while the
    # other stream runs: the device was busy, so no cause colour is there
    fig, img = drawn
    ax = fig.axes[0]
    half = int(0.42 * abs(ax.transData.transform((0, 0))[1] - ax.transData.transform((0, 1))[1]))
    for lane, lo, hi in (("GPU0 stream 1", 1.01, 20.0), ("GPU0 stream 0", 30.0, 35.0)):
        row = lane_row(fig, ax, lane) - half
        inner = np.arange(column(ax, lo) + 2, column(ax, hi) - 1)
        for c in CAUSE_COLORS.values():
            assert not np.isin(inner, colour_columns(img, row, c)).any(), (lane, c)


def test_gap_colours_appear_only_where_expected(drawn):
    fig, img = drawn
    ax = fig.axes[0]
    row = lane_row(fig, ax, "GPU0 stream 0")
    cols = colour_columns(img, row, CAUSE_COLORS["data"])
    assert cols.min() >= column(ax, 20.0) - 1 and cols.max() <= column(ax, 40.0) + 1
    assert len(colour_columns(img, row, CAUSE_COLORS["dependency"])) == 0
    # work in the lane's centre: the kernel [41.01, 60) is drawn in its op's
    # phase colour (forward / other)
    work = colour_columns(img, row, PHASE_COLORS[0])
    assert np.isin(np.arange(column(ax, 42), column(ax, 59)), work).all()


def test_sync_op_is_drawn_in_the_sync_colour(drawn):
    fig, img = drawn
    ax = fig.axes[0]
    cols = colour_columns(img, lane_row(fig, ax, "CPU thread 0 (MainThread)"), PHASE_COLORS[4])
    assert np.isin(np.arange(column(ax, 42), column(ax, 61)), cols).all()


def test_red_flow_lines_join_cpu_and_gpu_lanes(tl):
    fig = plot(tl)
    img = render(fig)
    ax = fig.axes[0]
    top = lane_row(fig, ax, "CPU thread 1 (worker)")
    bottom = lane_row(fig, ax, "GPU0 stream 0")
    band = red_mask(img)[top + (bottom - top) // 2 - 2: top + (bottom - top) // 2 + 3]
    assert band.any()
    # the launch of B at 41 ms reaches its kernel at 41.01 ms: a near-vertical
    # red line there
    x = column(ax, 41.0)
    assert band[:, x - 3:x + 4].any()
    # without flow lines there is no red anywhere in the lanes
    fig = plot(tl, flows=0)
    x0, y0, x1, y1 = fig.axes[0].bbox.extents
    h = fig.canvas.get_width_height()[1]
    assert not red_mask(render(fig))[int(h - y1):int(h - y0), int(x0):int(x1)].any()


def test_flows_are_thinned_evenly(tl):
    from matplotlib.collections import LineCollection
    fig = plot(tl, flows=2)
    lines = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)
             and np.allclose(c.get_colors()[0][:3], rgb(FLOW_COLOR) / 255)]
    assert len(lines) == 1 and len(lines[0].get_segments()) == 2


def test_window_selects_the_x_range(tl):
    fig = plot(tl, window=1, flows=0)
    ax = fig.axes[0]
    assert ax.get_xlim() == pytest.approx((0, 50.0))
    assert "50.000 ms into" in fig.axes[2].get_xlabel()
    img = render(fig)
    # the data gap (20–40 ms) lies in step 0: not shown
    assert len(colour_columns(img, lane_row(fig, ax, "GPU0 stream 0"),
                              CAUSE_COLORS["data"])) == 0
    # the sync gap began at 60 ms: 10 ms into step 1
    sync = colour_columns(img, lane_row(fig, ax, "GPU0 stream 0"), CAUSE_COLORS["sync"])
    assert abs(sync.min() - column(ax, 10.0)) <= 1
    fig = plot(tl, window=(0.02, 0.045), flows=0)
    assert fig.axes[0].get_xlim() == pytest.approx((0, 25.0))
    assert plot(tl, window=(0, 1), flows=0).axes[0].get_xlim() == pytest.approx((0, 100.0))


def test_files_by_extension(tl, tmp_path):
    heads = {"png": b"\x89PNG", "pdf": b"%PDF", "svg": b"<?xml"}
    for ext, head in heads.items():
        p = tmp_path / f"t.{ext.upper() if ext == 'pdf' else ext}"
        fig = plot(tl, p)
        assert p.read_bytes()[:len(head)] == head
    assert b"<svg" in (tmp_path / "t.svg").read_bytes()[:2000]
    from PIL import Image
    with Image.open(tmp_path / "t.png") as im:
        assert im.size == fig.canvas.get_width_height()


def test_draws_into_a_given_axes(tl, tmp_path):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    assert plot(tl, ax=ax, window=0) is fig
    assert len(fig.axes) == 1
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "GPU0 stream 1"
    assert ax.get_xlim() == pytest.approx((0, 50.0))
    assert ax.get_legend() is not None
    fig = Figure(figsize=(10, 4))
    plot(tl, tmp_path / "ax.png", ax=fig.add_subplot())
    assert (tmp_path / "ax.png").read_bytes()[:4] == b"\x89PNG"


def test_title_says_simulated(tl):
    from cutimeline.alignment.aligner import align
    from cutimeline.devices.sim import synthetic_events
    sim = align(synthetic_events(3000, streams=3))
    fig = plot(sim)
    texts = [t.get_text() for t in fig.texts]
    assert texts[0].startswith("SIMULATED")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [s for s in labels if s.startswith("GPU")] == \
        ["GPU0 stream 0", "GPU0 stream 1", "GPU0 stream 2"]
    assert not any("SIMULATED" in t.get_text() for t in plot(tl).texts)


def test_every_lane_of_a_busy_timeline_has_work_drawn():
    from cutimeline.alignment.aligner import align
    from cutimeline.devices.sim import synthetic_events
    sim = align(synthetic_events(20_000, streams=3))
    fig = plot(sim, flows=0)
    img = render(fig)
    ax = fig.axes[0]
    for label in ("CPU thread 0", "GPU0 stream 0", "GPU0 stream 1", "GPU0 stream 2"):
        row = img[lane_row(fig, ax, label)]
        painted = np.isin(row.reshape(-1, 1, 3), [rgb(c) for c in PHASE_COLORS]).all(-1).any(-1)
        assert painted.sum() > 0.5 * ax.bbox.width, label


@pytest.mark.parametrize("path", KINETO, ids=[os.path.basename(p) for p in KINETO])
def test_every_kineto_trace_plots(path):
    from cutimeline.formats.kineto import import_chrome
    tl = import_chrome(path)
    fig = plot(tl)
    img = render(fig)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    streams = set(zip(tl.gpu.device.tolist(), tl.gpu.stream.tolist()))
    assert len([s for s in labels if s.startswith("GPU")]) == len(streams)
    assert sum(s.startswith("CPU ") for s in labels) == len(np.unique(tl.ops.thread))
    assert img.std() > 0 and "torch.profiler trace" in fig.texts[0].get_text()


def test_compare_stacks_two_timelines_on_one_axis(tl, tmp_path):
    later = known_gaps(t0=T0 + 3 * 10**9)  # the same run, 3 s later
    fig = plot_compare(tl, later, tmp_path / "c.png", labels=("first", "later"))
    assert (tmp_path / "c.png").exists()
    a, b = fig.axes[:2]
    assert len(fig.axes) == 4
    assert a.get_xlim() == b.get_xlim() == pytest.approx((0, 100.0))
    assert a.get_title(loc="left") == "a: first" and b.get_title(loc="left") == "b: later"
    img = render(fig)
    # each from its own start: the sync gap at 60 ms shows at 60 ms in both
    for ax in (a, b):
        sync = colour_columns(img, lane_row(fig, ax, "GPU0 stream 0"), CAUSE_COLORS["sync"])
        assert abs(sync.min() - column(ax, 60.0)) <= 1
    # a window applies to both, each from the start of its own step 1
    fig = plot_compare(tl, later, window=1)
    img = render(fig)
    for ax in fig.axes[:2]:
        assert ax.get_xlim() == pytest.approx((0, 50.0))
        sync = colour_columns(img, lane_row(fig, ax, "GPU0 stream 0"), CAUSE_COLORS["sync"])
        assert abs(sync.min() - column(ax, 10.0)) <= 1
    assert fig.axes[0].get_title(loc="left") == "a: test"  # default: the source


@pytest.mark.parametrize("kwargs, words", [
    ({"path": "t.jpg"}, ".png, .svg or .pdf"),
    ({"path": "/no/such/folder/t.png"}, "does not exist"),
    ({"path": 3}, "file name"),
    ({"width": 1}, "width=1"),
    ({"width": "wide"}, "inches"),
    ({"dpi": 0}, "dpi=0"),
    ({"flows": -1}, "flows=-1"),
    ({"flows": True}, "whole number"),
    ({"title": 5}, "title=5"),
    ({"window": "step 3"}, "not understood"),
    ({"window": 7}, "no step 7"),
    ({"window": (5.0, 6.0)}, "outside the Timeline"),
    ({"ax": "axes"}, "matplotlib Axes"),
])
def test_bad_arguments_are_sentences(tl, kwargs, words):
    path = kwargs.pop("path", None)
    with pytest.raises(CutimelineError) as e:
        plot(tl, path, **kwargs)
    msg = str(e.value)
    assert words in msg and msg.endswith(".")


def test_bad_timelines_are_refused():
    from cutimeline.devices.sim import synthetic_events
    with pytest.raises(CutimelineError, match="needs a Timeline"):
        plot("run.ctl")
    with pytest.raises(CutimelineError, match="empty"):
        plot(Timeline())
    with pytest.raises(CutimelineError, match="align"):
        plot(synthetic_events(100))  # gpu rows still on the device clock
    with pytest.raises(CutimelineError, match="plot_compare needs a Timeline"):
        plot_compare(known_gaps(), None)
    with pytest.raises(CutimelineError, match="two strings"):
        plot_compare(known_gaps(), known_gaps(), labels=("one",))


def test_host_only_timeline_plots():
    tl = known_gaps()
    host = tl.replace(gpu={})
    fig = plot(host)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert not any(s.startswith("GPU") for s in labels)
    assert any("no GPU work" in t.get_text() for t in fig.axes[1].texts)


def test_backend_free(tmp_path):
    """plot never imports pyplot, so it cannot touch the user's backend or
    open a window."""
    import subprocess
    import sys
    code = ("import sys; from cutimeline.alignment.aligner import align; "
            "from cutimeline.devices.sim import synthetic_events; "
            "from cutimeline.rendering.figure import plot; "
            f"plot(align(synthetic_events(500)), {str(tmp_path / 'b.png')!r}); "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_gpu_only_timeline_plots():
    tl = known_gaps()
    gpu = tl.gpu.replace(op=np.full(len(tl.gpu), NONE))  # launching ops unknown
    fig = plot(tl.replace(ops={}, syncs={}, gpu=gpu))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["host spans", "GPU0 stream 0", "GPU0 stream 1"]
    img = render(fig)
    no_op = colour_columns(img, lane_row(fig, fig.axes[0], "GPU0 stream 0"), PHASE_COLORS[5])
    assert len(no_op) > 0


def sync_op_with_its_own_work(t0: int = T0) -> Timeline:
    """A sync op S whose own gpu row ends 0.2 ms after the host returned
    from it (its closing event runs after the recorder's bookkeeping), more
    than the 0.1 ms slack: the gap that follows is the sync's all the same
    (``gaps.classify(after_sync=...)``)."""
    def ns(ms: float) -> int:
        return t0 + int(round(ms * 1e6))

    L, S = int(OpFlag.LAUNCH), int(OpFlag.SYNC | OpFlag.LAUNCH)
    ops = [("A", 0.0, 0.5, L, 0), ("S", 20.5, 40.0, S, 0), ("D", 60.0, 61.0, L, 0),
           ("Z", 99.0, 100.0, 0, NONE)]
    strings = ["A", "S", "D", "Z", "item"]
    op_cols = {"seq": np.arange(len(ops)), "name": np.arange(len(ops)),
               "thread": np.zeros(len(ops)), "host_begin_ns": [ns(o[1]) for o in ops],
               "host_end_ns": [ns(o[2]) for o in ops], "flags": [o[3] for o in ops],
               "stream": [o[4] for o in ops],
               "device": [0 if o[4] != NONE else NONE for o in ops]}
    gpu = [(0, 0.5, 0.51, 20.0), (1, 20.5, 21.0, 40.2), (2, 60.0, 60.01, 80.0)]
    gpu_cols = {"op": [g[0] for g in gpu], "device": np.zeros(len(gpu)),
                "stream": np.zeros(len(gpu)), "name": [g[0] for g in gpu],
                "kind": np.full(len(gpu), int(GpuKind.KERNEL)),
                "launch_ns": [ns(g[1]) for g in gpu], "begin_ns": [ns(g[2]) for g in gpu],
                "end_ns": [ns(g[3]) for g in gpu]}
    syncs = {"op": [1], "kind": [4], "device": [0], "stream": [0],
             "host_begin_ns": [ns(30)], "host_end_ns": [ns(40)]}
    return Timeline({"ops": op_cols, "gpu": gpu_cols, "syncs": syncs}, strings,
                    {"source": "test", "aligned": True, "threads": ["MainThread"]})


def test_shading_after_a_sync_ops_own_work_agrees_with_analyze():
    import cutimeline as ctl
    tl = sync_op_with_its_own_work()
    gaps = ctl.analyze(tl).gap_table("stream")
    after = gaps[gaps["begin_ns"] == T0 + 40_200_000]
    assert len(after) == 1 and after["cause"][0] == "sync"
    fig = plot(tl, flows=0)
    img, ax = render(fig), fig.axes[0]
    row = lane_row(fig, ax, "GPU0 stream 0") - int(
        0.42 * abs(ax.transData.transform((0, 0))[1] - ax.transData.transform((0, 1))[1]))
    cols = colour_columns(img, row, CAUSE_COLORS["sync"])
    # the host then runs 20 ms of op-free Python: the sync (S, 20.5–40 ms)
    # owns 19.5 ms of the gap, to 59.7 ms; the last 0.3 ms is the host's
    inner = np.arange(column(ax, 40.2) + 2, column(ax, 59.7) - 1)
    assert np.isin(inner, cols).all()
    assert not np.isin(inner, colour_columns(img, row, CAUSE_COLORS["launch"])).any()


def test_compiled_regions_are_hatched_and_named_in_the_legend():
    base = known_gaps()
    kind = base.gpu["kind"].copy()
    kind[2] = GpuKind.COMPILED  # B's row, stream 0 from 41.01 to 60 ms
    tl = base.replace(gpu={**base.gpu.columns, "kind": kind})
    fig = plot(tl, flows=0)
    ax = fig.axes[0]
    hatched = [c for c in ax.collections if c.get_hatch()]
    assert len(hatched) == 1
    (x0, y0), (x1, y1) = hatched[0].get_paths()[0].get_extents().get_points()
    assert 40.5 < x0 < 41.5 and 59.5 < x1 < 60.5
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "torch.compile region" in labels
    plain = plot(base, flows=0)
    assert not [c for c in plain.axes[0].collections if c.get_hatch()]
    assert "torch.compile region" not in [t.get_text() for lg in plain.legends
                                          for t in lg.get_texts()]


def test_a_wait_no_op_made_is_drawn_on_the_thread_that_waited():
    # torch.cuda.synchronize in the worker thread, 80–85 ms (no op made it),
    # and one of an unknown thread, which two CPU lanes cannot place
    base = known_gaps()
    y = base.syncs.columns
    more = {k: np.r_[v, v[:1], v[:1]] for k, v in y.items()}
    more["op"][1:] = NONE
    more["thread"][1:] = [1, NONE]
    more["host_begin_ns"][1:] = [T0 + 80_000_000, T0 + 90_000_000]
    more["host_end_ns"][1:] = [T0 + 85_000_000, T0 + 95_000_000]
    tl = base.replace(syncs=more)
    fig = plot(tl, flows=0)
    img, ax = render(fig), fig.axes[0]
    worker = colour_columns(img, lane_row(fig, ax, "CPU thread 1 (worker)"), PHASE_COLORS[4])
    main = colour_columns(img, lane_row(fig, ax, "CPU thread 0 (MainThread)"), PHASE_COLORS[4])
    assert np.isin(np.arange(column(ax, 80.2), column(ax, 84.8)), worker).all()
    assert not np.isin(np.arange(column(ax, 80.2), column(ax, 84.8)), main).any()
    assert not np.isin(np.arange(column(ax, 90.2), column(ax, 94.8)),
                       np.r_[main, worker]).any()
