"""compiled.py: Inductor graphs as ops over the ops they dispatch, their
gpu rows cut around those ops' rows, and the hook that waits for
torch.compile to be loaded."""

import importlib
import sys
import warnings

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.recording import recorder
from cutimeline.recording.hooks.compiled import cut, graph_device, launch
from cutimeline.recording.hooks.installer import Hooks
from cutimeline.recording.session import Session
from cutimeline.timeline.schema import GpuKind, OpFlag


def quiet_sim():
    return ctl.SimGPU("h100", cost=lambda *a: 500, pings=1, owns=("cpu", "meta"))


def names(tl, col="name", table="ops"):
    return list(tl.decode(tl.table(table)[col]))


@pytest.fixture(scope="module")
def inductor_mlp():
    """A small MLP compiled by Inductor (CPU code; compiled once, ~15 s
    cold), with a step that returns the loss and the gradients."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(8, 16)
    compiled = torch.compile(net)

    def step():
        net.zero_grad(set_to_none=True)
        loss = compiled(x).sin().sum()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in net.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: global module hooks
        step()
    return step


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_inductor_graphs_are_ops_over_the_ops_they_dispatch(inductor_mlp, device):
    ref_loss, ref_grads = inductor_mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with ctl.record(device=quiet_sim() if device == "sim" else "cpu",
                        measure=False) as rec:
            loss, grads = inductor_mlp()
    assert torch.equal(loss, ref_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    tl = rec.timeline
    o, name = tl.ops, np.array(names(tl))
    graph = np.flatnonzero(np.char.startswith(name.astype(str), "inductor::graph_"))
    assert len(graph) == 2  # the forward graph and the backward graph
    grad_fn = np.array(names(tl, "grad_fn"))
    assert grad_fn[graph].tolist() == ["", "CompiledFunctionBackward"]
    assert "f32[16,16]" in tl.decode(o.shapes[graph[0:1]])[0]
    from cutimeline.analysis.tables.nesting import parents, self_ns
    par = parents(tl)
    for r in graph:  # the ops its code dispatched (extern mm/addmm) lie inside
        inner = np.flatnonzero(par == r)
        assert len(inner) and all(n.startswith("aten::") for n in name[inner])
        assert o.host_begin_ns[r] < o.host_begin_ns[inner].min()
        assert o.host_end_ns[inner].max() < o.host_end_ns[r]
        dur = o.host_end_ns - o.host_begin_ns
        assert self_ns(tl)[r] == dur[r] - dur[inner].sum()
    if device == "cpu":
        assert len(tl.gpu) == 0
        return
    g = tl.gpu
    for r in graph:
        assert o.flags[r] & OpFlag.LAUNCH
        pieces = np.flatnonzero(g.op == r)
        inner = np.flatnonzero(par == r)
        rows = np.flatnonzero(np.isin(g.op, inner))
        assert (g.kind[pieces] == GpuKind.COMPILED).all()
        assert (g.kind[rows] == GpuKind.OP).all() and len(pieces) == len(rows) + 1
        # the pieces fill the region's bracket around its ops' rows, in order
        assert g.begin_event[pieces[1:]].tolist() == g.end_event[rows].tolist()
        assert g.end_event[pieces[:-1]].tolist() == g.begin_event[rows].tolist()
        both = np.sort(np.r_[pieces, rows])
        assert np.all(np.diff(g.begin_ns[both]) >= 0)
        assert np.all(g.end_ns[both][:-1] <= g.begin_ns[both][1:])


def test_cut_pieces_follow_the_rows_they_go_around():
    C, OP = int(GpuKind.COMPILED), int(GpuKind.OP)
    #            seq stream begin end kind
    launches = np.array([[0, 0, 0, 1, OP],
                         [1, 0, 2, 9, C],      # region on stream 0, events 2..9
                         [2, 0, 3, 4, OP],     # inside it
                         [3, 7, 5, 6, OP],     # inside in time, another stream
                         [4, 0, 7, 8, OP],     # inside it
                         [5, 0, 10, 11, OP]])
    out = cut(launches)
    assert out.tolist() == [[0, 0, 0, 1, OP], [1, 0, 2, 3, C], [2, 0, 3, 4, OP],
                            [1, 0, 4, 7, C], [3, 7, 5, 6, OP], [4, 0, 7, 8, OP],
                            [1, 0, 8, 9, C], [5, 0, 10, 11, OP]]
    plain = launches[launches[:, 4] == OP]
    assert cut(plain) is plain


class _Graph:
    """What launch reads of an Inductor CompiledFxGraph."""
    device_types = {"cpu"}
    device_idxs: set = set()


def test_a_compiled_graph_that_raises_propagates_unchanged_and_keeps_its_op():
    err = ValueError("boom")

    def call(graph, inputs):
        torch.ones(2).sum()  # an op its code dispatches
        raise err
    graph, x = _Graph(), torch.zeros(3)
    with ctl.record(device=quiet_sim(), measure=False) as rec:
        s = recorder._ACTIVE
        try:
            launch(s, call, graph, [x, 2])
        except ValueError as exc:
            assert exc is err
        else:
            raise AssertionError("the graph's exception was swallowed")
        assert launch(s, lambda g, i: i[0] + 1, graph, [x]).sum() == 3
    tl = rec.timeline
    names = list(tl.decode(tl.ops["name"]))
    assert names[0] == "inductor::graph_0" and "aten::sum" in names
    assert names.count("inductor::graph_0") == 2  # one graph object: one name
    assert tl.decode(tl.ops["shapes"][:1])[0] == "f32[3]"
    # the raising call got no gpu row of its own; the second one's is cut
    # around the aten::add its code dispatched
    second = len(names) - 1 - names[::-1].index("inductor::graph_0")
    pieces = np.flatnonzero(tl.gpu.kind == GpuKind.COMPILED)
    assert (tl.gpu.op[pieces] == second).all() and len(pieces) == 2
    assert names[second + 1].startswith("aten::add")


def test_a_graph_runs_on_its_accelerator_else_on_the_cpu():
    class G:
        device_types, device_idxs = {"cpu", "cuda"}, {1, 0}
    assert graph_device(G()) == torch.device("cuda", 0)
    G.device_idxs = set()
    assert graph_device(G()) == torch.device("cuda")
    assert graph_device(_Graph()) == torch.device("cpu")
    assert graph_device(object()) == torch.device("cpu")


def test_the_inductor_hook_waits_until_torch_compile_is_loaded(monkeypatch):
    importlib.import_module("torch._dynamo")  # loaded, as torch.compile(model) does
    from torch._inductor.codecache import CompiledFxGraph
    original = CompiledFxGraph.__dict__["__call__"]
    s = Session(None, max_ops=10, steps="auto")
    h = Hooks(s, modules=False, threads=False)
    monkeypatch.delitem(sys.modules, "torch._inductor.codecache")
    assert "torch._dynamo" in sys.modules  # torch.compile loaded, Inductor not:
    assert h._install_compiled() is False  # nothing is imported (≈ 0.2 s)
    assert "torch._inductor.codecache" not in sys.modules
    monkeypatch.undo()
    try:
        assert h._install_compiled() is True
        assert CompiledFxGraph.__dict__["__call__"] is not original
        assert h._install_compiled() is True and len(h._patches) == 1  # once
    finally:
        h.remove()
    assert CompiledFxGraph.__dict__["__call__"] is original
    assert h._install_compiled() is True  # after remove() no late patch comes
    assert CompiledFxGraph.__dict__["__call__"] is original


def test_an_inductor_without_its_graph_class_is_said_and_the_program_goes_on(monkeypatch):
    import types

    from cutimeline.recording.hooks.compiled import graph_class
    odd = types.ModuleType("torch._inductor.codecache")  # loaded, but no CompiledFxGraph
    monkeypatch.setitem(sys.modules, "torch._inductor.codecache", odd)
    with pytest.warns(RuntimeWarning, match="cannot record torch.compile's graphs.*failed"):
        assert graph_class() is False
    odd.CompiledFxGraph = type("CompiledFxGraph", (), {})  # nothing of its own to wrap
    with pytest.warns(RuntimeWarning, match="no __call__ of its own"):
        assert graph_class() is False
    s = Session(None, max_ops=10, steps="auto")
    h = Hooks(s, modules=False, threads=False)
    with pytest.warns(RuntimeWarning):
        assert h._install_compiled() is True and h._patches == []  # not tried again


def test_a_graph_compiled_while_recording_is_recorded_from_its_first_call_once_inductor_is_loaded():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(8, 16)
    torch._dynamo.reset()  # the first call below compiles (from Inductor's disk cache)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ctl.record(device="cpu", measure=False) as rec:
            compiled = torch.compile(net)
            first = compiled(x)
            second = compiled(x)
    assert torch.allclose(first, net(x)) and torch.equal(second, first)
    got = names(rec.timeline)
    recompiled = any("recompiles a compiled graph" in str(w.message) for w in seen)
    from cutimeline.recording.hooks.compiled import _recompiles_under_modes
    if _recompiles_under_modes():  # torch < 2.10: a new graph at each call, and said so
        assert recompiled and got.count("inductor::graph_0") == 1 and "inductor::graph_1" in got
    else:
        assert not recompiled and got.count("inductor::graph_0") == 2


@pytest.mark.parametrize("version, warns", [("2.9.1+cu128", True), ("2.10.0", False)])
def test_torch_that_recompiles_under_a_mode_is_named_once(monkeypatch, version, warns):
    # torch < 2.10 recompiles a compiled graph at every call under any
    # dispatch mode (measured on 2.4.1 and 2.9.1; see benchmarks/RESULTS.md)
    from torch.torch_version import TorchVersion
    monkeypatch.setattr(torch, "__version__", TorchVersion(version))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ctl.record(device="cpu", measure=False):
            s = recorder._ACTIVE
            for _ in range(2):  # two graphs, as a recompiling torch makes them
                launch(s, lambda g, i: i[0] + 1, _Graph(), [torch.zeros(2)])
    ours = [w for w in seen if "recompiles a compiled graph" in str(w.message)]
    assert len(ours) == warns
    if warns:
        assert "torch 2.9.1" in str(ours[0].message) and "≥ 2.10" in str(ours[0].message)


def test_a_compiled_graph_takes_a_memory_reading_like_an_op(inductor_mlp):
    """What the graph's own kernels allocate (its outputs, its buffers)
    lands on its row, not on the next op's."""
    ref_loss, _ = inductor_mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with ctl.record(device=quiet_sim(), measure=False, memory=True) as rec:
            loss, _ = inductor_mlp()
    assert torch.equal(loss, ref_loss)
    tl = rec.timeline
    name = np.array(names(tl))
    graph = np.flatnonzero(np.char.startswith(name.astype(str), "inductor::graph_"))
    m = tl.memory
    read = {int(r): int(a) for r, a in zip(m.op, m.allocated)}
    assert graph[0] in read and read[graph[0]] > 0  # the forward's outputs at least


def test_simgpu_says_it_does_not_simulate_compiled_graphs():
    """Inductor compiles a graph over meta tensors to the allocation of its
    outputs: SimGPU has nothing to simulate, and the recording says so,
    once, in a warning and in meta["warnings"]."""
    def f(a, b):
        return torch.relu(a @ b) * 2
    cf = torch.compile(f)
    a = torch.randn(64, 64, device="meta")
    with torch.no_grad():
        cf(a, a)  # compiled before the recording
    with ctl.record(device=ctl.SimGPU("h100")) as rec, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch.no_grad():
            for _ in range(3):
                cf(a, a)
    said = [str(w.message) for w in seen if "not simulated" in str(w.message)]
    assert len(said) == 1
    assert rec.timeline.meta["warnings"] == [said[0].removeprefix("cutimeline: ")]
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        torch.relu(a @ a)  # nothing compiled: nothing said
    assert "warnings" not in rec.timeline.meta
