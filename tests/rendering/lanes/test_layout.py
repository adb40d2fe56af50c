"""Lanes: one arrangement for a single Timeline, one group per rank for a merged one."""

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.rendering.figure import plot
from cutimeline.rendering.lanes.layout import lay_out
from cutimeline.rendering.lanes.scene import STEP_COLORS, Scene

from figurepixels import column, known_gaps, lane_row, render, rgb


def _rank(rank: int):
    with ctl.record(device=ctl.SimGPU(seed=rank), measure=False, steps="manual") as rec:
        a = torch.randn(32, 32, device="meta")
        for _ in range(2):
            (a @ a).sum().item()
            rec.step()
    tl = rec.timeline
    return tl.replace(meta={**tl.meta, "rank": rank})


@pytest.fixture(scope="module")
def merged():
    return ctl.merge([_rank(0), _rank(1)])


def test_single_timeline_lanes_are_unprefixed():
    tl = known_gaps()
    lay = lay_out(tl, np.array([[0, 0], [0, 1]]))
    assert lay.labels == ["host spans", "CPU thread 0 (MainThread)",
                          "CPU thread 1 (worker)", "GPU0 stream 0", "GPU0 stream 1"]
    assert lay.span_rows == [(0, None)] and lay.groups == [(0, 5)]
    assert lay.host_gpu == [2.5] and lay.devices == []
    assert lay.thread_rank is None


def test_merged_ranks_get_one_lane_group_each(merged):
    scene = Scene(merged)
    labels = scene.labels
    assert labels == ["rank 0 · host spans", "rank 0 · CPU thread 0 (MainThread)",
                      "rank 0 · GPU0 stream 0",
                      "rank 1 · host spans", "rank 1 · CPU thread 1 (MainThread)",
                      "rank 1 · GPU1 stream 0"]
    lay = scene.layout
    assert lay.groups == [(0, 3), (3, 6)] and lay.span_rows == [(0, 0), (3, 1)]
    # every op and gpu row of a rank is drawn inside its rank's group
    t_rank = lay.thread_rank[merged.ops.thread]
    y = scene.thread_y[np.searchsorted(scene.threads, merged.ops.thread)]
    assert np.all((y >= 3) == (t_rank == 1))
    assert sorted(scene.stream_y.tolist()) == [2, 5]


def test_each_ranks_span_row_draws_its_own_steps(merged):
    s = merged.spans
    for rank in (0, 1):
        mine = s.thread == rank    # one thread per rank here
        lo, hi = ((t - merged.start_ns) / 1e9 for t in
                  (s.begin_ns[mine].min(), s.end_ns[mine].max()))
        fig = plot(merged, flows=0, window=(lo, hi))   # this rank's steps
        img, ax = render(fig), fig.axes[0]
        for r in (0, 1):
            row = lane_row(fig, ax, f"rank {r} · host spans") - 5  # steps' half
            grey = np.zeros(img.shape[1], bool)
            for c in STEP_COLORS:
                grey |= np.all(img[row] == rgb(c), axis=1)
            inside = grey[column(ax, 0.0) + 2:column(ax, (hi - lo) * 1e3) - 2]
            if r == rank:
                assert inside.mean() > 0.9, (rank, r)
            else:  # the other rank's steps lie elsewhere in time
                assert inside.mean() < 0.1, (rank, r)


def test_lanes_past_the_budget_share_one_lane_and_the_figure_stays_small():
    # 3,000 host threads drew a 1400 x 126,509 px figure; 300 streams 12,800 px
    from adversarial import many_streams, many_threads
    from cutimeline.rendering.lanes.layout import STREAM_LANES, THREAD_LANES
    threads = many_threads(300)
    lay = lay_out(threads, np.zeros((0, 2), np.int64))
    assert len(lay.labels) == THREAD_LANES
    assert lay.labels[-1] == f"CPU: {300 - THREAD_LANES + 1} more threads"
    assert (lay.thread_y[THREAD_LANES - 1:] == THREAD_LANES - 1).all()
    fig = plot(threads, width=8, dpi=50)
    assert fig.get_size_inches()[1] < 14
    streams = many_streams(300)
    fig = plot(streams, width=8, dpi=50)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 1 + STREAM_LANES and labels[-1] == "GPU: 269 more streams"
    assert fig.get_size_inches()[1] < 22
    overview = plot(streams, width=8, dpi=50, overview=True)
    assert overview.get_size_inches()[1] == fig.get_size_inches()[1]
