"""Names inside GPU bars, and side streams drawn without blame."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.text import Text

from cutimeline.rendering.figure import plot
from cutimeline.rendering.lanes.names import MIN_PX, short_name
from cutimeline.rendering.palette import CAUSE_COLORS

from figurepixels import colour_columns, column, known_gaps, lane_row, render


@pytest.mark.parametrize("name, short", [
    ("aten::addmm", "addmm"),
    ("void at::native::vectorized_elementwise_kernel<4, F, A<char*, 3> >(int, F, A<char*, 3>)",
     "vectorized_elementwise_kernel<4, F, A<char*, 3> >"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(cutlass_80_tensorop_s1688gemm::Params)",
     "Kernel<cutlass_80_tensorop_s1688gemm>"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long)",
     "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
])
def test_short_names(name, short):
    assert short_name(name) == short


def bar_texts(fig) -> list[Text]:
    ax = fig.axes[0]
    gpu = {ax.get_yticks()[i] for i, t in enumerate(ax.get_yticklabels())
           if t.get_text().startswith("GPU")}
    return [t for t in ax.texts if t.get_position()[1] in gpu]


def test_wide_bars_are_named_and_clipped_to_their_bar():
    tl = known_gaps()
    fig = plot(tl, flows=0)
    texts = bar_texts(fig)
    # kernels of A [0.51, 20), A2 [30, 35), B [41.01, 60), F [50.01, 55),
    # D [71.01, 90): all wider than MIN_PX at 1,000-odd px per 100 ms
    assert sorted(t.get_text() for t in texts) == ["A", "A2", "B", "D", "F"]
    render(fig)
    for t in texts:
        box = t.get_clip_box()
        assert t.get_clip_on() and box is not None
        # the clip box is the bar: from its begin to its end, in pixels
        assert box.width < fig.axes[0].bbox.width / 4
    # a narrow figure: the 5 ms bars fall under MIN_PX, the long ones keep names
    fig = plot(tl, flows=0, width=6)
    px_per_ms = fig.axes[0].bbox.width / 100
    assert 5 * px_per_ms < MIN_PX
    assert sorted(t.get_text() for t in bar_texts(fig)) == ["A", "B", "D"]


def test_a_mostly_idle_side_stream_is_not_blamed():
    # stream 1 runs 10 ms of 100, stream 0 57 ms: stream 1 is a side
    # stream. Where the whole device idled (data 35-40 ms, sync 60-71 ms)
    # stream 0 carries the cause; stream 1 is drawn idle, unshaded, but
    # for the dependency wait of its own queued work (20-30 ms)
    tl = known_gaps()
    fig = plot(tl, flows=0)
    img = render(fig)
    ax = fig.axes[0]
    half = int(0.42 * abs(ax.transData.transform((0, 0))[1] - ax.transData.transform((0, 1))[1]))
    side = lane_row(fig, ax, "GPU0 stream 1") - half
    main = lane_row(fig, ax, "GPU0 stream 0") - half
    for cause in ("data", "sync", "launch", "host", "unknown"):
        assert len(colour_columns(img, side, CAUSE_COLORS[cause])) == 0, cause
    for cause, lo, hi in (("data", 35, 40), ("sync", 62, 70)):
        cols = colour_columns(img, main, CAUSE_COLORS[cause])
        assert np.isin(np.arange(column(ax, lo) + 2, column(ax, hi) - 1), cols).all()
    dep = colour_columns(img, side, CAUSE_COLORS["dependency"])
    assert np.isin(np.arange(column(ax, 20) + 2, column(ax, 30) - 1), dep).all()
