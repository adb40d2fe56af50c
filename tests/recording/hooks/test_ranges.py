"""ranges.py: the user's record_function and NVTX ranges (and ctl.span) are USER
spans of a live recording, nested as torch.profiler nests them, exported to
Perfetto as ranges; torch's own ranges are left to the hooks that record them."""

from __future__ import annotations

import gzip
import json

import numpy as np
import torch

import cutimeline as ctl
from cutimeline.formats.chrome import export_chrome
from cutimeline.recording.hooks.ranges import NVTX, range_call
from cutimeline.timeline.schema import SpanKind


def user_spans(tl):
    s = tl.spans
    m = s.kind == SpanKind.USER
    names = tl.decode(s["name"][m]).tolist()
    return [(n, int(d), int(b), int(e)) for n, d, b, e in
            zip(names, s.depth[m], s.begin_ns[m], s.end_ns[m])
            if not n.startswith("cutimeline ")]  # the recorder's own (calibration)


def ops_named(tl, name):
    o = tl.ops
    m = np.array([str(n).startswith(name) for n in tl.decode(o["name"])])
    return o.host_begin_ns[m], o.host_end_ns[m]


def test_record_function_ranges_are_user_spans_nested_as_the_profiler_nests_them():
    x = torch.ones(8)

    @torch.profiler.record_function("decorated")
    def decorated():
        return x * 3

    with ctl.record(device="cpu") as rec:
        with torch.profiler.record_function("fwd"):
            with torch.autograd.profiler.record_function("inner"):
                y = x + 1
            with ctl.span("mine"):
                y = y * 2
                decorated()
        with torch.profiler.record_function("after"):
            y.sum()
    tl = rec.timeline
    got = user_spans(tl)
    assert [(n, d) for n, d, _, _ in got] == [("fwd", 0), ("inner", 1), ("mine", 1),
                                             ("decorated", 2), ("after", 0)]
    spans = {n: (b, e) for n, _, b, e in got}
    b, e = ops_named(tl, "aten::add")
    assert spans["inner"][0] <= b[0] and e[0] <= spans["inner"][1]
    assert spans["fwd"][0] <= spans["inner"][0] and spans["mine"][1] <= spans["fwd"][1]
    b, e = ops_named(tl, "aten::sum")
    assert spans["after"][0] <= b[0] and e[0] <= spans["after"][1]
    # the enter/exit calls are still ops rows, as before
    assert len(ops_named(tl, "profiler::_record_function_enter")[0]) == 4


def test_torchs_own_ranges_are_not_user_spans():
    """The optimizer's and the DataLoader's record_function ranges are the
    OPTIMIZER and DATA spans the hooks make; ProfilerStep is no span."""
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)),
                                       batch_size=4)
    with ctl.record(device="cpu") as rec:
        for (xb,) in data:
            with torch.profiler.record_function("ProfilerStep#3"):
                net(xb).sum().backward()
            opt.step()
    tl = rec.timeline
    assert user_spans(tl) == []
    s = tl.spans
    assert int((s.kind == SpanKind.OPTIMIZER).sum()) == 2
    assert int((s.kind == SpanKind.DATA).sum()) >= 2


def test_ranges_across_the_recordings_edges_are_dropped_quietly():
    x = torch.ones(4)
    early = torch.profiler.record_function("early")
    early.__enter__()
    with ctl.record(device="cpu") as rec:
        x + 1
        early.__exit__(None, None, None)   # began before: no span
        late = torch.profiler.record_function("late")
        late.__enter__()
        x + 2
    late.__exit__(None, None, None)        # ends after: no span
    assert user_spans(rec.timeline) == []


def test_user_spans_export_to_perfetto_as_ranges(tmp_path):
    x = torch.ones(4)
    with ctl.record(device="cpu") as rec:
        with torch.profiler.record_function("fwd"):
            with torch.profiler.record_function("inner"):
                x + 1
    path = tmp_path / "run.json.gz"
    export_chrome(rec.timeline, path)
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ranges = {e["name"]: e for e in events if e.get("cat") == "user_annotation"}
    assert {"fwd", "inner"} <= set(ranges)
    fwd, inner = ranges["fwd"], ranges["inner"]
    assert fwd["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= fwd["ts"] + fwd["dur"]
    back = ctl.load(path)
    assert [(n, d) for n, d, _, _ in user_spans(back)] == [("fwd", 0), ("inner", 1)]


class FakeNvtx:
    """torch.cuda.nvtx's C functions, as a CUDA build has them."""

    def __init__(self):
        self.depth = 0

    def rangePushA(self, msg):
        self.depth += 1
        return self.depth - 1

    def rangePop(self):
        self.depth -= 1
        return self.depth


def test_nvtx_ranges_are_user_spans(monkeypatch):
    nvtx = torch.cuda.nvtx
    monkeypatch.setattr(nvtx, "_nvtx", FakeNvtx())
    push, pop = nvtx.range_push, nvtx.range_pop
    x = torch.ones(4)
    with ctl.record(device="cpu") as rec:
        nvtx.range_push("outer")
        with nvtx.range("layer {}", 3):
            with torch.profiler.record_function("rf"):
                x + 1
        nvtx.range_pop()
    assert nvtx.range_push is push and nvtx.range_pop is pop  # restored at stop
    assert [(n, d) for n, d, _, _ in user_spans(rec.timeline)] == [
        ("outer", 0), ("layer 3", 1), ("rf", 2)]


def test_other_ops_run_as_before():
    """Only record_function's two ops get a wrapper; every other op's
    signature keeps its own callable, so ranges cost nothing per op."""
    def call(*args):
        return args

    assert range_call(None, "aten::add", call) is call
    assert range_call(None, "profiler::_record_function_enter_new", call) is not call
    assert range_call(None, "profiler::_record_function_exit", call) is not call
    assert NVTX == "nvtx"
