"""What-if replays: hand-worked edits, engine twins, the Report hook, the benchmark."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.whatif import _snap, predict, replayed
from cutimeline.analysis.whatif_edits import EDITS, Changes, changes
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import SpanKind

from handmade import random_timeline, timeline

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_whatif.py"
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
    assert _snap(t, np.array([5, 20]), np.array([10, 22])).tolist() == [0, 10, 10, 15, 22, 25]


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
    from cutimeline.analysis.whatif import _apply
    z = np.zeros(0, np.int64)
    ch = Changes(z, z, z, z, np.zeros(len(tl.ops), bool), np.zeros(len(tl.syncs), bool))
    for engine in ("numba", "numpy"):
        t2 = _apply(tl, rep.lanes, ch, EDITS["host"], engine)
        np.testing.assert_array_equal(t2.gpu.begin_ns, tl.gpu.begin_ns)
        np.testing.assert_array_equal(t2.ops.host_begin_ns, tl.ops.host_begin_ns)


@pytest.mark.parametrize("seed", range(3))
def test_engines_agree_on_every_edit(seed):
    tl = random_timeline(seed, n=500, streams=2, steps=6)
    a, b = ctl.analyze(tl, engine="numba"), ctl.analyze(tl, engine="numpy")
    pa, pb = predict(a, ctl.analyze), predict(b, ctl.analyze)
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


def test_the_summary_quotes_the_prediction_for_its_advice():
    text = ctl.analyze(fetch_bound()).summary().splitlines()[0]
    assert "try num_workers > 0" in text and "— predicted −" in text
    assert "another fix first" not in text  # the data fix is the top one here


def test_fast_benchmark_pairs_meet_the_error_goals():
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CUTIMELINE_DISABLE", None)
    done = subprocess.run([sys.executable, str(BENCH), "--fast"], capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    out = done.stdout + done.stderr[-2000:]
    assert done.returncode == 0, out
    assert out.count("| ") >= 4 and "median |error|" in out
