"""Column facts (min, max, NONE, sorted): the Numba pass against its twin,
and the table remembering them."""

import numpy as np
import pytest

from cutimeline.numeric.columns import Facts, column_facts, facts_of
from cutimeline.timeline.schema import NONE
from cutimeline.timeline.table import Table


@pytest.mark.parametrize("seed", range(6))
def test_facts_twins_agree(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 4095, 4096, 4097, 9000):
        x = np.sort(rng.integers(-5, 10**6, n))
        if seed % 2:  # one value out of order, anywhere (block edges too)
            k = int(rng.integers(0, n))
            x[k] = rng.integers(-5, 10**6)
        if seed % 3 == 0:
            x[rng.integers(0, n)] = NONE
        for a in (x, x.astype(np.int32)):
            got, want = facts_of(a, "numba"), facts_of(a, "numpy")
            assert got == want
            assert got == Facts(int(x.min()), int(x.max()), bool((x == NONE).any()),
                                bool(np.all(x[1:] >= x[:-1])))
    assert facts_of(np.zeros(0, np.int64), "numba") == Facts(0, 0, False, True)


def test_unsorted_only_at_a_block_edge():
    x = np.arange(10_000)
    x[4096] = 0  # below x[4095]: the first compare of the second block
    assert not facts_of(x, "numba").sorted
    assert facts_of(np.arange(10_000), "numba").sorted


def test_table_remembers_once_per_column():
    t = Table("gpu", {"begin_ns": [5, 3, 9], "end_ns": [6, 7, 10]})
    calls = []

    def count(x):
        calls.append(len(x))
        return facts_of(x, "numpy")
    assert t.remember("begin_ns", "facts", count) == Facts(3, 9, False, False)
    assert t.remember("begin_ns", "facts", count) == Facts(3, 9, False, False)
    assert len(calls) == 1
    assert column_facts(t, "end_ns", "numba") == Facts(6, 10, False, True)
    # a table made from it (new columns) starts with nothing remembered
    u = t.replace(begin_ns=[1, 2, 3])
    assert column_facts(u, "begin_ns", "numpy") == Facts(1, 3, False, True)
    assert column_facts(t, "begin_ns", "numpy").sorted is False
