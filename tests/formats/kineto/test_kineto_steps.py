"""formats/kineto/steps.py and the import around it: DataLoader fetches and step
markers read alike in every trace generation, and the fallback chain that makes
steps where a trace has no ProfilerStep ranges.

One training loop (a DataLoader fetch that takes most of each step, a copy to
the GPU, a matmul, the optimizer's step) is written here as each generation of
torch.profiler wrote it:

* gen1, torch 1.8-1.10: categories Operator/Runtime/Kernel/Memcpy, string tids,
  GPU rows on tid "stream 7", and every record_function range (ProfilerStep,
  ``enumerate(DataLoader)#...``, ``Optimizer.step#...``) an Operator event;
* gen2: today's category names, the ranges still written as cpu_op;
* gen3, torch 2.x: the ranges as user_annotation.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from kinetotraces import DATA, TRACES

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import NONE, SpanKind

FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
OPT = "Optimizer.step#AdamW.step"
STEP_US, FETCH_US = 1000, 600


def loop(generation: int, *, profiler_steps: bool = True, optimizer: bool = True,
         extra_ranges: tuple = ()) -> list[dict]:
    """Three steps of the loop of the module doc, as ``generation`` wrote them."""
    old = generation == 1
    cat = {"op": "Operator" if old else "cpu_op",
           "range": "user_annotation" if generation == 3 else ("Operator" if old else "cpu_op"),
           "runtime": "Runtime" if old else "cuda_runtime",
           "kernel": "Kernel" if old else "kernel", "memcpy": "Memcpy" if old else "gpu_memcpy"}
    tid, stream_tid = ("123", "stream 7") if old else (123, 7)

    def host(kind, name, ts, dur, **args):
        return {"ph": "X", "cat": cat[kind], "name": name, "pid": 1, "tid": tid, "ts": ts,
                "dur": dur, "args": args}

    def device(kind, name, ts, dur, corr):
        args = {"correlation": corr, "device": 0}
        if not old:
            args["stream"] = 7
        return {"ph": "X", "cat": cat[kind], "name": name, "pid": 0, "tid": stream_tid,
                "ts": ts, "dur": dur, "args": args}

    evs = []
    for n in range(3):
        t, c = 100 + n * STEP_US, 10 * n
        if profiler_steps:
            evs.append(host("range", f"ProfilerStep#{n + 5}", t, STEP_US))
        evs += [host("range", FETCH, t + 10, FETCH_US),
                host("op", "aten::stack", t + 20, 500),
                host("op", "aten::to", t + 650, 40),
                host("runtime", "cudaMemcpyAsync", t + 655, 20, correlation=c + 1),
                device("memcpy", "Memcpy HtoD (Pageable -> Device)", t + 680, 30, c + 1),
                host("op", "aten::mm", t + 700, 50),
                host("runtime", "cudaLaunchKernel", t + 710, 5, correlation=c + 2),
                device("kernel", "void gemm", t + 720, 150, c + 2)]
        if optimizer:
            evs += [host("range", OPT, t + 800, 150),
                    host("op", "aten::add_", t + 810, 30),
                    host("runtime", "cudaLaunchKernel", t + 815, 5, correlation=c + 3),
                    device("kernel", "void adam", t + 880, 20, c + 3)]
        for name, at, dur in extra_ranges:
            evs.append(host("range", name, t + at, dur))
    return evs


def load(tmp_path, events, name="t.json", **kw):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return ctl.load(path, **kw)


def spans_of(tl, kind):
    s = tl.spans
    m = s.kind == kind
    return list(zip(tl.decode(s["name"][m]), s.begin_ns[m].tolist(), s.end_ns[m].tolist()))


@pytest.mark.parametrize("generation", [1, 2, 3])
@pytest.mark.parametrize("profiler_steps", [True, False])
def test_every_generation_reads_fetches_and_steps(tmp_path, generation, profiler_steps):
    tl = load(tmp_path, loop(generation, profiler_steps=profiler_steps))
    ops = set(tl.decode(tl.ops["name"]))
    assert ops == {"aten::stack", "aten::to", "aten::mm", "aten::add_"}  # ranges are no ops
    assert spans_of(tl, SpanKind.DATA) == [
        (FETCH, (110 + n * STEP_US) * 1000, (110 + n * STEP_US + FETCH_US) * 1000)
        for n in range(3)]
    assert [n for n, _, _ in spans_of(tl, SpanKind.OPTIMIZER)] == [OPT] * 3
    steps = tl.spans.kind == SpanKind.STEP
    if profiler_steps:
        assert tl.step_numbers().tolist() == [5, 6, 7]
        assert tl.meta["steps_from"] == "ProfilerStep#N"
        assert tl.meta["steps_rule"] == "ProfilerStep"
    else:   # the optimizer's annotation ends each step
        assert tl.step_numbers().tolist() == [0, 1, 2]
        assert tl.meta["steps_from"] == OPT and tl.meta["steps_rule"] == "optimizer"
        ends = [(1050 + n * STEP_US) * 1000 for n in range(3)]
        assert tl.spans.end_ns[steps].tolist() == ends
        assert tl.spans.begin_ns[steps].tolist() == [110_000] + ends[:2]  # first op on
        assert (tl.spans.depth[steps] == 0).all()


@pytest.mark.parametrize("profiler_steps", [True, False])
def test_the_generations_give_the_same_timeline_and_analysis(tmp_path, profiler_steps):
    tls = [load(tmp_path, loop(g, profiler_steps=profiler_steps), f"g{g}.json")
           for g in (1, 2, 3)]
    want = tls[-1]
    reports = [ctl.analyze(t) for t in tls]
    for tl, rep in zip(tls, reports):
        for table in ("ops", "gpu", "spans", "syncs"):
            for col, a in want.table(table).columns.items():
                got = tl.table(table)[col]
                if col in ("name", "shapes"):
                    a, got = want.decode(a), tl.decode(got)
                np.testing.assert_array_equal(got, a, err_msg=f"{table}.{col}")
        # the GPU waits for the fetch: input-bound, in every generation (the
        # first step's fetch comes before any GPU work, outside its window)
        s = rep.steps
        assert len(s) == 3
        assert (s["data_ns"][1:] > 0.5 * s["idle_ns"][1:]).all()
        assert set(s["verdict"][1:]) == {"input-bound"}
        np.testing.assert_array_equal(s["data_ns"], reports[-1].steps["data_ns"])


def test_neither_marker_no_steps(tmp_path):
    tl = load(tmp_path, loop(1, profiler_steps=False, optimizer=False))
    assert len(tl.step_numbers()) == 0
    assert "steps_from" not in tl.meta and "steps_rule" not in tl.meta
    assert len(spans_of(tl, SpanKind.DATA)) == 3  # the fetches still are


@pytest.mark.parametrize("generation", [1, 3])
def test_steps_from_names_the_ranges_that_end_the_steps(tmp_path, generation):
    # a user's range around forward and backward, in gen1 an Operator event too
    events = loop(generation, profiler_steps=True, extra_ranges=(("train_step", 640, 300),))
    tl = load(tmp_path, events, steps_from="train_step")
    assert tl.meta["steps_from"] == "train_step" and tl.meta["steps_rule"] == "steps_from"
    steps = tl.spans.kind == SpanKind.STEP
    ends = [(1040 + n * STEP_US) * 1000 for n in range(3)]
    assert tl.spans.end_ns[steps].tolist() == ends
    assert tl.step_numbers().tolist() == [0, 1, 2]
    # the ProfilerStep ranges it overrules stay, as user spans
    users = [n for n, _, _ in spans_of(tl, SpanKind.USER)]
    assert users.count("train_step") == 3
    assert sorted(n for n in users if n.startswith("ProfilerStep#")) == \
        ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"]
    assert "train_step" not in set(tl.decode(tl.ops["name"]))
    # a prefix before '#' takes the optimizer's annotations
    by_prefix = load(tmp_path, events, "p.json", steps_from="Optimizer.step")
    assert by_prefix.meta["steps_from"] == "Optimizer.step"
    assert by_prefix.spans.end_ns[by_prefix.spans.kind == SpanKind.STEP].tolist() == \
        [(1050 + n * STEP_US) * 1000 for n in range(3)]


def test_steps_from_errors_are_sentences(tmp_path):
    with pytest.raises(CutimelineError, match=r"no range named 'nope'.*'enumerate\(DataLoader"):
        load(tmp_path, loop(3), steps_from="nope")
    with pytest.raises(CutimelineError, match="must name the ranges"):
        load(tmp_path, loop(3), steps_from="")
    tl = load(tmp_path, loop(3))
    tl.save(tmp_path / "run.ctl")
    with pytest.raises(CutimelineError, match="run.ctl is a cutimeline file"):
        ctl.load(tmp_path / "run.ctl", steps_from="Optimizer.step")


def test_nested_and_successive_optimizers(tmp_path):
    """An optimizer wrapping another writes nested annotations (the outer one
    counts); optimizers stepped one after another end the step at the last."""
    nested = loop(3, profiler_steps=False, optimizer=False,
                  extra_ranges=(("Optimizer.step#EMA.step", 800, 150),
                                ("Optimizer.step#Inner.step", 810, 100)))
    tl = load(tmp_path, nested, "n.json")
    assert tl.meta["steps_from"] == "Optimizer.step#EMA.step"
    assert len(tl.step_numbers()) == 3
    both = loop(3, profiler_steps=False, optimizer=False,
                extra_ranges=(("Optimizer.step#Shampoo.step", 800, 50),
                              ("Optimizer.step#EMA.step", 860, 50)))
    tl = load(tmp_path, both, "b.json")
    assert tl.meta["steps_from"] == "Optimizer.step#EMA.step"
    assert tl.spans.end_ns[tl.spans.kind == SpanKind.STEP].tolist() == \
        [(1010 + n * STEP_US) * 1000 for n in range(3)]


def test_a_real_trace_without_profiler_steps_keeps_its_steps(tmp_path):
    """HTA's sampled rank-0 trace (two ProfilerStep ranges, each with a
    Shampoo then an EMA optimizer step), its ProfilerStep ranges taken out."""
    doc = json.loads(gzip.decompress((DATA / TRACES["rank0"]).read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not str(e.get("name", "")).startswith("ProfilerStep#")]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    tl = ctl.load(path)
    assert tl.meta["steps_from"] == "Optimizer.step#EMAOptimizer.step"
    emas = [e for n, _, e in spans_of(tl, SpanKind.OPTIMIZER) if "EMA" in n]
    steps = tl.spans.kind == SpanKind.STEP
    assert tl.spans.end_ns[steps].tolist() == emas and len(emas) == 2
    assert tl.spans.number[steps].tolist() == [0, 1]
    assert (tl.spans.number[~steps] == NONE).all()
    assert len(ctl.analyze(tl).steps) == 2


def test_step_markers_out_of_order_are_numbered_in_time_order_and_said(tmp_path):
    """ProfilerStep#100 twice and an overlapping #101 (a trace joined from
    two profilers): steps in time order with no number twice, and a
    warning naming them, where they were read as [101, 100, 100] before."""
    evs = loop(3)
    steps = [e for e in evs if e["name"].startswith("ProfilerStep#")]
    steps[0]["name"], steps[1]["name"], steps[2]["name"] = \
        "ProfilerStep#101", "ProfilerStep#100", "ProfilerStep#100"
    steps[0]["dur"] += 300  # overlaps the next
    tl = load(tmp_path, evs)
    assert tl.step_numbers().tolist() == [101, 102, 103]
    said = [w for w in tl.warnings if "step markers are out of order" in w]
    assert len(said) == 1 and "#100 appear more than once" in said[0]
    assert "101–103" in said[0]
    text = ctl.analyze(tl).summary()
    assert "101–100" not in text


def test_step_markers_in_order_are_kept_as_they_are(tmp_path):
    tl = load(tmp_path, loop(3))
    assert tl.step_numbers().tolist() == [5, 6, 7]
    assert not any("out of order" in w for w in tl.warnings)
