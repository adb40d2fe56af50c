"""The Report: tables, ranges of verdicts, advice, dict and text."""

import json

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.summary import fmt_ns
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import SpanKind

from handmade import random_timeline, timeline


def input_bound():
    # four steps: the GPU works 10 ns, then waits 80 ns for a data fetch
    rows, spans, steps = [], [], []
    for k in range(4):
        t = 100 * k
        spans.append((SpanKind.DATA, "next(DataLoader)", t, t + 80))
        rows.append((0, t + 85, t + 90, t + 100))
        steps.append((k, t, t + 100))
    return timeline(rows, spans=spans, steps=steps)


def test_fmt_ns():
    assert [fmt_ns(x) for x in (850, 12_300, 4_560_000, 1.23e9, 250e9)] == \
        ["850 ns", "12.3 µs", "4.56 ms", "1.23 s", "250 s"]


def test_ranges_group_steps_and_give_advice():
    rep = ctl.analyze(input_bound())
    (r,) = rep.ranges()
    assert (r["first"], r["last"], r["verdict"], r["steps"]) == (0, 3, "input-bound", 4)
    assert r["idle_ns"]["data"] == 4 * 80
    assert r["advice"].startswith("steps 0–3: 89% of GPU idle time is spent waiting "
                                  "for DataLoader fetches (4 fetches, mean 80 ns)")
    assert "num_workers > 0" in r["advice"]
    text = rep.summary()
    assert "• input-bound: steps 0–3" in text and "GPU busy 10%" in text
    assert "biggest gaps:" in text


def test_to_dict_is_json_and_complete():
    rep = ctl.analyze(random_timeline(2, steps=4))
    d = rep.to_dict()
    s = json.dumps(d, allow_nan=False)
    back = json.loads(s)
    assert len(back["steps"]) == 4 and back["steps"][0]["verdict"]
    assert set(back) >= {"overall", "steps", "ranges", "devices", "streams", "hta",
                         "compensation", "biggest_gaps", "window_ns"}
    assert back["compensation"]["overhead_ns_per_op"] == 300
    assert back["hta"]["temporal_breakdown"]["rows"] > 0


def test_tables_as_numpy_and_pandas():
    pd = pytest.importorskip("pandas")
    rep = ctl.analyze(random_timeline(3, streams=2))
    for name in ("streams", "devices", "steps", "gaps", "ops"):
        t = rep.table(name)
        df = rep.table(name, pandas=True)
        assert isinstance(t, np.ndarray) and isinstance(df, pd.DataFrame)
        assert list(df.columns) == list(t.dtype.names) and len(df) == len(t)
    g = rep.gap_table("stream")
    assert set(g["cause"]) <= {"data", "sync", "dispatch", "dependency", "unknown"}
    assert (rep.gap_table()["stream"] == -1).all()


def test_queue_depth_of_a_stream_and_errors():
    rep = ctl.analyze(random_timeline(1, streams=2))
    t, d = rep.queue_depth(stream=1)
    assert len(t) == len(d) and d[-1] == 0 and (np.diff(t) >= 0).all()
    with pytest.raises(CutimelineError, match="no device 7"):
        rep.queue_depth(device=7)
    cpu = ctl.analyze(timeline(ops=[("aten::add", 0, 5, 0)]))
    with pytest.raises(CutimelineError, match="needs gpu rows"):
        cpu.queue_depth()
    assert cpu.cpu_lead().tolist() == [] and cpu.gap_table() is None


@pytest.mark.parametrize("name, advice", [
    ("next(DataLoader, num_workers=0)",
     "num_workers=0); GPU busy 10%; next: dispatch 11% — try num_workers > 0"),
    ("next(DataLoader, num_workers=4)", "raise num_workers above 4"),
])
def test_advice_uses_num_workers_when_the_span_names_it(name, advice):
    tl = input_bound()
    st = list(tl.strings)
    st[st.index("next(DataLoader)")] = name
    tl = ctl.Timeline({k: tl.table(k) for k in ("ops", "gpu", "spans", "syncs")}, st,
                      tl.meta)
    assert advice in ctl.analyze(tl).ranges()[0]["advice"]


def test_a_verdict_names_the_runner_up_cause_with_its_share():
    from cutimeline.analysis.report import _runner_up
    share = {"data": 0.51, "sync": 0.0, "dispatch": 0.49, "dependency": 0.0, "unknown": 0.0}
    assert _runner_up(share, "data") == "; next: dispatch 49%"
    share = {"data": 1.0, "sync": 0.0, "dispatch": 0.0, "dependency": 0.0, "unknown": 0.0}
    assert _runner_up(share, "data") == ""  # no other cause: nothing to say


def test_launch_bound_advice_without_steps_counts_the_windows_ops():
    # no steps: the GPU works 1 ns of every 100, the host dispatches between
    tl = timeline([(0, 100 * k + 10, 100 * k + 50, 100 * k + 51) for k in range(5)])
    (r,) = ctl.analyze(tl).ranges()
    assert r["verdict"] == "launch-bound" and r["first"] == -1
    assert r["advice"].startswith("the window: GPU busy ")
    assert "(5 ops; most host time in" in r["advice"] and "per step" not in r["advice"]


def test_launch_bound_on_compiled_graphs_advises_cuda_graphs_not_compiling():
    from cutimeline.timeline.schema import OpFlag
    L = OpFlag.LAUNCH
    ops = [("inductor::graph_0" if k % 2 == 0 else "aten::mm", 100 * k + 10,
            100 * k + 50, L) for k in range(5)]
    tl = timeline([(0, 100 * k + 50, 100 * k + 50, 100 * k + 51) for k in range(5)],
                  ops=ops)
    (r,) = ctl.analyze(tl).ranges()
    assert r["verdict"] == "launch-bound"
    assert "most host time in inductor::graph_0" in r["advice"]
    assert 'mode="reduce-overhead"' in r["advice"] and "torch.compile," not in r["advice"]
    plain = timeline([(0, 100 * k + 50, 100 * k + 50, 100 * k + 51) for k in range(5)])
    assert "torch.compile, CUDA graphs" in ctl.analyze(plain).ranges()[0]["advice"]


def test_offenders_on_a_profiler_trace_rank_ops_by_self_time():
    import os

    from cutimeline.analysis.nesting import self_ns
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "kineto",
                        "nccl_parser_config", "nccl_data.json.gz")
    tl = ctl.import_chrome(path)
    rep = ctl.analyze(tl)
    (r,) = rep.ranges()
    assert r["verdict"] == "launch-bound"
    tops = [n for n, _ in r["offenders"]["ops"]]
    # aten::batch_norm holds cudnn_batch_norm: inclusive times would count
    # its host time twice and rank it first
    o, own = tl.ops, self_ns(tl)
    inside = (o.host_begin_ns >= r_begin(rep)) & (o.host_end_ns <= r_end(rep))
    names = np.array(tl.decode(o["name"]))
    total = {n: own[inside & (names == n)].sum() for n in set(names[inside])}
    assert tops[0] == max(total, key=total.get)
    assert "aten::batch_norm" not in tops
    t = rep.op_table()
    bn = t[t["name"] == "aten::batch_norm"][0]
    assert bn["cpu_self_ns"] < 0.2 * bn["cpu_total_ns"]


def r_begin(rep):
    return int(rep.steps["begin_ns"][0])


def r_end(rep):
    return int(rep.steps["end_ns"][-1])


@pytest.mark.parametrize("seed", range(5))
def test_top_k_and_overlaps_match_brute_force(seed):
    from cutimeline.analysis.summary import top_k
    from cutimeline.analysis.verdict import Overlaps
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 20, int(rng.integers(0, 300)))     # many ties
    for k in (0, 1, 3, 500):
        assert top_k(x, k).tolist() == np.argsort(-x, kind="stable")[:k].tolist()
    b = rng.integers(0, 10_000, 400)
    if seed % 2:
        b = np.sort(b)                                      # the sorted fast path
    e = b + rng.integers(0, 300, 400)
    ov = Overlaps(b, e)
    for w0, w1 in rng.integers(0, 10_500, (20, 2)):
        w0, w1 = min(w0, w1), max(w0, w1) + 1
        assert ov.rows(w0, w1).tolist() == np.flatnonzero((e > w0) & (b < w1)).tolist()
