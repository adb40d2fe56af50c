"""The op table: counts, host and GPU time, launch delay per op name."""

import numpy as np

from cutimeline.analysis.tables.optable import op_table
from cutimeline.timeline.schema import NONE, OpFlag
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

from handmade import random_timeline, timeline


def test_by_hand():
    tl = timeline([(0, 10, 12, 22, "k"), (0, 30, 40, 45, "k"), (0, 50, 51, 61, "k")],
                  ops=[("aten::mm", 9, 11, OpFlag.LAUNCH), ("aten::mm", 29, 35, OpFlag.LAUNCH),
                       ("aten::add", 49, 52, OpFlag.LAUNCH), ("aten::view", 60, 61, 0)])
    t = op_table(tl)
    assert t["name"].tolist() == ["aten::mm", "aten::add", "aten::view"]
    mm = t[0]
    assert (mm["count"], mm["cpu_total_ns"], mm["gpu_rows"], mm["gpu_total_ns"]) == (2, 8, 2, 15)
    assert mm["cpu_mean_ns"] == 4 and mm["gpu_mean_ns"] == 7.5
    assert mm["delay_p50_ns"] == np.median([2, 10])
    view = t[2]
    assert view["gpu_rows"] == 0 and np.isnan(view["delay_p50_ns"])


def test_by_shape_and_window():
    st = Strings()
    names = [st.intern("aten::add")] * 3
    shapes = [st.intern("f32[4]"), st.intern("f32[8]"), st.intern("f32[4]")]
    tl = Timeline({"ops": {"name": names, "shapes": shapes, "host_begin_ns": [0, 10, 20],
                           "host_end_ns": [5, 15, 25], "seq": [0, 1, 2]}}, st,
                  {"aligned": True})
    t = op_table(tl, shapes=True)
    assert sorted(zip(t["shapes"].tolist(), t["count"].tolist())) == [("f32[4]", 2), ("f32[8]", 1)]
    assert op_table(tl, window=(5, 30))["count"].tolist() == [2]


def test_engines_agree():
    tl = random_timeline(4)
    a, b = op_table(tl, engine="numba"), op_table(tl, engine="numpy")
    for f in a.dtype.names:
        if a.dtype[f] == object:
            assert a[f].tolist() == b[f].tolist()
        else:
            np.testing.assert_array_equal(a[f], b[f])
    assert a["count"].sum() == len(tl.ops)
    assert a["gpu_rows"].sum() == int((tl.gpu.op != NONE).sum())
