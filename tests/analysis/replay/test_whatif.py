"""What-if replays: hand-worked edits, engine twins, the Report hook."""


import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.replay.hostmap import snapped
from cutimeline.analysis.replay.predictions import predict
from cutimeline.analysis.replay.whatif import apply, replayed
from cutimeline.analysis.replay.edits import EDITS, Changes, changes
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import SpanKind

from handmade import random_timeline, timeline

MS = 1_000_000


def fetch_bound():
    """Three steps of 10 ms: a 7 ms DataLoader fetch, then one 2 ms kernel
    launched 8 ms into the step (λ = 1 ms). Without the fetch the host
    takes 3 ms a step and the kernels follow it."""
    gpu, spans, steps = [], [], []
    for k in range(3):
        t = 10 * MS * k
        spans.append((SpanKind.DATA, "next(DataLoader, num_workers=0)", t, t + 7 * MS))
        gpu.append((0, t + 8 * MS, t + 9 * MS, t + 11 * MS))
        steps.append((k, t, t + 10 * MS))
    return timeline(gpu=gpu, spans=spans, steps=steps)


def test_snap_moves_times_inside_a_cut_to_its_end():
    t = np.array([0, 5, 10, 15, 20, 25])
    assert snapped(t, np.array([5, 20]), np.array([10, 22])).tolist() == [0, 10, 10, 15, 22, 25]


def test_removing_the_fetch_moves_the_kernels_with_the_host():
    tl = fetch_bound()
    rep = ctl.analyze(tl)
    t2 = rep.what_if("data")
    # every fetch gone: step k's kernel launches at 8 − 7 ms + 3 ms·k
    np.testing.assert_array_equal(t2.gpu.launch_ns, [1 * MS, 4 * MS, 7 * MS])
    np.testing.assert_array_equal(t2.gpu.begin_ns, [2 * MS, 5 * MS, 8 * MS])
    assert "what_if" in t2.meta and len(t2.events) == 0
    (p,) = [q for q in rep.what_if() if q.edit.name == "data"]
    # the middle step is 3 ms whichever way the step windows are drawn
    assert p.steps["predicted_ns"][1] == 3 * MS
    assert p.gain > 0.5 and "num_workers" in p.edit.code


def test_no_change_replays_the_recording_exactly():
    tl = random_timeline(2, n=400, streams=3, steps=5)
    rep = ctl.analyze(tl)
    z = np.zeros(0, np.int64)
    ch = Changes(z, z, z, z, np.zeros(len(tl.ops), bool), np.zeros(len(tl.syncs), bool))
    for engine in ("numba", "numpy"):
        t2 = apply(tl, rep.lanes, ch, EDITS["host"], engine)
        np.testing.assert_array_equal(t2.gpu.begin_ns, tl.gpu.begin_ns)
        np.testing.assert_array_equal(t2.ops.host_begin_ns, tl.ops.host_begin_ns)


@pytest.mark.parametrize("seed", range(3))
def test_engines_agree_on_every_edit(seed):
    tl = random_timeline(seed, n=500, streams=2, steps=6)
    a, b = ctl.analyze(tl, engine="numba"), ctl.analyze(tl, engine="numpy")
    pa, pb = predict(a), predict(b)
    assert [p.edit.name for p in pa] == [p.edit.name for p in pb] and pa
    for x, y in zip(pa, pb):
        np.testing.assert_array_equal(x.steps, y.steps)
    for p in pa:  # removing host time never makes the run slower
        assert p.predicted_step_ns <= p.step_ns * 1.001, p.edit.name


def test_ranked_by_gain_and_host_time_only_shrinks():
    rep = ctl.analyze(random_timeline(5, n=600, streams=2, steps=6))
    preds = rep.what_if()
    gains = [p.gain for p in preds]
    assert gains == sorted(gains, reverse=True)
    for p in preds:
        t2 = rep.what_if(p.edit.name)
        assert t2.ops.host_end_ns.max() <= rep.timeline.ops.host_end_ns.max()
        d = p.to_dict()
        assert d["edit"] == p.edit.name and len(d["steps"]) == len(rep.steps)


def test_an_edit_that_does_not_apply_and_a_bad_name_are_sentences():
    rep = ctl.analyze(fetch_bound())
    with pytest.raises(CutimelineError, match="does not apply"):
        rep.what_if("sync")
    with pytest.raises(CutimelineError, match="no what-if edit 'fast'"):
        rep.what_if("fast")
    assert changes(rep.timeline, EDITS["recorder"], rep.activity) is None


def test_host_only_timelines_predict_nothing():
    tl = timeline(ops=[("aten::add", 0, 10, 0)], steps=[(0, 0, 20)])
    tl = tl.replace(gpu=tl.gpu.take(np.zeros(0, np.int64)))
    rep = ctl.analyze(tl)
    assert rep.what_if() == []
    with pytest.raises(CutimelineError, match="needs gpu rows"):
        replayed(rep, "data")


def test_the_summary_leads_with_the_fix_and_its_prediction():
    text = ctl.analyze(fetch_bound()).summary().splitlines()[0]
    assert text.startswith("Verdict: input-bound — batches ready when the step asks "
                           "would save a predicted 70% of the step (10 ms → 3 ms)")
    assert text.endswith("Change first: DataLoader(num_workers>=2, pin_memory=True): "
                         "batches ready when the step asks.")


def test_a_host_that_runs_ahead_stops_at_the_launch_queue():
    # a 5 ms fetch, then six 10 ms kernels launched 1 ms apart: without the
    # fetch the launches come 5 ms earlier, but a queue of 2 lets launch k
    # go only when kernel k−2 has ended
    gpu = [(0, 5 * MS + k * MS, 6 * MS + 10 * MS * k, 16 * MS + 10 * MS * k) for k in range(6)]
    spans = [(SpanKind.DATA, "next(DataLoader, num_workers=0)", 0, 5 * MS)]
    tl = timeline(gpu=gpu, spans=spans, steps=[(0, 0, 70 * MS)], meta={"launch_queue": 2})
    for engine in ("numba", "numpy"):
        t2 = ctl.analyze(tl, engine=engine).what_if("data")
        launch, end = t2.gpu.launch_ns, t2.gpu.end_ns
        assert (launch[2:] >= end[:-2]).all() and launch[2] == end[0]
        np.testing.assert_array_equal(t2.gpu.begin_ns, tl.gpu.begin_ns - 5 * MS)
        # unbounded, the host keeps its 1 ms cadence
        free = tl.replace(meta={**tl.meta, "launch_queue": 0})
        t3 = ctl.analyze(free, engine=engine).what_if("data")
        np.testing.assert_array_equal(t3.gpu.launch_ns, tl.gpu.launch_ns - 5 * MS)


def copy_loop(blocking: bool):
    """Four steps of a small MLP on a SimGPU fed an 8 MB batch from host
    memory (blocking: pageable and waited for), with a cast and a
    read-back of the loss after the compute."""
    torch = pytest.importorskip("torch")
    from torch import nn
    meta = torch.device("meta")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(meta)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gpu = ctl.SimGPU("h100", seed=0)
    xb, yb = torch.empty(2048, 1024), torch.zeros(2048, dtype=torch.long)
    with ctl.record(device=gpu) as rec:
        for _ in range(4):
            x, y = xb.to(meta, non_blocking=not blocking), yb.to(meta, non_blocking=not blocking)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.to(torch.float16).cpu()  # a cast and a read-back: not the edit's
    return rec.timeline


@pytest.mark.parametrize("blocking", [True, False])
def test_copies_move_to_a_side_stream_and_cost_a_launch(blocking):
    tl = copy_loop(blocking)
    rep = ctl.analyze(tl)
    ch = changes(tl, EDITS["copies"], rep.activity)
    names = tl.decode(tl.ops["name"])
    picked = names[ch.side_ops]
    assert len(picked) == 8 and set(picked) == {"aten::_to_copy"}  # x and y, 4 steps
    t2 = rep.what_if("copies")
    moved = np.isin(t2.gpu.op, np.flatnonzero(ch.side_ops))
    assert (t2.gpu.stream[moved] > tl.gpu.stream.max()).all()
    assert (t2.gpu.stream[~moved] == tl.gpu.stream[~moved]).all()
    assert not np.isin(t2.syncs.op, np.flatnonzero(ch.side_ops)).any()
    # each copy's host time is now a launch's, and the read-backs keep theirs
    own = t2.ops.host_end_ns - t2.ops.host_begin_ns
    assert (own[ch.side_ops] < 100_000).all()
    (p,) = [q for q in rep.what_if() if q.edit.name == "copies"]
    assert 0.05 < p.gain < 1 and "non_blocking" in p.edit.code
    engines = [ctl.analyze(tl, engine=e).what_if("copies") for e in ("numba", "numpy")]
    np.testing.assert_array_equal(engines[0].gpu.begin_ns, engines[1].gpu.begin_ns)


def test_the_copies_edit_needs_copies():
    rep = ctl.analyze(fetch_bound())
    with pytest.raises(CutimelineError, match="'copies' does not apply"):
        rep.what_if("copies")


def test_a_wait_on_another_stream_moves_as_what_it_waited_for():
    # stream 0's kernel launched at 1 µs runs to 120 µs; 80 µs of the
    # host's own Python later, stream 1's kernel is launched and waits for
    # it (an event): it begins at 120. Without the Python it is launched
    # 80 µs earlier, but the kernel it waits for ends no earlier: it still
    # begins at 120 (moved as its own launch, it began at 40, before the
    # work it waited for had ended)
    us = 1_000
    # (stream 1's first kernel, 1 µs after its launch, is its latency λ)
    gpu = [(0, 1 * us, 5 * us, 120 * us), (1, 2 * us, 3 * us, 4 * us),
           (1, 100 * us, 120 * us, 130 * us)]
    tl = timeline(gpu, steps=[(0, 0, 200 * us)])
    for engine in ("numba", "numpy"):
        t2 = ctl.analyze(tl, host_gap_ns=20 * us, engine=engine).what_if("host")
        assert t2.gpu.launch_ns[2] < 30 * us          # launched early now ...
        assert t2.gpu.begin_ns[2] == 120 * us          # ... and waits as it did
