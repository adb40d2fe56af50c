"""runner.py and result.py: cutimeline and torch.profiler on the same steps (CPU, and a
SimGPU against the profiler on the CPU), and GPU-time agreement on a hand-made trace
(the matcher: test_opmatch.py)."""

import dataclasses
import json
import os
import re

import numpy as np
import pytest
import torch
from test_opmatch import kineto_like

import cutimeline as ctl
from cutimeline.comparison.opmatch import SUBSTITUTES, match_ops, profiler_leaves
from cutimeline.comparison.result import Comparison
from cutimeline.comparison.runner import (_gpu_agreement, _leaving_no_profiler, compare,
                                          profiler_left_on)
from cutimeline.errors import CutimelineError
from cutimeline.rendering.lanes.scene import PHASE_COLORS, STEP_COLORS
from cutimeline.timeline.schema import GpuKind, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

from handmade import mlp_step


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


def _step_ms(tl, number):
    s = tl.spans
    k = np.flatnonzero((s.kind == SpanKind.STEP) & (s.number == number))
    assert len(k) == 1
    return (int(s.end_ns[k[0]]) - int(s.begin_ns[k[0]])) / 1e6


def test_plot_draws_both_timelines_of_the_first_compared_step(mlp, tmp_path):
    from matplotlib.colors import to_hex
    from matplotlib.image import imread
    from matplotlib.patches import Rectangle
    cmp, _ = mlp
    fig = cmp.plot(tmp_path / "cmp.png")
    # lanes of a (ours) and b (the profiler's), then queue depth and CPU lead
    assert len(fig.axes) == 4
    a, b, queue, lead = fig.axes
    assert [ax.get_title(loc="left") for ax in fig.axes] == \
        ["a: cutimeline", "b: torch.profiler, imported", "", ""]
    # step 1 of each, from its own start, on one time axis as long as the longer
    span = max(_step_ms(cmp.ours, 1), _step_ms(cmp.theirs, 1))
    for ax in fig.axes:
        assert ax.get_xlim() == pytest.approx((0, span), abs=1e-6)
    # CPU only: a host-span lane and the main thread's lane, no GPU lanes
    assert [t.get_text() for t in a.get_yticklabels()] == \
        ["host spans", "CPU thread 0 (MainThread)"]
    b_lanes = [t.get_text() for t in b.get_yticklabels()]
    assert b_lanes[0] == "host spans" and b_lanes[1].startswith("CPU thread ")
    assert len(b_lanes) == 2
    forward, backward, optimizer = PHASE_COLORS[:3]
    for ax in (a, b):
        host_y, thread_y = ax.get_yticks()
        assert ax.texts[0].get_text() == "step 1"
        boxes = {}  # colour -> the y extent of its boxes
        for c in ax.collections:
            for path, colour in zip(c.get_paths(), c.get_facecolor()):
                y = path.vertices[:, 1]
                lo, hi = boxes.get(to_hex(colour), (np.inf, -np.inf))
                boxes[to_hex(colour)] = (min(lo, y.min()), max(hi, y.max()))
        # the step box on the host-span lane; the MLP's forward, backward
        # and Adam ops coloured by phase on the thread's lane
        assert set(boxes) <= {forward, backward, optimizer, *STEP_COLORS}
        assert {forward, backward, optimizer, STEP_COLORS[0]} <= set(boxes)
        assert host_y - 0.5 < boxes[STEP_COLORS[0]][0] < boxes[STEP_COLORS[0]][1] < host_y + 0.5
        for colour in (forward, backward, optimizer):
            assert thread_y - 0.5 < boxes[colour][0] < boxes[colour][1] < thread_y + 0.5
    # the panels, labelled, say that there is no GPU work to show
    assert (queue.get_ylabel(), lead.get_ylabel()) == ("queue depth", "CPU lead (ms)")
    for ax in (queue, lead):
        assert [t.get_text() for t in ax.texts] == ["no GPU work in this Timeline"] * 2
    assert lead.get_xlabel() == "time (ms) from the start of each window"
    title, subtitle = (t.get_text() for t in fig.texts)
    assert title == "cutimeline comparison"
    assert subtitle.startswith("step 1, each Timeline from the start of its own window")
    assert subtitle.endswith("queue depth and CPU lead: a solid, b dashed")
    # one legend for both: the phases drawn, as one entry (steps are named in their row)
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["forward · backward · optimizer"]
    swatches = [to_hex(r.get_facecolor()) for r in legend._legend_handle_box.findobj(Rectangle)]
    assert swatches == [forward, backward, optimizer]
    # the file is that figure: its size, with the phases' colours in it
    img = imread(tmp_path / "cmp.png")
    w, h = fig.get_size_inches() * fig.dpi
    assert img.shape[:2] == (round(h), round(w))
    pixels = {to_hex(p) for p in np.unique(img[..., :3].reshape(-1, 3), axis=0)}
    assert {forward, backward, optimizer, STEP_COLORS[0]} <= pixels


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
    assert len(cmp.match.theirs) == 2 * 2  # the first round's steps only


def test_overhead_is_the_median_over_rounds_of_each_rounds_ratio():
    # three rounds of three steps (ns); the machine runs twice as slow in
    # round 2 and twice as fast in round 3 (drift between rounds)
    step_ns = {"none": np.array([[90, 100, 130], [200, 210, 150], [50, 40, 70]]),
               "cutimeline": np.array([[125, 120, 130], [400, 410, 390], [50, 20, 900]]),
               "profiler": np.array([[300, 100, 900], [400, 350, 1000], [250, 200, 800]])}
    cmp = Comparison(step_ns, match=None, gpu=None, sizes={}, ours=None, theirs=None)
    # round medians: none 100, 200, 50; cutimeline 125, 400, 50; profiler
    # 300, 400, 250. Ratios per round: cutimeline 1.25, 2, 1; profiler 3, 2,
    # 5. Their medians: 1.25 and 3 (the pooled medians would give 130/100
    # and 350/100, the means of the ratios 4.25/3 and 10/3)
    assert cmp.overhead == {"cutimeline": 1.25, "profiler": 3.0}
    assert cmp.median_ns == {"none": 100.0, "cutimeline": 130.0, "profiler": 350.0}


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


# -- a simulated GPU on the cutimeline side ----------------------------------------------

def meta_step():
    w = torch.randn(128, 128, device="meta")

    def step():
        x = torch.randn(32, 128, device="meta")
        (x @ w).relu().sum()
    return step


@pytest.mark.parametrize("device", ["sim", "simgpu"])
def test_a_simulated_gpu_is_compared_with_the_profiler_on_the_cpu(device):
    gpu = ctl.SimGPU("a100", seed=2) if device == "simgpu" else device
    cmp = compare(meta_step(), steps=2, warmup=1, device=gpu)
    name = "SimGPU a100 (simulated)" if device == "simgpu" else "SimGPU h100 (simulated)"
    assert cmp.meta["device"] == name and cmp.meta["profiler_device"] == "cpu"
    assert cmp.meta["activities"] == ["CPU"]
    assert cmp.ours.meta["simulated"] and cmp.ours.meta["device_name"] == name
    assert len(cmp.ours.gpu) > 0 and len(cmp.theirs.gpu) == 0
    assert cmp.match.fraction == 1.0 and cmp.gpu is None
    text = cmp.table()
    assert text.startswith(f"cutimeline vs torch.profiler on {name}:")
    assert "torch.profiler cannot see a simulated GPU" in text
    assert "ran the same ops on the CPU side only" in text and "\n\n\n" not in text
    assert f"Comparison {name}" in repr(cmp)


def training_step_on_meta(kind: str):
    """One training step on meta tensors: a transformer layer with AdamW
    (fused attention, a foreach optimizer on CUDA) or a conv net with SGD
    momentum, as scripts/compare_profiler.py's workloads."""
    torch.manual_seed(0)
    if kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64,
                                                 batch_first=True)
        net = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).to("meta")
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x = torch.randn(4, 8, 32, device="meta")

        def loss():
            return net(x).pow(2).mean()
    else:
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                  torch.nn.ReLU(), torch.nn.Flatten(),
                                  torch.nn.Linear(8 * 6 * 6, 4)).to("meta")
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(4, 3, 8, 8, device="meta")

        def loss():
            return net(x).sum()

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()
    return step


@pytest.mark.parametrize("kind", ["transformer", "convnet"])
def test_a_simgpus_cuda_op_stream_differs_from_the_cpu_pass_only_where_explained(kind):
    """The SimGPU dispatches CUDA's paths (foreach optimizers, fused
    attention, fused dropout), the profiler's CPU pass the per-tensor ones:
    every row of the difference is explained (paths.py), none UNEXPLAINED."""
    cmp = compare(training_step_on_meta(kind), steps=2, warmup=1, device="sim")
    m = cmp.match
    assert m.cuda_paths and m.unexplained() == []
    assert "UNEXPLAINED" not in cmp.table()
    paths = {r["path"] for r in m.differences()} - {None}
    assert paths == ({"foreach optimizer", "fused attention", "fused dropout"}
                     if kind == "transformer" else {"foreach optimizer"})
    assert m.to_dict()["unexplained"] == [] and m.to_dict()["cuda_paths"]


def test_the_cutimeline_pass_waits_for_the_simulated_gpu():
    gpu = ctl.SimGPU(seed=3, cost={"aten::mm": 20_000_000})  # 20 ms per matmul
    cmp = compare(meta_step(), steps=2, warmup=1, device=gpu)
    assert (cmp.step_ns["cutimeline"] >= 20_000_000).all()
    assert (cmp.step_ns["none"] < 20_000_000).all()  # no simulated GPU to wait for


# -- options -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"steps": 0}, "steps=0"), ({"steps": 2.5}, "steps=2.5"), ({"steps": True}, "steps=True"),
    ({"warmup": -1}, "warmup=-1"), ({"rounds": 0}, "rounds=0"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"device": 0}, "compare(device=0) is not understood"),
    ({"device": "gpu0"}, "give 'auto', 'cpu', 'cuda', 'cuda:N', 'sim'"),
    ({"record_shapes": "yes"}, "record_shapes='yes'"),
    ({"profiler_activities": "cpu"}, "profiler_activities='cpu'"),
    ({"profiler_activities": [torch.profiler.ProfilerActivity.CUDA]}, "includes CPU"),
    ({"profiler_activities": ["CPU"]}, "ProfilerActivity"),
])
def test_bad_options_are_named(kwargs, words):
    with pytest.raises(CutimelineError, match=re.escape(words)):
        compare(lambda: None, **kwargs)


def test_a_device_other_than_a_simgpu_is_named():
    from cutimeline.devices.device import Device

    class Other(Device):
        kind = "other"
        owns = start = current_stream = begin = end = wait = note_sync = harvest = None
    with pytest.raises(CutimelineError, match="takes a SimGPU as its Device; for a CUDA "
                       "GPU give 'cuda' or 'cuda:N'"):
        compare(lambda: None, device=Other())


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


# -- what the profiler pass leaves behind: nothing ---------------------------------------

def test_compare_leaves_the_profiler_off_and_the_environment_as_it_was(monkeypatch):
    # (what a recording costs after compare(): tests/bench, it times real work)
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    monkeypatch.setenv("DISABLE_CUPTI_LAZY_REINIT", "user's")
    seen = []
    enter = torch.profiler.profile.__enter__
    monkeypatch.setattr(torch.profiler.profile, "__enter__",
                        lambda self: seen.append(os.environ.get("TEARDOWN_CUPTI")) or enter(self))
    compare(mlp_step(), steps=2, warmup=1, device="cpu")
    assert seen == ["1"]  # Kineto was told to detach CUPTI at the end of its trace
    assert profiler_left_on(torch) == []
    assert "TEARDOWN_CUPTI" not in os.environ  # and the environment is as it was
    assert os.environ["DISABLE_CUPTI_LAZY_REINIT"] == "user's"


def test_the_users_own_cupti_teardown_setting_is_kept(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # e.g. CUDA graphs on an old CUDA
    seen = []
    enter = torch.profiler.profile.__enter__
    monkeypatch.setattr(torch.profiler.profile, "__enter__",
                        lambda self: seen.append(os.environ.get("TEARDOWN_CUPTI")) or enter(self))
    compare(mlp_step(), steps=1, warmup=0, device="cpu")
    assert seen == ["0"] and os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_profiler_left_on_is_an_error_and_the_environment_is_restored(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    with pytest.raises(CutimelineError, match="still on after compare"):
        with _leaving_no_profiler(torch):
            assert os.environ["TEARDOWN_CUPTI"] == "1"
            monkeypatch.setattr(torch.autograd.profiler, "_is_profiler_enabled", True)
    assert "TEARDOWN_CUPTI" not in os.environ
