"""Exposed communication: collectives with nothing else on the device
count beside the idle causes, so a step spent in an all-to-all is not
GPU-bound."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.idle.communication import exposed
from cutimeline.analysis.verdicts.causal import judge_window
from cutimeline.timeline.schema import GpuKind

from handmade import timeline


def _with_collectives(tl, rows):
    """``tl`` with gpu ``rows`` marked as collectives (as the Kineto
    importer marks NCCL kernels)."""
    g = tl.gpu
    cols = {c: np.array(g[c]) for c in g.columns}
    cols["kind"][list(rows)] = GpuKind.COLLECTIVE
    return tl.replace(gpu=cols)


def _step(comm_alone_ns):
    """One 1 ms step: compute on stream 0 for 300 µs, then an all-reduce
    on stream 1 that runs alone for ``comm_alone_ns`` after 50 µs beside
    the compute, and idle to the end."""
    gpu = [(0, 10_000, 20_000, 320_000, "gemm"),
           (1, 15_000, 270_000, 320_000 + comm_alone_ns, "ncclDevKernel_AllReduce")]
    tl = timeline(gpu=gpu, steps=[(0, 0, 1_000_000)])
    return _with_collectives(tl, [1])


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_exposed_time_is_the_collectives_part_no_other_work_covers(engine):
    tl = _step(600_000)
    rep = ctl.analyze(tl, engine=engine)
    got = exposed(tl, rep.lanes, rep.primary, np.array([0, 300_000]),
                  np.array([1_000_000, 400_000]), engine)
    assert got.tolist() == [600_000, 80_000]
    assert rep.steps["communication_ns"].tolist() == [600_000]


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_a_step_mostly_in_collectives_reads_communication_bound(engine):
    rep = ctl.analyze(_step(600_000), engine=engine)
    s = rep.steps[0]
    assert s["busy_frac"] > 0.85           # busy, as the device sees it ...
    assert s["verdict"] == "communication-bound"  # ... but not feeding compute
    assert s["cause"] == "communication"
    text = rep.summary()
    assert "collectives alone (exposed communication) 60%" in text
    assert "ncclDevKernel_AllReduce" in text and "overlap communication" in text


def test_collectives_hidden_behind_compute_change_nothing():
    gpu = [(0, 10_000, 20_000, 900_000, "gemm"),
           (1, 15_000, 100_000, 800_000, "ncclDevKernel_AllReduce")]
    tl = _with_collectives(timeline(gpu=gpu, steps=[(0, 0, 1_000_000)]), [1])
    rep = ctl.analyze(tl)
    assert rep.steps["communication_ns"].tolist() == [0]
    assert rep.steps["verdict"].tolist() == ["GPU-bound"]
    assert "exposed" not in rep.summary()


def test_exposed_communication_is_a_bound_the_verdict_weighs_beside_the_fixes():
    # collectives alone for 40 % of the step: overlapping them could save up
    # to that, more than the 30 % the best replayed fix saves
    gains = {"launch": (0.3, "graphs"), "communication": (0.4, "communication")}
    assert judge_window(0.5, gains, True).verdict == "communication-bound"
    # under the bound, the fix names the verdict
    gains = {"launch": (0.5, "graphs"), "communication": (0.2, "communication")}
    assert judge_window(0.5, gains, True).verdict == "launch-bound"
