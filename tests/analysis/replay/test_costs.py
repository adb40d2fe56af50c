"""The recorder's costs as one time-sorted series: the merge of the ops'
costs with the few module-hook and calibration entries."""

import numpy as np
import pytest

from cutimeline.analysis.replay.costs import merge2_nb


@pytest.mark.parametrize("seed", range(4))
def test_merging_the_few_into_the_many_is_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    ta = np.sort(rng.integers(0, 1_000, 3_000))
    tb = np.sort(rng.integers(-5, 1_010, [0, 1, 7, 60][seed]))
    tb[: len(tb) // 2] = ta[rng.integers(0, len(ta), len(tb) // 2)]  # ties
    tb.sort()
    ca, cb = rng.integers(0, 9, len(ta)), rng.integers(10, 19, len(tb))
    t, c = merge2_nb(ta, ca, tb, cb)
    o = np.argsort(np.concatenate([ta, tb]), kind="stable")  # ties: the ops first
    np.testing.assert_array_equal(t, np.concatenate([ta, tb])[o])
    np.testing.assert_array_equal(c, np.concatenate([ca, cb])[o])
    assert [len(x) for x in merge2_nb(ta[:0], ca[:0], tb, cb)] == [len(tb)] * 2


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_launched_read_from_the_flags_as_from_bools(engine):
    from cutimeline.analysis.replay.costs import op_costs
    from cutimeline.timeline.schema import NONE, OpFlag
    rng = np.random.default_rng(3)
    n = 2_000
    name, shapes = rng.integers(0, 30, n).astype(np.int32), rng.integers(0, 5, n)
    grad = np.where(rng.random(n) < 0.3, 7, NONE)
    flags = rng.integers(0, 64, n).astype(np.uint8)
    table = {"name": [1, 2, 3], "shapes": [0, 1, 2], "ns": [5_000, 6_000, 7_000]}
    args = (name, shapes, grad, np.zeros(n, np.int32))
    more = (table, 900.0, 40.0, 1.7, 600)
    got = op_costs(*args, flags & OpFlag.LAUNCH, *more, engine=engine)
    want = op_costs(*args, (flags & OpFlag.LAUNCH) != 0, *more, engine=engine)
    np.testing.assert_array_equal(got, want)
    assert (got - op_costs(*args, np.zeros(n, bool), *more, engine=engine))[
        (flags & OpFlag.LAUNCH) != 0].min() == 600
