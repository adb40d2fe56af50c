"""straggler.py, matching.py, rankclock.py: the collectives table, waits and lateness, against brute force."""

from __future__ import annotations

import numpy as np

import cutimeline as ctl
from cutimeline.dist.straggler import _median_of_others, _union_ns, collectives

from fakeranks import fake_ranks


def test_collectives_table_semantics():
    tls = fake_ranks(3, 3, n=5, slow=1, delay_ns=10 ** 6)
    tl = ctl.merge(tls)
    c = collectives(tl)
    assert len(c) == 15 and c["instance"].tolist() == np.repeat(np.arange(5), 3).tolist()
    for k in range(5):
        m = c[c["instance"] == k]
        a = m["arrival_ns"]
        assert np.array_equal(m["wait_ns"], a.max() - a)
        assert m["rank"][m["last"]].tolist() == [1]
        assert m["held_ns"][m["last"]][0] == a.max() - np.sort(a)[-2]
        for i in range(3):
            assert m["late_ns"][i] == a[i] - np.median(np.delete(a, i))
    assert c["step"].tolist() == np.repeat(np.arange(5), 3).tolist()
    assert set(c["name"]) == {"c10d::allreduce_"} and set(c["group_size"]) == {3}


def test_median_of_others_matches_brute_force():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 7, 50)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sa = np.concatenate([np.sort(rng.integers(0, 100, k)) for k in counts])
    pos = np.concatenate([np.arange(k) for k in counts])
    n = np.repeat(counts, counts)
    got = _median_of_others(sa, first, counts, pos, n)
    want = [np.median(np.delete(sa[f:f + k], i)) if k > 1 else np.nan
            for f, k in zip(first, counts) for i in range(k)]
    assert np.allclose(got, want, equal_nan=True)


def test_union_matches_brute_force():
    rng = np.random.default_rng(1)
    b = rng.integers(0, 1000, 40)
    e = b + rng.integers(0, 80, 40)
    covered = np.zeros(1100, bool)
    for x, y in zip(b, e):
        covered[x:y] = True
    assert _union_ns(b, e) == covered.sum()


def test_slices_keep_the_collectives_they_hold():
    tl = ctl.merge(fake_ranks(7, 3, n=10, slow=2))
    whole = collectives(tl)
    part = collectives(tl.slice_steps(3, 5))
    # the window is the union of the ranks' steps: a neighbour's op may reach in
    assert {3, 4, 5} <= set(part["number"].tolist()) <= {2, 3, 4, 5, 6}
    for k in (3, 4, 5):
        a = whole[whole["number"] == k]
        b = part[part["number"] == k]
        assert np.array_equal(a["wait_ns"], b["wait_ns"]) and np.array_equal(a["rank"], b["rank"])
