"""What must be timed on real work: a recording costs the same per op
after ``ctl.compare`` (the profiler's pass leaves nothing behind that
slows the recorder). ``bench``-marked (see conftest.py)."""

import time

import pytest
import torch

import cutimeline as ctl
from cutimeline.comparison.runner import compare

from handmade import mlp_step


def recorder_ns_per_op(n=1500, runs=7):
    """What recording costs per op here: the least over ``runs`` recordings
    of a loop of ``n`` small adds, timed inside the recording (a loaded
    machine only ever adds time, so the least is the steadiest figure)."""
    x, per_op = torch.ones(16), []
    for _ in range(runs):
        with ctl.record(device="cpu", measure=False, modules=False):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                x = x + 1
            per_op.append((time.perf_counter_ns() - t0) / n)
    return float(min(per_op))


def test_a_recording_after_compare_costs_what_one_before_did():
    recorder_ns_per_op(runs=2)  # warm up
    before = recorder_ns_per_op()
    compare(mlp_step(), steps=2, warmup=1, device="cpu")
    # the same within 1.5x, on a machine that may be loaded: a cost left
    # behind stays, a burst of load passes, so the after is measured up to
    # three times
    afters = []
    for _ in range(3):
        afters.append(recorder_ns_per_op())
        if before / 1.5 < afters[-1] < 1.5 * before:
            break
    else:
        pytest.fail(f"a recording cost {before:.0f} ns/op before compare() and "
                    f"{', '.join(f'{a:.0f}' for a in afters)} ns/op after it")
