"""compare(): cutimeline and torch.profiler on the same steps (CPU), and the
op-stream matcher on hand-made sequences and trees."""

import dataclasses
import json
import os
import re

import numpy as np
import pytest
import torch

from cutimeline.comparison import Comparison, _gpu_agreement, compare
from cutimeline.errors import CutimelineError
from cutimeline.opmatch import (EXPLAINED, SUBSTITUTES, base_name, common_subsequence,
                                decomposes,
                                match_ops, profiler_leaves, recorded_ops)
from cutimeline.timeline import NONE, GpuKind, Strings, Timeline


def mlp_step():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return step


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traces")
    return compare(mlp_step(), steps=3, warmup=1, device="cpu", trace_dir=folder), folder


# -- compare on a small MLP ------------------------------------------------------------

def test_op_stream_of_a_small_mlp_matches_the_profilers_leaf_ops(mlp):
    cmp, _ = mlp
    m = cmp.match
    assert len(m.theirs) > 100
    assert m.fraction >= 0.99
    assert m.unexplained() == []
    # what is left over is the mode's own detach, nothing else
    assert set(m.extra_names()) <= {"aten::detach"}
    for i, j in m.pairs.tolist():
        a, b = m.ours[i], m.theirs[j]
        assert a == b or SUBSTITUTES.get(b) == a
    # every compared step is aligned on its own
    assert set(m.ours_step.tolist()) == set(m.theirs_step.tolist()) == {0, 1, 2}
    assert (m.ours_step[m.pairs[:, 0]] == m.theirs_step[m.pairs[:, 1]]).all()


def test_step_times_overheads_and_timelines(mlp):
    cmp, _ = mlp
    assert set(cmp.step_ns) == {"none", "cutimeline", "profiler"}
    for times in cmp.step_ns.values():
        assert times.shape == (1, 3) and (times > 0).all()
    assert set(cmp.overhead) == {"cutimeline", "profiler"}
    assert all(np.isfinite(v) and v > 0 for v in cmp.overhead.values())
    assert cmp.gpu is None  # CPU: no GPU time to compare
    assert isinstance(cmp.ours, Timeline) and isinstance(cmp.theirs, Timeline)
    assert cmp.theirs.meta["source"] == "kineto"
    assert len(cmp.ours.step_numbers()) == 3  # only the compared steps
    assert len(cmp.theirs.step_numbers()) == 3


def test_bytes_per_op_of_both_traces_are_reported(mlp):
    cmp, folder = mlp
    s = cmp.sizes
    assert s["ctl_bytes"] == os.path.getsize(folder / "cutimeline.ctl")
    assert s["kineto_json_bytes"] == os.path.getsize(folder / "kineto.json")
    assert 0 < s["kineto_gz_bytes"] < s["kineto_json_bytes"]
    assert s["leaf_ops"] == len(cmp.match.theirs)
    assert s["ctl_ops"] == len(cmp.ours.ops)
    for k in ("ctl", "kineto_json", "kineto_gz"):
        assert s[f"{k}_bytes_per_op"] == pytest.approx(s[f"{k}_bytes"] / s["leaf_ops"])
    assert s["ctl_bytes_per_op"] < s["kineto_json_bytes_per_op"]


def test_table_and_dict(mlp):
    cmp, _ = mlp
    text = str(cmp)
    assert text == cmp.table()
    for part in ("| uninstrumented |", "| cutimeline |", "| torch.profiler |",
                 "| cutimeline .ctl |", "| Kineto JSON |", "Op stream:"):
        assert part in text
    assert "extra aten::detach" in text and "UNEXPLAINED" not in text
    d = json.loads(json.dumps(cmp.to_dict(), allow_nan=False))
    assert d["match"]["fraction"] == cmp.match.fraction
    assert d["overhead"]["profiler"] == cmp.overhead["profiler"]
    assert "Comparison cpu" in repr(cmp)
    unaligned = dataclasses.replace(cmp, meta={**cmp.meta, "gpu_not_compared": "why"})
    assert "GPU time not compared: why." in unaligned.table()


def test_plot_draws_both_timelines_of_the_first_compared_step(mlp, tmp_path):
    cmp, _ = mlp
    fig = cmp.plot(tmp_path / "cmp.png")
    assert (tmp_path / "cmp.png").stat().st_size > 0
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert any(t.endswith("cutimeline") for t in titles)
    assert any(t.endswith("torch.profiler, imported") for t in titles)


def test_temporary_traces_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    cmp = compare(lambda: torch.ones(3).add(1), steps=1, warmup=1,
                  device=torch.device("cpu"))
    assert isinstance(cmp, Comparison)
    assert list(tmp_path.iterdir()) == []
    assert cmp.match.fraction == 1.0 and cmp.match.matched == 2  # ones, add


def test_rounds_time_every_pass_again_in_alternating_order():
    order = []

    def fn():
        n = torch._C._len_torch_dispatch_stack()
        order.append("cutimeline" if n else "profiler" if
                     torch._C._autograd._profiler_enabled() else "none")
        torch.ones(2).mul(2)
    cmp = compare(fn, steps=2, warmup=1, rounds=2, device="cpu")
    assert all(v.shape == (2, 2) for v in cmp.step_ns.values())
    passes = order[2::3]  # each pass calls fn warmup + steps = 3 times; the last
    assert passes == ["none", "cutimeline", "profiler", "profiler", "cutimeline", "none"]
    # the ratios are per round, then the median over rounds
    none = np.median(cmp.step_ns["none"], axis=1)
    ratio = np.median(np.median(cmp.step_ns["profiler"], axis=1) / none)
    assert cmp.overhead["profiler"] == pytest.approx(ratio)
    assert len(cmp.match.theirs) == 2 * 2  # the first round's steps only


# -- what fn does comes out unchanged ------------------------------------------------

@pytest.mark.parametrize("failing_call", [0, 2, 4])  # in the plain, cutimeline, profiler pass
def test_an_exception_from_fn_propagates_unchanged(failing_call):
    calls = []
    error = ValueError("boom")

    def fn():
        calls.append(1)
        torch.ones(2).mul(2)
        if len(calls) == failing_call + 1:
            raise error
    with pytest.raises(ValueError) as info:
        compare(fn, steps=1, warmup=1, device="cpu")
    assert info.value is error
    assert torch._C._len_torch_dispatch_stack() == 0  # no mode left behind
    # nothing of the failed comparison is left active: another one runs
    assert compare(lambda: torch.ones(2).mul(2), steps=1, warmup=1,
                   device="cpu").match.fraction == 1.0


# -- options -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"steps": 0}, "steps=0"), ({"steps": 2.5}, "steps=2.5"), ({"steps": True}, "steps=True"),
    ({"warmup": -1}, "warmup=-1"), ({"rounds": 0}, "rounds=0"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"device": 0}, "compare(device=0) is not understood"),
    ({"record_shapes": "yes"}, "record_shapes='yes'"),
    ({"profiler_activities": "cpu"}, "profiler_activities='cpu'"),
    ({"profiler_activities": [torch.profiler.ProfilerActivity.CUDA]}, "includes CPU"),
    ({"profiler_activities": ["CPU"]}, "ProfilerActivity"),
])
def test_bad_options_are_named(kwargs, words):
    with pytest.raises(CutimelineError, match=re.escape(words)):
        compare(lambda: None, **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(CutimelineError, match="callable"):
        compare(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_so():
    with pytest.raises(CutimelineError, match="needs CUDA"):
        compare(lambda: None, device="cuda")


def test_trace_dir_must_not_be_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(CutimelineError, match="names a file"):
        compare(lambda: None, trace_dir=f)


def test_disabled_cutimeline_cannot_be_compared(monkeypatch):
    monkeypatch.setenv("CUTIMELINE_DISABLE", "1")
    with pytest.raises(CutimelineError, match="CUTIMELINE_DISABLE"):
        compare(lambda: None, device="cpu")


# -- the matcher on hand-made sequences -------------------------------------------------

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


def test_gpu_time_is_compared_on_matched_ops_with_nested_kernels():
    theirs = kineto_like()
    leaf, owner = profiler_leaves(theirs)
    st = Strings()
    names = ["aten::t", "aten::addmm", "aten::mm", "aten::relu"]
    ours = Timeline({"ops": {"name": [st.intern(n) for n in names], "seq": np.arange(4),
                             "host_begin_ns": [0, 1, 2, 3], "host_end_ns": [1, 2, 3, 4]},
                     "gpu": {"op": [1, 2, 3], "kind": [GpuKind.OP] * 3,
                             "begin_ns": [0, 100, 200], "end_ns": [11, 140, 201],
                             "name": [st.intern("op")] * 3}},
                    st, {"aligned": True})
    their_rows = np.flatnonzero(leaf)
    m = match_ops(names, theirs.decode(theirs.ops["name"][their_rows]).tolist())
    g = _gpu_agreement(ours, theirs, m, (np.arange(4), their_rows, owner))
    # t launches nothing on either side; addmm's kernels come from its copy_
    # and itself, mm has one kernel, relu one memset
    assert g.names == ("aten::addmm", "aten::mm", "aten::relu")
    assert g.ours_ns.tolist() == [11, 40, 1]
    assert g.theirs_ns.tolist() == [15, 40, 2]
    assert g.kernels.tolist() == [2, 1, 1]
    s = g.summary()
    assert s["single_kernel_ops"] == 2 and s["within_tolerance"] == 0.5
    assert s["median_abs_error"] == pytest.approx(0.25)
    assert s["ours_total_ns"] == 52 and s["theirs_total_ns"] == 57
