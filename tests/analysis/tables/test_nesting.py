"""nesting.py: parents and self time of nested ops, by hand and on real traces."""

import pathlib

import numpy as np
import pytest

from cutimeline.analysis.tables.nesting import parents, self_ns
from cutimeline.formats.kineto import import_chrome
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

KINETO = pathlib.Path(__file__).resolve().parents[2] / "data" / "kineto"


def nested():
    #       name thread begin end depth
    ops = [("A", 0, 0, 100, 0), ("B", 0, 10, 50, 1), ("C", 0, 20, 30, 2),
           ("D", 0, 60, 70, 1), ("E", 0, 100, 120, 0), ("F", 1, 5, 50, 0),
           ("G", 1, 5, 20, 1), ("H", 0, 100, 100, 1)]
    st = Strings()
    cols = {"name": [st.intern(o[0]) for o in ops], "thread": [o[1] for o in ops],
            "host_begin_ns": [o[2] for o in ops], "host_end_ns": [o[3] for o in ops],
            "depth": [o[4] for o in ops], "seq": np.arange(len(ops))}
    return Timeline({"ops": cols}, st, {"source": "test"})


def test_parents_and_self_time_by_hand():
    tl = nested()
    # H begins where A ends and E begins; E is the longer, so it is H's parent
    assert parents(tl).tolist() == [-1, 0, 1, 0, -1, -1, 5, 4]
    assert self_ns(tl).tolist() == [50, 30, 10, 10, 20, 30, 15, 0]


def test_flat_ops_are_their_own_self_time():
    tl = nested()
    flat = tl.replace(ops={**tl.ops.columns, "depth": np.zeros(len(tl.ops), np.int16)})
    assert (parents(flat) == -1).all()
    assert np.array_equal(self_ns(flat), flat.ops.host_end_ns - flat.ops.host_begin_ns)
    assert len(self_ns(Timeline())) == 0


@pytest.mark.parametrize("trace", ["nccl_parser_config/nccl_data.json.gz",
                                   "trace_filter/sampled_rank-0.json.gz"])
def test_self_time_of_a_thread_sums_to_its_top_level_time(trace):
    tl = import_chrome(KINETO / trace)
    o = tl.ops
    own = self_ns(tl)
    assert (own >= 0).all()
    par = parents(tl)
    assert np.all(o.depth[par[par >= 0]] == o.depth[par >= 0] - 1)
    # a parent holds its child
    kids = np.flatnonzero(par >= 0)
    assert np.all(o.host_begin_ns[par[kids]] <= o.host_begin_ns[kids])
    assert np.all(o.host_end_ns[par[kids]] >= o.host_end_ns[kids])
    dur = o.host_end_ns - o.host_begin_ns
    for t in np.unique(o.thread):
        mine = o.thread == t
        top = mine & (o.depth == 0)
        # nested children never overlap, so nothing is removed twice
        assert own[mine].sum() == dur[top].sum()


def test_containment_nests_recordings_as_depth_nests_imports():
    # the same ops as a recording: ops.depth is the module depth there, so
    # nesting comes from the intervals (A is a compiled graph's op)
    tl = nested()
    st = Strings(list(tl.strings))
    graph = st.intern("inductor::graph_0")
    ops = {**tl.ops.columns, "depth": np.full(len(tl.ops), 3, np.int16)}
    ops["name"] = np.where(np.arange(len(tl.ops)) == 0, graph, tl.ops["name"])
    rec = Timeline({"ops": ops}, st, {"source": "record"})
    assert parents(rec).tolist() == [-1, 0, 1, 0, -1, -1, 5, 4]
    assert self_ns(rec).tolist() == [50, 30, 10, 10, 20, 30, 15, 0]


def test_module_depth_of_a_recording_is_not_op_nesting():
    import torch

    import cutimeline as ctl

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x):  # a root op (depth 0), then ops at depth 1 and 2
            return self.inner(self.lin(x * 2))
    net, x = Net(), torch.randn(3, 4)
    with ctl.record(device="cpu", measure=False) as rec:
        net(x)
    tl = rec.timeline
    assert tl.ops.depth.max() >= 1
    assert (parents(tl) == -1).all()
    assert np.array_equal(self_ns(tl), tl.ops.host_end_ns - tl.ops.host_begin_ns)
    # read as an import's depth, the module depths would make false parents
    assert (parents(tl.replace(meta={**tl.meta, "source": "kineto"})) >= 0).any()
