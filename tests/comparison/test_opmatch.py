"""opmatch.py: the op-stream matcher on hand-made sequences, and the
profiler's leaf aten ops on a hand-made Kineto-like tree."""

import numpy as np
import pytest

from cutimeline.comparison.opmatch import (EXPLAINED, base_name, common_subsequence, decomposes,
                                           match_ops, profiler_leaves, recorded_ops)
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import NONE, GpuKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline


def test_matcher_finds_missing_and_extra_ops():
    ours = ["aten::t", "aten::addmm", "aten::relu", "aten::detach", "aten::sum"]
    theirs = ["aten::t", "aten::addmm", "aten::relu", "aten::mul", "aten::sum"]
    m = match_ops(ours, theirs)
    assert m.matched == 4 and m.fraction == pytest.approx(0.8)
    assert m.missing.tolist() == [3] and m.extra.tolist() == [3]
    assert m.missing_names() == {"aten::mul": 1}
    assert m.extra_names() == {"aten::detach": 1}
    assert m.example("ours", "aten::detach") == \
        "step 0: aten::addmm, aten::relu, [aten::detach], aten::sum"
    assert m.example("theirs", "aten::mul", context=1) == \
        "step 0: aten::relu, [aten::mul], aten::sum"
    assert m.unexplained() == ["missing aten::mul"]  # detach is explained


def test_matcher_strips_overloads_and_keys_substitutes_alike():
    ours = ["aten::add.Tensor", "aten::view.default", "aten::add_.Tensor"]
    theirs = ["aten::add_", "aten::_reshape_alias", "aten::add_"]
    m = match_ops(ours, theirs)
    assert m.ours == ("aten::add", "aten::view", "aten::add_")
    assert m.matched == 3 and not len(m.missing) and not len(m.extra)
    assert m.substituted() == {("aten::add", "aten::add_"): 1,
                               ("aten::view", "aten::_reshape_alias"): 1}
    for pair in m.substituted():
        assert pair in EXPLAINED
    # a real in-place add meets the profiler's in-place add, unsubstituted
    assert m.pairs.tolist()[2] == [2, 2]


def test_matcher_aligns_step_by_step():
    # the same op in another step must not be matched across the boundary
    m = match_ops(["aten::a", "aten::b"], ["aten::b", "aten::a"],
                  ours_step=[0, 1], theirs_step=[0, 1])
    assert m.matched == 0
    assert m.extra_names() == {"aten::a": 1, "aten::b": 1}
    m = match_ops(["aten::a", "aten::b"], ["aten::a"], ours_step=[0, 1], theirs_step=[0])
    assert m.matched == 1 and m.extra.tolist() == [1] and m.fraction == 1.0
    assert m.example("ours", "aten::b") == "step 1: aten::a, [aten::b]"


def lcs_length(a, b):
    """The textbook dynamic programme, for reference."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@pytest.mark.parametrize("seed", range(4))
def test_common_subsequence_is_a_longest_one(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        alphabet = "abcd"[:rng.integers(1, 5)]
        a = list(rng.choice(list(alphabet), rng.integers(0, 25)))
        b = list(rng.choice(list(alphabet), rng.integers(0, 25)))
        for max_edits in (4000, 2):   # Myers, and the difflib fallback past 2 edits
            pairs = common_subsequence(a, b, max_edits=max_edits)
            assert all(a[i] == b[j] for i, j in pairs)
            assert all(p < q for (p, _), (q, _) in zip(pairs, pairs[1:]))
            assert all(p < q for (_, p), (_, q) in zip(pairs, pairs[1:]))
            if max_edits > 50:
                assert len(pairs) == lcs_length(a, b)


def test_matcher_keeps_its_place_in_repetitive_streams():
    # identical layers, one op in 97 renamed and one in 53 extra: block
    # matching that pairs a layer with its neighbour would lose most ops
    theirs = [f"aten::op{i % 37}" for i in range(600)] * 5
    for k in range(0, len(theirs), 97):
        theirs[k] = "aten::mul"
    ours = [f"aten::op{i % 37}" for i in range(600)] * 5
    inserted = 0
    for k in range(5, len(ours), 53):
        ours.insert(k, "aten::detach")
        inserted += 1
    m = match_ops(ours, theirs)
    renamed = len(range(0, len(theirs), 97))
    assert m.missing_names() == {"aten::mul": renamed}
    assert m.matched == len(theirs) - renamed
    # each renamed op is extra in ours under its old name, beside the detaches
    assert m.extra_names()["aten::detach"] == inserted
    assert len(m.extra) == inserted + renamed


def test_matcher_edge_cases():
    assert match_ops([], []).fraction == 1.0
    assert match_ops(["aten::a"], []).fraction == 0.0
    m = match_ops([], ["aten::a"])
    assert m.fraction == 0.0 and m.missing.tolist() == [0]
    assert m.to_dict()["missing"][0]["name"] == "aten::a"
    with pytest.raises(CutimelineError, match="one step number per op"):
        match_ops(["aten::a"], [], ours_step=[0, 1])


def test_base_name_and_decomposition_rule():
    assert base_name("aten::add.Tensor") == "aten::add"
    assert base_name("aten::add_") == "aten::add_"
    assert base_name("AddmmBackward0") == "AddmmBackward0"
    assert decomposes("aten::linear") and decomposes("aten::reshape")
    assert decomposes("aten::to") and decomposes("aten::cross_entropy_loss")
    assert not decomposes("aten::addmm") and not decomposes("aten::t")
    assert not decomposes("aten::add")   # its TorchScript-only overloads are skipped
    assert not decomposes("aten::no_such_op") and not decomposes("AddmmBackward0")


# -- the profiler's leaf ops on a hand-made trace ----------------------------------------

def kineto_like():
    """Two threads of nested cpu_ops, as import_chrome lays them out (time
    order, parents first, depth per thread), and kernels linked to ops."""
    rows = [  # name, thread, depth, begin, end
        ("aten::linear", 0, 0, 0, 100),           # decomposes: look inside
        ("aten::t", 0, 1, 1, 10),                 # leaf
        ("aten::transpose", 0, 2, 2, 9),          # inside a leaf
        ("aten::addmm", 0, 1, 20, 90),            # leaf
        ("aten::copy_", 0, 2, 30, 40),            # inside a leaf; launches a kernel
        ("AddmmBackward0", 1, 0, 50, 80),         # an autograd node: look inside
        ("aten::mm", 1, 1, 51, 60),               # leaf on another thread
        ("profiler::_record_function_enter_new", 0, 0, 110, 111),
        ("aten::relu", 0, 0, 120, 130),           # leaf
        ("aten::clamp_min", 0, 1, 121, 129),      # inside a leaf
        ("autograd::engine::evaluate_function: X", 0, 0, 140, 150),
    ]
    st = Strings()
    ops = {"name": [st.intern(r[0]) for r in rows], "thread": [r[1] for r in rows],
           "depth": [r[2] for r in rows], "host_begin_ns": [r[3] for r in rows],
           "host_end_ns": [r[4] for r in rows], "seq": np.arange(len(rows))}
    gpu = {"op": [4, 6, 3, NONE, 8], "kind": [GpuKind.KERNEL] * 4 + [GpuKind.MEMSET],
           "begin_ns": [200, 300, 400, 500, 600], "end_ns": [210, 340, 405, 550, 602],
           "name": [st.intern("k")] * 5}
    return Timeline({"ops": ops, "gpu": gpu}, st, {"aligned": True, "source": "kineto"})


def test_profiler_leaves_follow_the_dispatch_mode():
    tl = kineto_like()
    leaf, owner = profiler_leaves(tl)
    names = tl.decode(tl.ops["name"])
    assert names[leaf].tolist() == ["aten::t", "aten::addmm", "aten::mm", "aten::relu"]
    assert owner.tolist() == [NONE, 1, 1, 3, 3, NONE, 6, NONE, 8, 8, NONE]


def test_recorded_ops_leave_out_the_profiler_namespace():
    tl = kineto_like()
    names = tl.decode(tl.ops["name"])
    assert names[~recorded_ops(tl)].tolist() == ["profiler::_record_function_enter_new"]


def test_recorded_ops_leave_out_the_recorders_own_graph_ops():
    # a compiled graph's and a CUDA graph replay's ops pass no dispatcher;
    # the aten ops inside them are what the profiler lists too
    st = Strings()
    ops = ["inductor::graph_0", "aten::mm", "cudagraph::replay", "aten::add.Tensor"]
    tl = Timeline({"ops": {"name": [st.intern(n) for n in ops],
                           "seq": np.arange(4)}}, st, {"source": "record"})
    assert tl.decode(tl.ops["name"])[recorded_ops(tl)].tolist() == \
        ["aten::mm", "aten::add.Tensor"]
