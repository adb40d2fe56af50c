"""Source lines: host-blocking ops, collectives, DataLoader fetches and
SYNC spans (every op with stack=True) carry the user's file, line,
function and code line; torch's and cutimeline's frames are passed over."""

import contextlib
import functools
import os
import sys

import numpy as np
import torch

import cutimeline as ctl
from cutimeline.recording.measures.sources import SourceFinder, internal_file
from cutimeline.timeline.schema import NONE, OpFlag, SpanKind
from cutimeline.timeline.table import Strings


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def sources(tl):
    """(op name or span kind, file, line, function, code) per sources row."""
    s, out = tl.sources, []
    names = tl.decode(tl.ops["name"])
    for op, span, f, line, fn, code in zip(s.op, s.span, tl.decode(s.file), s.line,
                                           tl.decode(s.function), tl.decode(s.code)):
        what = names[op] if op >= 0 else SpanKind(int(tl.spans.kind[span])).name
        out.append((what, f, int(line), fn, code))
    return out


def test_internal_files_are_torch_cutimeline_and_the_plumbing_between():
    assert internal_file("<frozen runpy>") and internal_file("<frozen importlib._bootstrap>")
    import cutimeline.demo  # the demo plays the user's script
    assert not internal_file(cutimeline.demo.__file__)
    assert internal_file(torch.nn.functional.__file__)
    assert internal_file(ctl.__file__)
    assert internal_file(contextlib.__file__) and internal_file(functools.__file__)
    assert internal_file("<frozen importlib._bootstrap>")
    assert not internal_file(__file__)
    assert not internal_file("<stdin>")
    assert not internal_file(os.__file__)  # the rest of the standard library is the user's


def test_a_files_answer_is_worked_out_once_per_process(monkeypatch):
    # a new recording's first lookup reads no path again (realpath: a system
    # call per path component, most of a recording's source-lookup cost)
    def first_lookup():
        return SourceFinder(Strings(), __import__("threading").Lock()).find()
    first = first_lookup()   # this test's frame, a user frame
    assert first is not None and first[1] > 0
    calls = []
    monkeypatch.setattr(os.path, "realpath", lambda p: calls.append(p) or p)
    src = first_lookup()
    assert src[1] == first[1] and calls == []   # the same frame, no path read again


def test_the_finder_names_the_first_user_frame_and_caches_it():
    strings = Strings()
    finder = SourceFinder(strings, __import__("threading").Lock())

    def through_contextlib():
        with contextlib.nullcontext():
            return finder.find()  # called from here: this frame is the user's
    line = here() - 1
    src = through_contextlib()
    file, got, fn, code = src
    assert strings.values[file] == __file__ and got == line
    assert strings.values[fn].endswith("through_contextlib")
    assert strings.values[code] == "return finder.find()  # called from here: this frame is the user's"
    assert through_contextlib() is src  # interned once per (code, line)


def test_host_blocking_ops_carry_the_users_line_and_others_none():
    gpu = ctl.SimGPU(seed=0)
    x = torch.ones(8, device="meta")
    with ctl.record(device=gpu, measure=False) as rec:
        y = x * 2
        v = y.sum().item(); a = here()  # noqa: E702
        c = y.cpu(); b = here()  # noqa: E702
        nz = torch.nonzero(y); d = here()  # noqa: E702
        y.add_(v + c.sum().item() + len(nz)); e = here()  # noqa: E702
    tl = rec.timeline
    got = sources(tl)
    assert [(w, f, line) for w, f, line, _, _ in got] == [
        ("aten::_local_scalar_dense", __file__, a), ("aten::_to_copy", __file__, b),
        ("aten::nonzero", __file__, d)]  # c.sum().item() is on the host: no sync
    assert got[0][3].endswith("test_host_blocking_ops_carry_the_users_line_and_others_none")
    assert got[0][4] == "v = y.sum().item(); a = here()  # noqa: E702"
    synced = np.flatnonzero(tl.ops.flags & OpFlag.SYNC)
    assert list(tl.sources.op) == list(synced) and (tl.sources.span == NONE).all()
    assert e  # the line ran


def test_dataloader_fetches_carry_the_loop_line():
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    with ctl.record(device="cpu", measure=False) as rec:
        for (batch,) in loader: line = here()  # noqa: E701
        batch.sum()
    tl = rec.timeline
    got = sources(tl)
    assert {w for w, *_ in got} == {"DATA"}
    fetches = np.flatnonzero(tl.spans.kind == SpanKind.DATA)
    assert sorted(tl.sources.span) == list(fetches) and (tl.sources.op == NONE).all()
    assert {(f, ln) for _, f, ln, _, _ in got} == {(__file__, line)}


def test_a_sync_span_with_no_op_carries_its_line(monkeypatch):
    from cutimeline.devices.cuda import gpu as devices

    from fakecuda import CpuAsCuda, FakeCuda
    api = FakeCuda()
    api.lag_ns = 0
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    monkeypatch.setattr(api, "now", __import__("time").perf_counter_ns)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    with ctl.record(device=CpuAsCuda(pings=1), measure=False) as rec:
        torch.ones(3) + 1
        torch.cuda.synchronize(0); line = here()  # noqa: E702
    tl = rec.timeline
    got = sources(tl)
    assert [(w, f, ln) for w, f, ln, _, _ in got] == [("SYNC", __file__, line)]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


FORWARD_LINE = Net.forward.__code__.co_firstlineno + 1


def test_stack_true_gives_every_op_its_line_through_modules():
    torch.manual_seed(0)
    net, x = Net(), torch.randn(2, 4)
    with ctl.record(device="cpu", measure=False, stack=True) as rec:
        y = net(x); line = here()  # noqa: E702
        z = y.sum()
    tl = rec.timeline
    assert list(tl.sources.op) == list(range(len(tl.ops)))
    got = sources(tl)
    where = {w: (ln, fn) for w, _, ln, fn, _ in got}
    # linear's ops come from the model's forward, not nn.Module or F.linear
    assert where["aten::addmm"] == (FORWARD_LINE, "Net.forward")
    assert where["aten::relu"] == (FORWARD_LINE, "Net.forward")
    assert where["aten::sum"][0] == line + 1
    assert {f for _, f, *_ in got} == {__file__}
    assert z.item() == torch.relu(net(x)).sum().item()  # results unchanged


def test_stack_true_does_not_note_syncs_twice():
    gpu = ctl.SimGPU(seed=0)
    x = torch.ones(4, device="meta")
    with ctl.record(device=gpu, measure=False, stack=True) as rec:
        (x + 1).sum().item()
    tl = rec.timeline
    assert len(tl.sources) == len(tl.ops) and len(set(tl.sources.op)) == len(tl.ops)


def test_collectives_carry_their_line(tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/init", rank=0,
                            world_size=1)
    try:
        x = torch.arange(4.0)
        with ctl.record(device="cpu", measure=False) as rec:
            dist.all_reduce(x); line = here()  # noqa: E702
            x + 1
    finally:
        dist.destroy_process_group()
    tl = rec.timeline
    got = sources(tl)
    assert got and all(f == __file__ and ln == line for _, f, ln, _, _ in got)
    assert all(tl.ops.flags[tl.sources.op] & OpFlag.COLLECTIVE)


def test_sources_survive_save_load_and_slicing(tmp_path):
    gpu = ctl.SimGPU(seed=0)
    x = torch.ones(4, device="meta")
    with ctl.record(device=gpu, measure=False, steps="manual") as rec:
        for _ in range(3):
            (x + 1).sum().item()
            rec.step()
    tl = rec.timeline
    assert len(tl.sources) == 3
    tl.save(tmp_path / "run.ctl")
    back = ctl.load(tmp_path / "run.ctl")
    assert sources(back) == sources(tl)
    one = tl.slice_steps(1, 1)
    assert len(one.sources) == 1 and sources(one) == sources(tl)[1:2]
