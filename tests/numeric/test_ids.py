"""Dense ids of key columns: twins agree, ids decode to the keys."""

import numpy as np
import pytest

from cutimeline.numeric.ids import dense_ids, pair_ids


def assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_dense_ids_many_keys_and_order():
    keys = np.random.default_rng(1).integers(-5, 10**12, 500)
    ids, uniq = dense_ids(keys, engine="numba")
    assert np.all(np.diff(uniq) > 0)
    np.testing.assert_array_equal(uniq[ids], keys)
    assert_same((ids, uniq), dense_ids(keys, engine="numpy"))


@pytest.mark.parametrize("many", [False, True])
def test_pair_ids(many):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 3, 500)
    b = rng.integers(0, 200 if many else 4, 500) * 1_000_000_007
    ids, ka, kb = pair_ids(a, b, engine="numba")
    np.testing.assert_array_equal(ka[ids], a)
    np.testing.assert_array_equal(kb[ids], b)
    assert np.all(np.diff(ka * 10**12 + kb // 1_000_000_007) > 0)
    assert_same((ids, ka, kb), pair_ids(a, b, engine="numpy"))


def test_few_keys_keep_first_seen_order_out():
    ids, uniq = dense_ids([7, 7, 3, 9, 3], engine="numba")
    assert uniq.tolist() == [3, 7, 9] and ids.tolist() == [1, 1, 0, 2, 0]
    assert_same(dense_ids([7, 7, 3, 9, 3], engine="numpy"), (ids, uniq))
    assert [len(x) for x in pair_ids([], [])] == [0, 0, 0]


@pytest.mark.parametrize("distinct", [1, 40, 300, 5000])
def test_dense_ids_twins_agree_as_the_hash_grows(distinct):
    # more distinct keys than the first hash holds: it is made again, larger
    rng = np.random.default_rng(distinct)
    keys = rng.choice(rng.integers(-2**62, 2**62, distinct), 20_000)
    assert_same(dense_ids(keys, engine="numba"), dense_ids(keys, engine="numpy"))
    assert len(dense_ids(keys)[1]) == len(np.unique(keys))
    assert [len(x) for x in dense_ids([])] == [0, 0]
