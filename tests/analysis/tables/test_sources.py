"""sources.py: syncs, DataLoader waits and a verdict's leading op quoted by
the user's source line, on hand-built loops whose lines are known."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables.sources import counted, line_table, quote
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

from handmade import random_timeline

ACC = "acc = (pred == y).float().mean().item()"
STEP_NS = 1_000_000


def item_loop(steps=4, sources=True, extra_sync_line=None):
    """Per step: a 20 µs DataLoader fetch (train.py:40), then three times a
    kernel (model.py:12 for aten::mm, :13 for aten::add) and an ``.item()``
    that waits for it: two at train.py:57, one at train.py:60 (with no
    source row when ``extra_sync_line`` is False; when it is "span", a
    ``torch.cuda.synchronize()`` there instead: a sync with no op and a SYNC
    span with its times and the source). The host then dispatches CPU-side
    ops (no launches: bookkeeping) to the step's end, so the queue the
    syncs emptied stays empty while it does: sync-bound, three syncs per
    step, two at train.py:57. (A host that sat in op-free Python instead
    would be host-bound: a sync owns no more of the idle time after it
    than it held the host, but all of the host's dispatching after it.)"""
    st = Strings()
    ops, gpu, syncs, spans, src = [], [], [], [], []
    fname = {f: st.intern(f) for f in ("train.py", "/src/model.py", "main", "forward")}
    code = {c: st.intern(c) for c in (ACC, "print(loss.item())", "y = x @ w",
                                      "y = y + b", "for x, y in loader:")}

    def where(file, line, fn, text):
        return (fname[file], line, fname[fn], code[text] if text else NONE)

    lines = {"mm": where("/src/model.py", 12, "forward", "y = x @ w"),
             "add": where("/src/model.py", 13, "forward", "y = y + b"),
             57: where("train.py", 57, "main", ACC),
             60: where("train.py", 60, "main", "print(loss.item())")}
    for k in range(steps):
        t0 = STEP_NS * (k + 1)
        spans.append((SpanKind.STEP, "step", t0, t0 + STEP_NS, k))
        spans.append((SpanKind.DATA, "next(DataLoader, num_workers=0)", t0, t0 + 20_000, NONE))
        src.append((NONE, len(spans) - 1, *where("train.py", 40, "main", "for x, y in loader:")))
        for j, (name, at, g0, g1, sync_line) in enumerate((
                ("aten::mm", 30_000, 35_000, 200_000, 57),
                ("aten::mm", 202_000, 206_000, 300_000, 57),
                ("aten::add", 302_000, 305_000, 320_000, 60))):
            ops.append((name, t0 + at, t0 + at + 2_000, OpFlag.LAUNCH))
            gpu.append((len(ops) - 1, t0 + at, t0 + g0, t0 + g1))
            src.append((len(ops) - 1, NONE, *lines["mm" if name == "aten::mm" else "add"]))
            b, e = t0 + at + 3_000, t0 + g1 + 1_000
            if sync_line == 60 and extra_sync_line == "span":
                syncs.append((NONE, b, e))
                spans.append((SpanKind.SYNC, "torch.cuda.synchronize", b, e, NONE))
                src.append((NONE, len(spans) - 1, *lines[60]))
                continue
            ops.append(("aten::_local_scalar_dense", b, e, OpFlag.SYNC))
            syncs.append((len(ops) - 1, b, e))
            if sync_line == 60 and extra_sync_line is False:
                continue  # this sync's op has no source row
            src.append((len(ops) - 1, NONE, *lines[sync_line]))
        for at in (400_000, 550_000, 700_000, 850_000):  # CPU-side bookkeeping
            ops.append(("aten::lift_fresh", t0 + at, t0 + at + 2_000, 0))
    tables = {
        "ops": {"seq": np.arange(len(ops)), "thread": np.zeros(len(ops)),
                "name": [st.intern(n) for n, *_ in ops], "host_begin_ns": [r[1] for r in ops],
                "host_end_ns": [r[2] for r in ops], "flags": [int(r[3]) for r in ops],
                "device": np.zeros(len(ops)), "stream": np.zeros(len(ops)),
                "shapes": np.full(len(ops), st.intern("f32[64,64], f32[64,64]"))},
        "gpu": {"op": [r[0] for r in gpu], "device": np.zeros(len(gpu)),
                "stream": np.zeros(len(gpu)), "name": [st.intern("k")] * len(gpu),
                "kind": [GpuKind.KERNEL] * len(gpu), "launch_ns": [r[1] for r in gpu],
                "begin_ns": [r[2] for r in gpu], "end_ns": [r[3] for r in gpu]},
        "syncs": {"op": [r[0] for r in syncs], "kind": [st.intern("item")] * len(syncs),
                  "device": np.zeros(len(syncs)), "stream": np.full(len(syncs), NONE),
                  "host_begin_ns": [r[1] for r in syncs], "host_end_ns": [r[2] for r in syncs],
                  "thread": np.zeros(len(syncs))},
        "spans": {"kind": [int(r[0]) for r in spans], "name": [st.intern(r[1]) for r in spans],
                  "begin_ns": [r[2] for r in spans], "end_ns": [r[3] for r in spans],
                  "number": [r[4] for r in spans], "thread": np.zeros(len(spans)),
                  "depth": np.zeros(len(spans))}}
    if sources:
        tables["sources"] = {c: [r[i] for r in src] for i, c in enumerate(
            ("op", "span", "file", "line", "function", "code"))}
    return Timeline(tables, st, {"aligned": True, "source": "handmade"})


def test_the_source_table_counts_syncs_and_fetches_per_line():
    rep = ctl.analyze(item_loop())
    t = rep.table("sources")
    got = [(r["kind"], r["file"], r["line"], r["count"], r["wait_ns"]) for r in t]
    # blocked 168 µs + 96 µs at line 57 and 16 µs at line 60, per step
    assert got == [("sync", "train.py", 57, 8, 4 * 264_000),
                   ("sync", "train.py", 60, 4, 4 * 16_000),
                   ("data", "train.py", 40, 4, 4 * 20_000)]
    assert t["code"][0] == ACC and t["function"][0] == "main"
    assert rep.source_table().tolist() == t.tolist()
    # a window of one step counts that step's
    one = ctl.analyze(item_loop(), window=2).table("sources")
    assert one["count"].tolist() == [2, 1, 1]


def test_a_sync_bound_verdict_quotes_the_top_line_with_its_count():
    rep = ctl.analyze(item_loop())
    assert rep.overall["verdict"] == "sync-bound"
    first = rep.summary().splitlines()[0]
    assert first.startswith("Verdict: sync-bound")
    # steps 1-3 (all but the first): 3 syncs per step, 2 at line 57
    assert f"; 3 syncs per step, 2 at train.py:57 `{ACC}`" in first
    # step 0's device window begins with its first kernel: GPU-bound
    r = rep.ranges()
    assert [x["verdict"] for x in r] == ["GPU-bound", "sync-bound"]
    assert f"9 host syncs, top aten::_local_scalar_dense; 3 syncs per step, 2 at " \
           f"train.py:57 `{ACC}`;" in r[1]["advice"]
    assert r[1]["sources"]["syncs"] == 9 and r[1]["sources"]["sync"]["count"].tolist() == [6, 3]
    lines = rep.summary().splitlines()
    assert f"syncs by source line: 8× train.py:57 `{ACC}` (1.06 ms); " \
           f"4× train.py:60 `print(loss.item())` (64 µs)" in lines
    assert "DataLoader fetches by source line: 4× train.py:40 `for x, y in loader:` " \
           "(80 µs)" in lines
    d = rep.to_dict()
    assert [s["line"] for s in d["sources"]] == [57, 60, 40]


def test_syncs_without_a_source_count_in_the_total_only():
    rep = ctl.analyze(item_loop(extra_sync_line=False))
    assert rep.table("sources")["line"].tolist() == [57, 40]
    one = ctl.analyze(item_loop(extra_sync_line=False), window=1)
    assert f"2 of 3 syncs at train.py:57 `{ACC}`" in one.summary().splitlines()[0]


def test_a_sync_without_an_op_has_the_source_of_its_sync_span():
    t = ctl.analyze(item_loop(extra_sync_line="span")).table("sources")
    assert t[["kind", "line", "count"]].tolist() == [("sync", 57, 8), ("sync", 60, 4),
                                                     ("data", 40, 4)]


def test_without_a_sources_table_the_text_is_unchanged():
    plain, quoted = ctl.analyze(item_loop(sources=False)), ctl.analyze(item_loop())
    assert len(plain.table("sources")) == 0
    assert "source line" not in plain.summary() and "train.py" not in plain.summary()
    assert "sources" not in plain.to_dict() and "sources" not in plain.ranges()[0]
    # the quotes and the two source-line lines are all that differs
    b = "\n".join(x for x in quoted.summary().splitlines() if "by source line" not in x)
    for said in (f"; 3 syncs per step, 2 at train.py:57 `{ACC}`",
                 "; aten::mm: 2 of 2 calls at model.py:12 `y = x @ w`"):
        assert said in b
        b = b.replace(said, "")
    assert b == plain.summary()


def test_an_op_led_verdict_says_where_its_top_op_was_called():
    # launch-bound: host time in ops (the offenders' branch for launch), the
    # top op aten::mm called at model.py:12 every time
    rep = ctl.analyze(item_loop())
    off = rep._offenders(rep.steps, "launch-bound", "launch")
    assert off["ops"][0][0] == "aten::_local_scalar_dense"
    assert off["source"]["line"] == 57 and off["source"]["count"] == 8
    assert off["source"]["calls"] == 12
    gpu = rep._offenders(rep.steps, "GPU-bound", "")
    assert gpu["ops"][0][0] == "aten::mm"
    assert gpu["source"] == {"name": "aten::mm", "count": 8, "calls": 8,
                             "file": "/src/model.py", "line": 12, "function": "forward",
                             "code": "y = x @ w"}
    from cutimeline.analysis.advice import _lead
    assert _lead(gpu["source"]) == "; aten::mm: 8 of 8 calls at model.py:12 `y = x @ w`"


def test_line_table_groups_by_file_and_line_and_leaves_unknown_rows_out():
    tl = item_loop()
    src = tl.sources
    rows = np.array([NONE, 0, 1, 1, NONE], np.int64)  # row 0: line 40, row 1: model.py:12
    t = line_table(tl, rows, np.array([5, 1, 2, 3, 7]), "op")
    assert t[["line", "count", "wait_ns"]].tolist() == [(12, 2, 5), (40, 1, 1)]
    assert src.line[0] == 40 and src.line[1] == 12
    assert counted(t, 4, "calls") == "2 of 4 calls at model.py:12 `y = x @ w`"
    assert counted(t, 8, "calls", steps=4) == "2 calls per step, 0.5 at model.py:12 `y = x @ w`"
    assert counted(t[:0], 4, "calls") == ""


@pytest.mark.parametrize("row, text", [
    ({"file": "/a/b/train.py", "line": 3, "function": "main", "code": "x = 1"},
     "train.py:3 `x = 1`"),
    ({"file": "train.py", "line": 3, "function": "main", "code": ""}, "train.py:3 in main"),
    ({"file": "t.py", "line": 9, "function": "", "code": "y" * 80}, "t.py:9 `" + "y" * 59 + "…`"),
])
def test_a_quote_is_file_line_and_code(row, text):
    assert quote(row) == text


def test_random_timelines_without_sources_keep_every_report_number():
    # the golden digests (test_analyzer) hold this for six timelines; here
    # the new report parts are simply absent
    rep = ctl.analyze(random_timeline(4))
    assert rep.compute() is None and rep.memory() is None
    assert "mfu" not in rep.steps.dtype.names and "flops" not in rep.op_table().dtype.names


def test_a_mixed_verdict_quotes_the_causes_it_names():
    from cutimeline.analysis.advice import advice
    from cutimeline.analysis.idle.gaps import CAUSES
    rep = ctl.analyze(item_loop())
    w = rep.ranges()[1]["sources"]
    idle = dict.fromkeys(CAUSES, 0) | {"launch": 60, "sync": 40}
    off = {"ops": [("aten::mm", 5)], "source": {
        "name": "aten::mm", "count": 3, "calls": 4, "file": "m.py", "line": 2,
        "function": "f", "code": "y = x @ w"}}
    r = {"verdict": "mixed", "offenders": off, "idle_total_ns": 100, "idle_ns": idle,
         "first": 1, "last": 3, "steps": 3, "busy_frac": 0.5, "sources": w,
         "fix": "graphs", "gain": 0.3, "runner_fix": "sync", "runner_gain": 0.25}
    text = advice(r, rep.steps[1:])
    assert text.startswith(
        "steps 1–3: GPU busy 50%; no single fix: CUDA graphs, one launch per sync-free "
        "piece of the step −30% and no host reads of GPU values inside the step −25%; "
        "idle time launch 60% (aten::mm: 3 of 4 calls at m.py:2 `y = x @ w`), sync 40% "
        f"(3 syncs per step, 2 at train.py:57 `{ACC}`) — CUDA graphs: ")
    r.pop("sources")
    off.pop("source")
    assert "; idle time launch 60%, sync 40% — " in advice(r, rep.steps[1:])


def test_an_input_bound_verdict_quotes_the_loop_line():
    from cutimeline.analysis.advice import advice
    from cutimeline.analysis.idle.gaps import CAUSES
    rep = ctl.analyze(item_loop())
    w = rep.ranges()[1]["sources"]
    off = {"spans": [("next(DataLoader, num_workers=0)", 60_000)], "count": 3,
           "mean_ns": 20_000}
    r = {"verdict": "input-bound", "offenders": off, "idle_total_ns": 100,
         "idle_ns": dict.fromkeys(CAUSES, 0) | {"data": 100}, "first": 1, "last": 3,
         "steps": 3, "busy_frac": 0.5, "sources": w}
    assert "(3 fetches, mean 20 µs, num_workers=0; 1 fetch per step, 1 at " \
           "train.py:40 `for x, y in loader:`)" in advice(r, rep.steps[1:])
    one = ctl.analyze(item_loop(), window=2).table("sources")
    assert counted(one[one["kind"] == "data"], 1, "fetches") == \
        "1 of 1 fetch at train.py:40 `for x, y in loader:`"
