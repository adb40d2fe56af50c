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


@pytest.mark.parametrize("first", [0, 2])
def test_pair_ids_of_int16_devices_in_and_out_of_sorted_order(first):
    # few streams: numbered by a table; many, or far apart: by the hash
    # a Timeline's device column is int16: read as it is; pairs seen in
    # sorted order keep their ids, others are renumbered
    rng = np.random.default_rng(first)
    a = rng.integers(0, 3, 400).astype(np.int16)
    b = rng.integers(0, 4, 400)
    a[0], b[0] = first, 0
    got = pair_ids(a, b, engine="numba")
    assert got[0].dtype == got[1].dtype == np.int64
    assert_same(got, pair_ids(a.astype(np.int64), b, engine="numpy"))
    assert_same(pair_ids(a[:1].repeat(9), b[:9] * 0, engine="numba"),
                (np.zeros(9, np.int64), a[:1].astype(np.int64), b[:1] * 0))
    for far in (b * 10**12 - 5, b + 5000, -b):  # beyond the table; negative streams
        assert_same(pair_ids(a, far, engine="numba"),
                    pair_ids(a.astype(np.int64), far, engine="numpy"))


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
