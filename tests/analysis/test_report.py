"""The Report: tables, ranges of verdicts, advice, dict and text."""

import json

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.idle.gaps import CAUSES
from cutimeline.text import fmt_ns
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import OpFlag, SpanKind

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
    # device windows, end to end, the first from its host begin: each step
    # runs through the fetch of its batch, and without the fetches each
    # would take its 20 ns of launch and work: input-bound, −80 %
    rep = ctl.analyze(input_bound())
    (r,) = rep.ranges()
    assert (r["first"], r["last"], r["verdict"], r["steps"]) == (0, 3, "input-bound", 4)
    assert (r["fix"], r["gain"]) == ("data", pytest.approx(0.8))
    assert r["idle_ns"]["data"] == 4 * 80
    assert r["text"] == "input-bound — batches ready when the step asks −80%"
    assert (r["cause"], r["runner_up"]) == ("data", "launch")
    assert r["share"] == 320 / 360 and r["runner_up_share"] == 36 / 360
    assert r["advice"].startswith("steps 0–3: 89% of GPU idle time is spent waiting "
                                  "for DataLoader fetches (4 fetches, mean 80 ns)")
    assert r["advice"].endswith("(predicted −80% of the step).")
    text = rep.summary()
    assert "• input-bound — batches ready when the step asks −80%: steps 0–3" in text
    assert "GPU busy 10%" in text and "biggest gaps:" in text


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
    assert set(g["cause"]) <= set(CAUSES) | {"overlapped"}
    np.testing.assert_array_equal(
        sum(g[f"{c}_ns"] for c in CAUSES) + g["overlapped_ns"], g["end_ns"] - g["begin_ns"])
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


def test_the_measures_a_figure_reads_come_from_the_report():
    # what rendering asks the Report for (it imports no analysis module):
    # idle time by cause of any part of a stream gap, the fetches, the headline
    rep = ctl.analyze(random_timeline(3, streams=2))
    gaps = rep.gap_table("stream")
    g = rep.lanes.streams
    k = np.flatnonzero((g.ge > rep.window[0]) & (g.gb < rep.window[1]))
    am, over = rep.idle_amounts(k)
    assert am.shape == (len(k), len(CAUSES)) and am.dtype == np.int64
    for c, name in enumerate(CAUSES):   # whole gaps: the stream gap table's split
        assert am[:, c].tolist() == gaps[f"{name}_ns"].tolist()
    assert over.tolist() == gaps["overlapped_ns"].tolist()
    mid = (g.gb[k] + g.ge[k]) // 2     # a part of each gap: no more than the whole
    part, part_over = rep.idle_amounts(k, g.gb[k], mid)
    assert (part <= am).all() and (part_over <= over).all()
    assert (part.sum(axis=1) + part_over <= mid - g.gb[k]).all()
    fetch = ctl.analyze(input_bound()).fetches()
    assert fetch.tolist() == (input_bound().spans.kind == SpanKind.DATA).tolist()
    assert not fetch.flags.writeable
    assert rep.headline()["short"] in repr(rep)
    cpu = ctl.analyze(timeline(ops=[("aten::add", 0, 5, 0)]))
    with pytest.raises(CutimelineError, match="idle_amounts needs gpu rows"):
        cpu.idle_amounts([0])


def test_the_analysis_package_exports_what_later_stages_read():
    import cutimeline.analysis as analysis
    from cutimeline.analysis.report import Report
    assert analysis.Report is Report and analysis.analyze is ctl.analyze
    assert analysis.CAUSES == CAUSES
    assert sorted(analysis.__all__) == sorted(
        ["analyze", "Report", "CAUSES", "EDITS", "edit_named", "steady"])


@pytest.mark.parametrize("name, advice", [
    ("next(DataLoader, num_workers=0)",
     "num_workers=0); GPU busy 10% — try num_workers > 0"),
    ("next(DataLoader, num_workers=4)", "raise num_workers above 4"),
])
def test_advice_uses_num_workers_when_the_span_names_it(name, advice):
    tl = input_bound()
    st = list(tl.strings)
    st[st.index("next(DataLoader)")] = name
    tl = ctl.Timeline({k: tl.table(k) for k in ("ops", "gpu", "spans", "syncs")}, st,
                      tl.meta)
    assert advice in ctl.analyze(tl).ranges()[0]["advice"]


def test_a_verdict_says_its_fix_with_its_gain_and_mixed_says_both():
    from cutimeline.analysis.verdicts.margins import verdict_text
    assert verdict_text("input-bound", "data", 0.51, 0.2) == \
        "input-bound — batches ready when the step asks −51%"
    assert verdict_text("mixed", "data", 0.51, 0.2, "graphs", 0.49) == \
        "mixed — batches ready when the step asks −51%, CUDA graphs, one launch per " \
        "sync-free piece of the step −49%"
    # no fix that gains: said so, with the busy share
    assert verdict_text("unknown", "", 0.0, 0.2) == \
        "unknown — GPU busy 20%, no fix predicted to gain"


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
    assert "CUDA graphs: torch.compile(mode=" in ctl.analyze(plain).ranges()[0]["advice"]


def test_offenders_on_a_profiler_trace_rank_ops_by_self_time():
    import os

    from cutimeline.analysis.tables.nesting import self_ns
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "kineto",
                        "nccl_parser_config", "nccl_data.json.gz")
    tl = ctl.load(path)
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
    from cutimeline.analysis.verdicts.offenders import Overlaps
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


def mixed_steps():
    # per step of 100 ns: a 45 ns DataLoader fetch, 40 ns of the host's own
    # Python (op-free: host time with host_gap_ns=20), then a 1 ns launch
    # of 10 ns of work: workers would save 45 %, moving the Python out 40 %,
    # within 20 % of each other
    rows, spans, ops, steps = [], [], [], []
    for k in range(4):
        t = 100 * k
        spans.append((SpanKind.DATA, "next(DataLoader)", t, t + 45))
        ops.append(("aten::mm", t + 85, t + 86, OpFlag.LAUNCH))
        rows.append((0, t + 86, t + 90, t + 100))
        steps.append((k, t, t + 100))
    return timeline(rows, spans=spans, ops=ops, steps=steps)


def test_two_fixes_that_gain_about_as_much_read_mixed_with_both():
    rep = ctl.analyze(mixed_steps(), host_gap_ns=20)
    s = rep.steps[1:]  # step 0 has no Python before its fetch
    assert s["verdict"].tolist() == ["mixed"] * 3
    assert (s["fix"][0], s["runner_fix"][0]) == ("data", "host")
    assert (s["gain"][0], s["runner_gain"][0]) == (pytest.approx(0.45), pytest.approx(0.4))
    r = ctl.analyze(mixed_steps(), host_gap_ns=20, window=(1, 3)).ranges()[0]
    assert r["text"] == ("mixed — batches ready when the step asks −45%, the Python "
                         "between ops moved out of the step −40%")
    assert r["advice"].endswith("DataLoader(num_workers>=2, pin_memory=True): batches "
                                "ready when the step asks (predicted −45%); or move the "
                                "Python between ops (logging, metrics, bookkeeping) out of "
                                "the step or overlap it (predicted −40%).")
    # a narrower margin names the best fix
    narrow = ctl.analyze(mixed_steps(), host_gap_ns=20, mixed_margin=0.1,
                         window=(1, 3)).ranges()[0]
    assert narrow["text"] == "input-bound — batches ready when the step asks −45%"


def test_the_summary_leads_with_the_runs_verdict_over_its_steady_steps():
    first = ctl.analyze(input_bound()).summary().splitlines()[0]
    # steps 1–3 (step 0 pays for warm-up): input-bound throughout
    assert first == ("Verdict: input-bound — batches ready when the step asks would save "
                     "a predicted 80% of the step (100 ns → 20 ns) (steps 1–3, all but the "
                     "first). Change first: DataLoader(num_workers>=2, pin_memory=True): "
                     "batches ready when the step asks.")
    mixed = ctl.analyze(mixed_steps(), host_gap_ns=20).summary().splitlines()[0]
    assert mixed.startswith("Verdict: mixed — two fixes gain about as much: batches ready "
                            "when the step asks −45% and the Python between ops moved out "
                            "of the step −40%")
    assert "Change first: DataLoader(num_workers>=2, pin_memory=True)" in mixed
    assert "; or move the Python between ops" in mixed
    two = ctl.analyze(timeline([(0, 5, 10, 20), (0, 105, 110, 120)],
                               steps=[(0, 0, 100), (1, 100, 200)])).summary()
    assert "(steps 0–1)" in two.splitlines()[0]  # under three steps: all of them
    host = ctl.analyze(timeline(ops=[("aten::add", 0, 5, 0)])).summary().splitlines()
    assert host[0].startswith("Verdict: host-only — no GPU work recorded (the whole window")
    assert host[1].startswith("cutimeline report — handmade")


def test_host_bound_steps_name_the_op_free_stretches():
    # 1 µs of work, then 400 µs without any op before the next launch
    rows = [(0, 1_000_000 * k + 10, 1_000_000 * k + 20, 1_000_000 * k + 1_020)
            for k in range(3)]
    tl = timeline(rows, steps=[(k, 1_000_000 * k, 1_000_000 * (k + 1)) for k in range(3)],
                  spans=[(SpanKind.USER, "log_metrics", 1_000_000 * k + 100,
                          1_000_000 * k + 900_000) for k in range(3)])
    rep = ctl.analyze(tl)
    r = rep.ranges()[-1]  # steps 1–2: the stretch before each one's work
    assert r["verdict"] == "host-bound" and r["cause"] == "host"
    assert r["offenders"]["spans"][0][0] == "log_metrics"
    assert "the host was busy outside op launches" in r["advice"]
    assert "op-free stretches" in r["advice"]
    assert r["advice"].endswith("move the Python between ops (logging, metrics, "
                                "bookkeeping) out of the step or overlap it (predicted "
                                "−100% of the step).")
