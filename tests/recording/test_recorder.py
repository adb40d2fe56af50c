"""The recorder: results unchanged, the op stream against torch.profiler,
module paths and autograd nodes, spans, threads, limits, misuse."""

import collections
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.devices.device import Device, Harvest
from cutimeline.timeline.schema import NONE, SCHEMA, EventKind, GpuKind, OpFlag, SpanKind

# -- models -----------------------------------------------------------------------

def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4)), torch.randn(5, 8)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                             dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2,
                                       enable_nested_tensor=False), torch.randn(2, 5, 16)


def convnet():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)), torch.randn(2, 3, 8, 8)


MODELS = {"mlp": mlp, "transformer": transformer, "conv": convnet}


def train(make, steps=2, recorder=None):
    """Seeded training steps; losses and every parameter's gradient."""
    torch.manual_seed(0)
    model, x = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses, grads = [], []
    with recorder if recorder is not None else _null():
        for _ in range(steps):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.detach().clone())
            grads.append([p.grad.clone() for p in model.parameters()])
            loss.item()  # a host-blocking op
    return losses, grads


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def quiet_sim():
    return ctl.SimGPU("h100", cost=lambda *a: 500, pings=1, owns=("cpu", "meta"))


def names(tl, col="name", table="ops"):
    return list(tl.decode(tl.table(table)[col]))


# -- results are unchanged ------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "sim"])
@pytest.mark.parametrize("model", list(MODELS))
def test_losses_and_gradients_are_bit_identical(model, device):
    ref_losses, ref_grads = train(MODELS[model])
    rec = ctl.record(device=quiet_sim() if device == "sim" else "cpu", measure=False)
    losses, grads = train(MODELS[model], recorder=rec)
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    assert all(torch.equal(a, b) for ga, gb in zip(grads, ref_grads)
               for a, b in zip(ga, gb))
    tl = rec.timeline
    assert len(tl.ops) > 20
    if device == "sim":
        launched = (tl.ops.flags & OpFlag.LAUNCH) != 0
        assert launched.any() and len(tl.gpu) == launched.sum()
        assert tl.aligned


# -- the op stream against torch.profiler ------------------------------------------------

def _composite_implicit(name):
    """True when every overload of a profiler event's op (out variants aside)
    decomposes at CompositeImplicitAutograd, above the dispatch mode."""
    ns, op = name.split("::")
    packet = getattr(getattr(torch.ops, ns), op)
    found = []
    for o in packet.overloads():
        if "out" in o:
            continue
        try:
            found.append(torch._C._dispatch_has_kernel_for_dispatch_key(
                name if o == "default" else f"{name}.{o}", "CompositeImplicitAutograd"))
        except RuntimeError:  # listed but not registered
            pass
    return bool(found) and all(found)


def profiler_leaf_ops(events):
    """The profiler events that correspond to what the dispatch mode sees:
    walking each event tree from its roots, an aten event that does not
    decompose at CompositeImplicitAutograd is one op the mode sees, and the
    ops it calls inside its kernel are not; a decomposing event (aten::linear)
    and non-aten events (autograd nodes, record_function ranges) are looked
    through to their children."""
    seen = collections.Counter()

    def walk(e):
        if e.name.startswith("aten::") and not _composite_implicit(e.name):
            seen[e.name] += 1
            return
        for c in e.cpu_children:
            walk(c)
    for e in events:
        if e.cpu_parent is None:
            walk(e)
    return seen


class _Counting(TorchDispatchMode):
    """A pass-through mode that counts the ops it sees by base name."""

    def __init__(self):
        super().__init__()
        self.seen, self.accumulate_detaches = collections.Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        base = func.name().split(".")[0]
        self.seen[base] += 1
        node = torch._C._current_autograd_node()
        if base == "aten::detach" and node is not None and \
                node.name() == "torch::autograd::AccumulateGrad":
            self.accumulate_detaches += 1
        return func(*args, **(kwargs or {}))


def _accumulate_detaches(events) -> int:
    return sum(e.name == "aten::detach" and e.cpu_parent is not None and
               e.cpu_parent.name == "torch::autograd::AccumulateGrad" for e in events)


@pytest.mark.parametrize("model", list(MODELS))
def test_recorded_ops_equal_the_profilers_leaf_ops(model):
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    net, x = MODELS[model]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
    step()  # warm: lazy state is made outside both runs
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    expected = profiler_leaf_ops(prof.events())
    ranges = [e.name for e in prof.events() if "#" in e.name]  # record_function
    with _Counting() as bare:  # what any dispatch mode sees
        step()
    with ctl.record(device="cpu", measure=False) as rec:
        step()
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    ops["base"] = ops.name.str.split(".").str[0]
    got = collections.Counter(ops.base[ops.base.str.startswith("aten::")])
    # 0. exactly the ops a pass-through dispatch mode sees
    assert collections.Counter(ops.base) == bare.seen

    # Every difference comes from the dispatch mode being active; each is
    # reproduced by the profiler itself when a bare mode is on (not shown):
    # 1. autograd saves an op's *output* for backward as a detached alias
    #    (aten::detach in forward, right after the op) and unpacks it with
    #    another aten::detach in the backward node. Without a mode only
    #    AccumulateGrad detaches.
    det = ops[ops.base == "aten::detach"]
    saved = det[det.grad_fn == ""]
    unpacked = det[(det.grad_fn != "") & (det.grad_fn != "torch::autograd::AccumulateGrad")]
    assert len(saved) == len(unpacked)
    got["aten::detach"] -= len(saved) + len(unpacked)
    # 2. on older torch (seen on 2.4) AccumulateGrad detaches each new
    #    gradient twice under a mode, and the profiler lists one of the two
    #    (on 2.13 it lists both)
    accumulated = (det.grad_fn == "torch::autograd::AccumulateGrad").sum()
    assert accumulated == bare.accumulate_detaches
    got["aten::detach"] -= accumulated - _accumulate_detaches(prof.events())
    # 3. for "composite compliance" under a mode, the autograd engine's
    #    gradient accumulation and aten::linear's bias on 3-d inputs add out
    #    of place (aten::add) where they otherwise add in place (aten::add_).
    moved = got["aten::add"] - expected["aten::add"]
    assert moved >= 0 and expected["aten::add_"] - got["aten::add_"] == moved
    got["aten::add"] -= moved
    got["aten::add_"] += moved
    # 4. likewise reshape (CompositeImplicit) makes aten::view instead of
    #    aten::_reshape_alias.
    aliased = expected["aten::_reshape_alias"]
    assert got["aten::view"] - expected["aten::view"] == aliased
    got["aten::view"] -= aliased
    got["aten::_reshape_alias"] += aliased
    assert +got == +expected
    # 5. record_function ranges (Optimizer.step#SGD.step) are ops to the mode
    enter = (ops.base == "profiler::_record_function_enter_new").sum()
    assert enter == len(ranges) > 0
    assert set(ops.base) - set(got) - {"profiler::_record_function_enter_new",
                                       "profiler::_record_function_exit"} == set()


# -- what each op carries ------------------------------------------------------------

def test_backward_ops_carry_their_autograd_node_forward_ops_their_module():
    torch.manual_seed(0)
    net, x = transformer()
    with ctl.record(device="cpu", measure=False) as rec:
        net(x).sum().backward()
    ops = rec.timeline.to_pandas("ops")
    forward = ops[ops.grad_fn == ""]
    assert "layers.0.self_attn" in set(forward.module)
    assert {"layers.1.linear1", "layers.1.linear2"} <= set(forward.module)
    mm = forward[forward.name == "aten::addmm"]
    assert set(mm.module) >= {"layers.0.linear1", "layers.0.linear2"}
    backward = ops[ops.grad_fn != ""]
    assert {"AddmmBackward0", "ReluBackward0", "torch::autograd::AccumulateGrad"} \
        <= set(backward.grad_fn)
    assert (backward.module == "").all()
    depth = dict(zip(forward.module, forward.depth))
    assert depth["layers.0.self_attn"] == 2 and depth["layers.0"] == 1
    # every op inside the backward span carries a node
    s = rec.timeline.spans
    b = s.kind == SpanKind.BACKWARD
    inside = (ops.host_begin_ns >= s.begin_ns[b][0]) & (ops.host_end_ns <= s.end_ns[b][0])
    assert inside.sum() == len(backward) and (ops.grad_fn[inside] != "").all()


def test_root_modules_own_ops_get_its_class_name():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.enc(x).relu() * 2

    with ctl.record(device="cpu", measure=False) as rec:
        Net()(torch.ones(2, 3))
    ops = rec.timeline.to_pandas("ops")
    assert set(ops.module[ops.name == "aten::addmm"]) == {"enc"}
    assert set(ops.module[ops.name == "aten::relu"]) == {"Net"}
    assert set(ops.depth[ops.name == "aten::relu"]) == {0}
    assert set(ops.depth[ops.module == ""]) == {NONE}


def test_a_forward_that_raises_leaves_the_module_stack_clean():
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    outer = torch.nn.Sequential(torch.nn.Linear(2, 2), Boom())
    inner = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with ctl.record(device="cpu", measure=False) as rec:
        with pytest.raises(ValueError):
            outer(torch.ones(1, 2))
        inner(torch.ones(1, 2))
    ops = rec.timeline.to_pandas("ops")
    assert list(ops.module[ops.name == "aten::addmm"]) == ["0", "0"]
    assert list(ops.depth[ops.name == "aten::addmm"]) == [1, 1]


def test_shapes_and_views():
    x = torch.ones(2, 3)
    with ctl.record(device=quiet_sim(), measure=False) as rec:
        y = x.view(3, 2)
        torch.cat([y, y])
        y.t()
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    assert list(ops.name) == ["aten::view", "aten::cat", "aten::t"]
    assert list(ops.shapes) == ["f32[2,3]", "f32[3,2], f32[3,2]", "f32[3,2]"]
    view = (tl.ops.flags & OpFlag.VIEW) != 0
    assert list(view) == [True, False, True]
    # only the cat launched: one gpu row, bracketed by its own events
    assert len(tl.gpu) == 1 and tl.gpu.op[0] == 1
    assert tl.string(tl.gpu["name"][0]) == "aten::cat"
    b, e = tl.gpu.begin_event[0], tl.gpu.end_event[0]
    assert tl.events.kind[b] == EventKind.BEGIN and tl.events.kind[e] == EventKind.END
    assert tl.events.op[b] == tl.events.op[e] == 1
    # launched when its dispatch returned; BEGIN was recorded as it began
    assert tl.gpu.launch_ns[0] == tl.ops.host_end_ns[1] >= tl.events.host_record_ns[b]
    assert ops.stream[1] == 0 and ops.device[1] == 0 and ops.stream[0] == NONE


# -- device protocol and host-blocking ops --------------------------------------------------

class Probe(Device):
    """A device that owns ``meta`` tensors and logs the recorder's calls."""
    kind = "probe"

    def __init__(self):
        self.calls, self.n = [], 0

    def owns(self, device):
        return getattr(device, "type", None) == "meta"

    def start(self):
        self.calls.append("start")

    def current_stream(self):
        return 7

    def begin(self, stream, seq):
        self.calls.append(("begin", seq))
        self.n += 1
        return self.n - 1

    def end(self, stream, seq, func, args, kwargs, out):
        self.calls.append(("end", seq))
        self.n += 1
        return self.n - 1

    def wait(self, stream):
        self.calls.append(("wait", stream))

    def note_sync(self, kind, stream, seq, host_begin_ns, host_end_ns):
        self.calls.append(("sync", kind, stream, seq))

    def harvest(self):
        self.calls.append("harvest")
        n = self.n
        ev = {"device": np.zeros(n), "stream": np.full(n, 7), "kind": np.zeros(n),
              "op": np.full(n, NONE), "raw_ns": np.arange(n), "host_record_ns": np.arange(n)}
        sy = {k: np.zeros(0, np.int64) for k in ("op", "device", "stream", "last_event",
                                                 "host_begin_ns", "host_end_ns")}
        sy["kind"] = np.zeros(0, object)
        return Harvest(ev, sy, {"device_name": "probe"})


def test_launch_order_and_blocking_copies():
    dev = Probe()
    x = torch.ones(4)
    with pytest.warns(RuntimeWarning, match="could not align"), \
            ctl.record(device=dev, measure=False) as rec:
        m = x.to("meta")                      # host→device, blocking
        x.to("meta", non_blocking=True)       # host→device, not blocking
        m + m                                 # device op
        x + x                                 # host op: not the device's
    seqs = [c[1] for c in dev.calls if isinstance(c, tuple)]
    assert dev.calls[0] == "start" and dev.calls[-1] == "harvest"
    assert dev.calls[1:5] == [("begin", 0), ("wait", 7),
                              ("sync", "aten::_to_copy", 7, 0), ("end", 0)]
    assert dev.calls[5:7] == [("begin", 1), ("end", 1)]
    assert 3 not in seqs
    flags = rec.timeline.ops.flags
    assert [bool(f & OpFlag.SYNC) for f in flags] == [True, False, False, False]
    assert [bool(f & OpFlag.LAUNCH) for f in flags] == [True, True, True, False]
    assert "no sync" in rec.timeline.meta["align_error"] and not rec.timeline.aligned


def test_sim_syncs_are_flagged_and_noted():
    with ctl.record(device=quiet_sim(), measure=False) as rec:
        x = torch.arange(6.0)
        x.sum().item()
        torch.nonzero(x)
        x[x > 2]
        x.nonzero_static(size=2)
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    sync = ops[(tl.ops.flags & OpFlag.SYNC) != 0]
    assert list(sync.name) == ["aten::_local_scalar_dense", "aten::nonzero", "aten::index.Tensor"]
    y = tl.to_pandas("syncs")
    y = y[y.kind != "ping"]
    assert list(y.op) == list(sync.index) and list(y.kind) == list(sync.name)
    spans = tl.to_pandas("spans")
    assert (spans.kind == "sync").sum() == 3


def test_capture_returns_no_event_and_flags_the_op():
    class Capturing(Probe):
        def begin(self, stream, seq):
            return NONE
    dev = Capturing()
    with ctl.record(device=dev, measure=False) as rec:
        torch.ones(2, device="meta") * 2
    assert rec.timeline.meta["aligned"]  # no gpu rows: nothing to align
    tl = rec.timeline
    assert all(f & OpFlag.CAPTURED and not f & OpFlag.LAUNCH for f in tl.ops.flags)
    assert not any(isinstance(c, tuple) and c[0] == "end" for c in dev.calls)
    assert len(tl.gpu) == 0


def test_dataloader_fetch_is_host_work_and_unchanged():
    data = tud.TensorDataset(torch.arange(20.0).reshape(10, 2))

    def batches():
        g = torch.Generator().manual_seed(3)
        return [b[0] for b in tud.DataLoader(data, batch_size=4, shuffle=True, generator=g)]
    ref = batches()
    with ctl.record(device=quiet_sim(), measure=False) as rec:
        got = batches()
        for b in got:
            b * 2
    assert all(torch.equal(a, b) for a, b in zip(got, ref)) and len(got) == len(ref)
    tl = rec.timeline
    ops, spans = tl.to_pandas("ops"), tl.to_pandas("spans")
    data_spans = spans[spans.kind == "data"]
    assert list(data_spans.name).count("next(DataLoader)") == len(ref) + 1  # + StopIteration
    assert list(data_spans.name).count("iter(DataLoader)") == 1
    launched = (tl.ops.flags & OpFlag.LAUNCH) != 0
    stack = (ops.name == "aten::stack").values
    # the first fetch is recorded whole, as host work; it launched nothing, so
    # the later ones run off the recorder (fetches.py): one DATA span each
    assert stack.sum() == 1 and not launched[stack].any()
    assert launched[(ops.name == "aten::mul.Tensor").values].all()


# -- spans --------------------------------------------------------------------------------

def _steps(tl):
    s = tl.to_pandas("spans")
    return s[s.kind == "step"].sort_values("begin_ns")


def test_optimizer_steps_make_contiguous_step_spans():
    losses = train(mlp, steps=3, recorder=(rec := ctl.record(device="cpu", measure=False)))
    assert len(losses[0]) == 3
    steps = _steps(rec.timeline)
    assert list(steps.number) == [0, 1, 2]
    assert (steps.end_ns.values[:-1] <= steps.begin_ns.values[1:]).all()
    assert steps.begin_ns.iloc[0] >= rec.timeline.meta["start_host_ns"] - 10**6
    spans = rec.timeline.to_pandas("spans")
    assert list(spans.name[spans.kind == "optimizer"]) == ["SGD.step"] * 3
    assert (spans.kind == "backward").sum() == 3 and (spans.kind == "forward").sum() == 3


@pytest.mark.parametrize("steps,expect", [("auto", [0, 1, 2]), ("manual", [0]),
                                          ("optimizer", [0, 1, 2, 3])])
def test_step_modes(steps, expect):
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    with ctl.record(device="cpu", measure=False, steps=steps) as rec:
        for _ in range(2):
            p.sum().backward()
            opt.step()
        rec.step()
        opt.step()  # in "auto", ignored once rec.step() was called
        opt.step()
    assert list(_steps(rec.timeline).number) == expect


def test_user_spans_nest_and_decorate():
    @ctl.span("decorated")
    def work():
        return torch.ones(2) + 1

    assert torch.equal(work(), torch.full((2,), 2.0))  # no recorder: plain call
    with ctl.span("outside"):
        pass
    with ctl.record(device="cpu", measure=False) as rec:
        with ctl.span("outer"):
            with ctl.span("inner"):
                work()
    s = rec.timeline.to_pandas("spans")
    u = s[s.kind == "user"].set_index("name")
    assert list(u.depth[["outer", "inner", "decorated"]]) == [0, 1, 2]
    assert u.begin_ns["outer"] <= u.begin_ns["inner"] <= u.begin_ns["decorated"]
    assert u.end_ns["decorated"] <= u.end_ns["inner"] <= u.end_ns["outer"]
    with pytest.raises(CutimelineError, match="name"):
        ctl.span("")


# -- threads ---------------------------------------------------------------------------------

def test_threads_started_while_recording_are_recorded_without_mixing_rows():
    barrier = threading.Barrier(2)
    shapes = {"A": (3, 5), "B": (7, 2)}

    def work(tag):
        x = torch.ones(*shapes[tag])
        for i in range(300):
            if i % 10 == 0:  # meet now and then, so the rows surely interleave
                barrier.wait()
            torch.relu(x) if tag == "A" else torch.neg(x)

    import sys
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: their ops interleave
    try:
        with ctl.record(device="cpu", measure=False) as rec:
            threads = [threading.Thread(target=work, args=(t,), name=f"worker-{t}")
                       for t in "AB"]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
    tl = rec.timeline
    ops = tl.to_pandas("ops")
    names_by_thread = {tl.meta["threads"][t]: set(zip(g.name, g.shapes))
                       for t, g in ops.groupby("thread")}
    assert names_by_thread["worker-A"] == {("aten::ones", ""), ("aten::relu", "f32[3,5]")}
    assert names_by_thread["worker-B"] == {("aten::ones", ""), ("aten::neg", "f32[7,2]")}
    assert (np.diff(tl.ops.seq) > 0).all()
    assert len(set(tl.ops.seq)) == len(ops) == 602
    # the threads ran at the same time: their rows interleave in seq order
    t = tl.ops.thread
    assert (np.diff(t) != 0).sum() >= 29


def test_backward_in_a_recorded_thread_carries_nodes():
    lin = torch.nn.Linear(3, 3)

    def work():
        lin(torch.ones(2, 3)).sum().backward()

    with ctl.record(device="cpu", measure=False) as rec:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    ops = rec.timeline.to_pandas("ops")
    assert "AddmmBackward0" in set(ops.grad_fn) and set(ops.thread) == {1}


# -- torch.compile ---------------------------------------------------------------------------

def test_torch_compile_under_the_recorder():
    torch.manual_seed(0)
    net, x = mlp()
    ref = net(x)
    torch._dynamo.reset()
    compiled = torch.compile(net, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: global module hooks
        with ctl.record(device="cpu", measure=False) as rec:
            out = compiled(x)
            out.sum().backward()
    assert torch.equal(out, ref)
    got = set(names(rec.timeline))
    assert {"aten::addmm", "aten::relu", "aten::mm"} <= got  # the artifact's ops


def test_waits_no_op_made_carry_the_thread_that_waited():
    gpu = quiet_sim()
    x = torch.ones(4)

    def work():
        (x * 2).sum()
        gpu.synchronize()
    with ctl.record(device=gpu, measure=False) as rec:
        x + 1
        t = threading.Thread(target=work)
        t.start()
        t.join()
        gpu.synchronize()
        x.sum().item()
    tl = rec.timeline
    y, kinds = tl.syncs, np.array(names(tl, "kind", "syncs"))
    free = np.flatnonzero(kinds == "synchronize")
    assert sorted(y.thread[free].tolist()) == [0, 1]  # the worker, then main
    assert y.thread[free][np.argmax(y.host_begin_ns[free])] == 0
    worker = np.unique(tl.ops.thread[tl.ops.thread != 0])
    assert worker.tolist() == [1]
    item = np.flatnonzero(y.op >= 0)  # .item(): its op's thread
    assert len(item) and (y.thread[item] == tl.ops.thread[y.op[item]]).all()


# -- limits, exceptions, the kill switch ---------------------------------------------------------

def test_exception_propagates_unchanged_and_ops_are_kept():
    class Mine(Exception):
        pass
    err = Mine("mine")
    rec = ctl.record(device="cpu", measure=False)
    with pytest.raises(Mine) as caught:
        with rec:
            torch.ones(3).sum()
            torch.zeros(2).neg()
            raise err
    assert caught.value is err
    assert names(rec.timeline) == ["aten::ones", "aten::sum", "aten::zeros", "aten::neg"]
    assert torch._C._len_torch_dispatch_stack() == 0


def test_an_op_that_raises_is_kept():
    with ctl.record(device="cpu", measure=False) as rec:
        with pytest.raises(RuntimeError):
            torch.mm(torch.ones(2, 3), torch.ones(2, 3))
    assert names(rec.timeline) == ["aten::ones", "aten::ones", "aten::mm"]


def test_max_ops_truncates_once_and_the_program_goes_on():
    x, gpu = torch.ones(3), quiet_sim()  # made outside: it owns CPU tensors (a warning)
    with pytest.warns(RuntimeWarning, match="max_ops=10") as caught:
        with ctl.record(device=gpu, max_ops=10, measure=False) as rec:
            for _ in range(30):
                x = x + 1
    assert len(caught) == 1
    assert torch.equal(x, torch.full((3,), 31.0))
    tl = rec.timeline
    assert tl.truncated and len(tl.ops) == 11
    assert tl.ops.flags[-1] & OpFlag.TRUNCATED and not tl.ops.flags[-1] & OpFlag.LAUNCH
    assert not (tl.ops.flags[:-1] & OpFlag.TRUNCATED).any()
    assert len(tl.gpu) == 10


def _spans_and_steps(n, max_ops=100):
    """``n`` named spans and steps under ``max_ops``, inside one outer
    span; the Timeline and the Python memory it took at its peak."""
    import tracemalloc
    x = torch.ones(3)
    tracemalloc.start()
    try:
        with ctl.record(device="cpu", max_ops=max_ops, measure=False, steps="manual") as rec:
            with ctl.span("outer"):
                for i in range(n):
                    with ctl.span(f"span {i}"):
                        x = x + 1
                    rec.step()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert torch.equal(x, torch.full((3,), 1.0 + n))  # the program went on
    return rec.timeline, peak


def test_max_ops_caps_spans_and_steps_and_their_names():
    with pytest.warns(RuntimeWarning):  # the first dispatch mode's imports: not counted
        _spans_and_steps(10, max_ops=1)
    with pytest.warns(RuntimeWarning, match="max_ops=100 spans") as caught:
        tl, peak = _spans_and_steps(20_000)
    assert len(caught) == 1 and tl.truncated and "TRUNCATED" in repr(tl)
    # the first 100 spans are kept, and those open across the cut with their
    # true ends (the step and "outer"); not the one past the cap, none that
    # begins after the cut
    assert len(tl.spans) == 100 + 2
    assert tl.meta["truncated_by"] == "spans" and tl.meta["max_ops"] == 100
    spans = tl.to_pandas("spans")
    outer = spans[spans.name == "outer"]
    assert len(outer) == 1 and outer.end_ns.iloc[0] == spans.end_ns.max()
    assert spans.kind.value_counts()["step"] < 60 and tl.spans.number.max() < 60
    assert len(tl.ops) < 60 and not (tl.ops.flags & OpFlag.TRUNCATED).any()
    assert len(tl.strings) < 150  # no name interned after the cut
    # unbounded, its 40,000 spans and 20,000 names held 14 MB at the peak
    with pytest.warns(RuntimeWarning, match="max_ops=100 spans"):
        small, small_peak = _spans_and_steps(200)
    assert len(small.spans) == len(tl.spans) and peak < small_peak + 200_000


def test_200k_user_spans_under_max_ops_1000_keep_at_most_1000_and_say_so():
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.warns(RuntimeWarning, match="max_ops=1,000 spans") as caught:
            with ctl.record(device="cpu", max_ops=1000, measure=False) as rec:
                for i in range(200_000):
                    with ctl.span(f"span {i}"):
                        pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    tl = rec.timeline
    assert len(caught) == 1 and len(tl.spans) == 1000 <= tl.meta["max_ops"]
    assert tl.truncated and tl.meta["truncated_by"] == "spans"
    assert tl.decode(tl.spans["name"]).tolist() == [f"span {i}" for i in range(1000)]
    assert len(tl.strings) < 1100  # no name interned after the cut
    assert peak < 2_000_000  # bytes: what 1,000 spans need, not 200,000
    summary = ctl.analyze(tl).summary()
    assert ("TRUNCATED: the recording stopped at max_ops (1,000 spans); nothing after "
            "that point is in it") in summary


def test_an_uncut_recording_says_nothing_of_a_cut():
    with ctl.record(device="cpu", measure=False) as rec:
        with ctl.span("one"):
            torch.ones(2).sum()
    assert not rec.timeline.truncated and "truncated_by" not in rec.timeline.meta
    assert "TRUNCATED" not in ctl.analyze(rec.timeline).summary()


def test_a_cut_by_ops_ends_the_spans_too():
    x = torch.ones(3)
    with pytest.warns(RuntimeWarning, match="max_ops=10 ops"):
        with ctl.record(device="cpu", max_ops=10, measure=False) as rec:
            for i in range(1000):
                with ctl.span("each"):
                    for _ in range(5):
                        x = x + 1
                rec.step()
    assert torch.equal(x, torch.full((3,), 5001.0))
    tl = rec.timeline
    assert tl.truncated and len(tl.ops) == 11 and tl.ops.flags[-1] & OpFlag.TRUNCATED
    assert tl.meta["truncated_by"] == "ops" and tl.meta["max_ops"] == 10
    assert len(tl.spans) == 2 * 3  # the third span and step were open at the cut
    assert tl.spans.begin_ns.max() < tl.ops.host_end_ns[-1]  # none begins after the cut


def test_disable_switch(monkeypatch):
    monkeypatch.setenv("CUTIMELINE_DISABLE", "1")
    with ctl.record(device="cuda") as rec:  # not resolved: no error without CUDA
        assert torch._C._len_torch_dispatch_stack() == 0
        with ctl.span("x"):
            torch.ones(2) + 1
        rec.step()
    tl = rec.timeline
    assert len(tl.ops) == len(tl.spans) == 0 and tl.meta["disabled"]


# -- misuse leaves nothing corrupted --------------------------------------------------------------

def _global_state():
    import torch.nn.modules.module as m
    import torch.optim.optimizer as o
    return (len(m._global_forward_pre_hooks), len(m._global_forward_hooks),
            len(o._global_optimizer_pre_hooks), len(o._global_optimizer_post_hooks),
            tud.dataloader._BaseDataLoaderIter.__dict__["__next__"],
            tud.DataLoader.__dict__["__iter__"], torch.autograd._engine_run_backward,
            threading.Thread.__dict__["start"], torch.cuda.synchronize,
            torch.cuda.Event.__dict__["record"], torch.cuda.CUDAGraph.__dict__["replay"],
            torch._C._len_torch_dispatch_stack())


def test_misuse_errors_and_clean_state():
    before = _global_state()
    rec = ctl.record(device="cpu", measure=False)
    with pytest.raises(CutimelineError, match="not recording"):
        rec.stop()
    with pytest.raises(CutimelineError, match="after stop"):
        rec.timeline
    with pytest.raises(CutimelineError, match="not recording"):
        rec.step()
    rec.start()
    assert _global_state() != before
    with pytest.raises(CutimelineError, match="already recording"):
        rec.start()
    other = ctl.record(device="cpu", measure=False)
    with pytest.raises(CutimelineError, match="do not nest"):
        other.start()
    torch.ones(2) * 3
    rec.stop()
    assert _global_state() == before
    assert names(rec.timeline) == ["aten::ones", "aten::mul.Tensor"]
    with pytest.raises(CutimelineError, match="stopped already"):
        rec.stop()
    with pytest.raises(CutimelineError, match="already recorded"):
        rec.start()
    with other:  # the refused one was left untouched and still works
        torch.ones(1)
    assert names(other.timeline) == ["aten::ones"]
    assert _global_state() == before


def test_a_stopped_recording_is_freed_without_the_garbage_collector():
    import gc
    import weakref
    gc.collect()
    gc.disable()
    try:
        rec = ctl.record(device="cpu", measure=False).start()
        session = weakref.ref(rec._session)
        with ctl.span("left open"):
            net, x = mlp()
            net(x).sum().backward()
            rec.stop()
        assert session() is None  # no reference cycle keeps it
    finally:
        gc.enable()


def test_stop_from_another_thread_is_refused():
    rec = ctl.record(device="cpu", measure=False).start()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(CutimelineError, rec.stop)))
    t.start()
    t.join()
    assert errors and "thread" in str(errors[0].value)
    rec.stop()
    assert torch._C._len_torch_dispatch_stack() == 0


@pytest.mark.parametrize("kwargs,match", [
    ({"device": "tpu"}, "device='tpu'"), ({"device": 3}, "device=3"),
    ({"max_ops": 0}, "max_ops=0"), ({"max_ops": 2.5}, "max_ops=2.5"),
    ({"modules": 1}, "modules=1"), ({"steps": "epoch"}, "steps='epoch'"),
    ({"measure": None}, "measure=None"), ({"stack": "yes"}, "stack='yes'.*True or False"),
    ({"memory": 1}, "memory=1.*True or False")])
def test_bad_options_are_named(kwargs, match):
    with pytest.raises(CutimelineError, match=match):
        ctl.record(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(CutimelineError, match="torch.cuda.is_available"):
        ctl.record(device="cuda:0")
    assert ctl.record(device="auto", measure=False).device is None


def test_keyword_only():
    with pytest.raises(TypeError):
        ctl.record("cpu")


# -- meta, save and load ------------------------------------------------------------------------

def test_meta():
    with ctl.record(device="cpu") as rec:
        torch.ones(2) + 1
    m = rec.timeline.meta
    assert m["source"] == "record" and m["threads"] == ["MainThread"]
    assert set(m["versions"]) == {"cutimeline", "torch", "python"}
    assert isinstance(m["overhead_ns_per_op"], int) and m["overhead_ns_per_op"] >= 0
    assert m["overhead_ns_per_launch"] is None and m["truncated"] is False
    assert m["options"]["device"] == "cpu" and m["devices"] == []
    assert m["start_epoch_ns"] > 1.6e18 and m["start_host_ns"] <= rec.timeline.ops.host_begin_ns[0]


def test_save_load_round_trip(tmp_path):
    rec = ctl.record(device=quiet_sim(), measure=False)
    train(mlp, steps=2, recorder=rec)
    tl = rec.timeline
    path = tmp_path / "run.ctl"
    tl.save(path)
    back = ctl.load(path)
    assert back.strings == tl.strings and back.meta == tl.meta
    for name in SCHEMA:
        a, b = tl.table(name), back.table(name)
        assert len(a) == len(b)
        for col in a.columns:
            assert np.array_equal(a[col], b[col]), (name, col)
    assert len(tl.gpu) and len(tl.events) and len(tl.syncs) and len(tl.truth)
    assert (tl.gpu.kind == GpuKind.OP).all()


def test_meta_holds_the_cost_model_and_its_calibrations(monkeypatch):
    import cutimeline.recording.recorder as recorder
    monkeypatch.setattr(recorder, "CALIBRATE_EVERY_NS", 1)  # at each step boundary
    torch.manual_seed(2)
    state = torch.get_rng_state()
    x = torch.ones(3)
    with ctl.record(device="cpu", steps="manual") as rec:
        y = (x * 2.0).sum()
        rec.step()
        z = torch.cat([x, x]).relu()
        rec.step()
    assert torch.equal(state, torch.get_rng_state())
    assert y.item() == 6.0 and z.tolist() == [1.0] * 6
    tl = rec.timeline
    m = tl.meta
    assert {"op_ns", "float_ns", "list_ns", "module_ns", "probe_ns"} <= set(m["overhead_model"])
    # two boundaries and the stop: three calibrations, all outside the steps
    cal = np.array(m["overhead_calibrations"])
    assert cal.shape == (3, 3) and (cal[:, 1] >= cal[:, 0]).all()
    steps = tl.spans.kind == SpanKind.STEP
    for b, e, _ in cal:
        assert not ((tl.spans.begin_ns[steps] < e) & (tl.spans.end_ns[steps] > b)).any()
    # every recorded op name and shapes is priced
    by = m["overhead_ns_by_signature"]
    pairs = set(zip(by["name"], by["shapes"]))
    assert pairs == set(zip(tl.ops["name"].tolist(), tl.ops["shapes"].tolist()))
    assert isinstance(m["overhead_ns_per_op"], int) and min(by["ns"]) >= 0
    assert ctl.analyze(tl).compensation["removed_ns"] > 0


def test_measure_false_has_no_cost_model():
    with ctl.record(device="cpu", measure=False) as rec:
        torch.ones(2) + 1
    m = rec.timeline.meta
    assert m["overhead_model"] is None and m["overhead_calibrations"] == []
    assert "overhead_ns_by_signature" not in m and ctl.analyze(rec.timeline).compensation is None


def test_calibrations_leave_no_trace_in_the_recording(monkeypatch):
    import cutimeline.recording.recorder as recorder
    monkeypatch.setattr(recorder, "CALIBRATE_EVERY_NS", 1)  # at each step boundary
    net = torch.nn.Linear(4, 2)
    with ctl.record(device="cpu", steps="manual") as rec:
        for _ in range(2):
            net(torch.ones(3, 4)).sum().backward()
            rec.step()
    tl = rec.timeline
    assert len(tl.meta["overhead_calibrations"]) == 3
    kinds = collections.Counter(tl.spans.kind.tolist())
    assert kinds[SpanKind.MODULE] == 2 and kinds[SpanKind.BACKWARD] == 2
    assert set(tl.decode(tl.spans["name"][tl.spans.kind == SpanKind.MODULE])) == {"Linear"}
    # the probe's own ops (a 4×8 input) were not recorded
    assert not any("[4,8]" in s for s in tl.decode(tl.ops["shapes"]))


def test_calibrations_run_inside_optimizer_steps_and_inference_mode(monkeypatch):
    import cutimeline.recording.recorder as recorder
    monkeypatch.setattr(recorder, "CALIBRATE_EVERY_NS", 1)
    net = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ctl.record(device="cpu") as rec:
            net(torch.ones(2, 3)).sum().backward()
            opt.step()  # its post hook ends the step under no_grad
            with torch.inference_mode():
                rec.step()
    assert len(rec.timeline.meta["overhead_calibrations"]) == 3


def test_a_failing_calibration_warns_once_and_the_program_goes_on(monkeypatch):
    import cutimeline.recording.recorder as recorder

    def broken(model):
        def ratio(pairs):
            raise ValueError("no luck")
        return ratio
    monkeypatch.setattr(recorder, "CALIBRATE_EVERY_NS", 1)
    monkeypatch.setattr(recorder, "calibrator", broken)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with ctl.record(device="cpu", steps="manual") as rec:
            y = torch.ones(2) * 3
            rec.step()
            rec.step()
    said = [str(w.message) for w in got if "could not measure its own cost" in str(w.message)]
    assert len(said) == 1 and "ValueError: no luck" in said[0]
    assert y.tolist() == [3.0, 3.0]
    assert rec.timeline.meta["overhead_calibrations"] == []
    assert ctl.analyze(rec.timeline).compensation is not None  # start-up figures


_THREAD_LEFT_RECORDING = """
import threading, torch, cutimeline as ctl
def work():
    ctl.record().start()
    x = torch.randn(32, 32)
    for _ in range(5):
        x = x @ x
t = threading.Thread(target=work)
t.start()
t.join()
"""


def test_a_thread_that_ends_recording_leaves_a_clean_exit_and_a_stoppable_recording():
    # The mode left on a dead thread's dispatch stack was freed by a C++
    # thread-local destructor racing interpreter shutdown: exit 134, about
    # one run in two. Three runs, and the deterministic half below.
    import subprocess
    import sys
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _THREAD_LEFT_RECORDING],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert "ended without stopping it" in run.stderr
    recs = []

    def work():
        recs.append(ctl.record(measure=False).start())
        x = torch.randn(16, 16)
        for _ in range(4):
            x = x @ x
    with pytest.warns(RuntimeWarning, match="ended without stopping it"):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    rec = recs[0].stop()  # from another thread: its own has ended
    names = set(rec.timeline.decode(rec.timeline.ops["name"]))
    assert "aten::mm" in names
    with ctl.record(measure=False) as again:  # nothing is left active
        torch.ones(2) + 1
    assert len(again.timeline.ops)


def test_record_inside_a_compiled_function_is_a_sentence():
    # dynamo traced the recorder's own code and failed in it (a RuntimeError
    # from numpy under dynamo); then it ran it eagerly with its frame
    # callback still set, compiling each of the recorder's frames.
    @torch.compile(backend="eager")
    def recorded_inside(x):
        with ctl.record(measure=False):
            y = x * 2
        return y

    rec = ctl.record(measure=False)

    @torch.compile(backend="eager")
    def started_inside(x):
        rec.start()
        return x * 2

    for fn in (recorded_inside, started_inside):
        torch._dynamo.reset()
        with pytest.raises(CutimelineError, match="torch.compile is compiling"):
            fn(torch.randn(4))
    with ctl.record(measure=False) as around:  # the way the sentence says
        recorded = torch.compile(lambda x: x * 2, backend="eager")
        recorded(torch.randn(4))
    assert "aten::mul.Tensor" in set(around.timeline.decode(around.timeline.ops["name"]))
