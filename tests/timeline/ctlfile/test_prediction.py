"""prediction.py: each column's candidate predictions — every one decodes
exactly, the writer takes the cheapest, and the candidates can always be
decoded in some order."""

import itertools

import numpy as np
import pytest
from handmade import make_timeline

from cutimeline.timeline.ctlfile.columncodec import CodecError
from cutimeline.timeline.ctlfile.prediction import candidates, choose, decode, residual
from cutimeline.timeline.schema import ENCODING, SCHEMA

INT_COLUMNS = [(t, c) for t, s in SCHEMA.items() for c, d in s if d.kind != "f"]


def columns(tl):
    return {name: tl.table(name).columns for name in SCHEMA}


def decoded(tables, encodings):
    stored = {key: residual(enc, *key, tables) for key, enc in encodings.items()}
    return decode(encodings, lambda t, c: stored[t, c])


@pytest.mark.parametrize("table, col", sorted(k for k, v in ENCODING.items() if len(v) > 1))
def test_every_candidate_decodes_exactly(table, col):
    tables = columns(make_timeline(n=300))
    base = {key: candidates(*key)[0] for key in INT_COLUMNS}
    for enc in candidates(table, col):
        out = decoded(tables, {**base, (table, col): enc})
        for t, c in INT_COLUMNS:
            np.testing.assert_array_equal(out[t][c], tables[t][c], err_msg=f"{t}.{c} {enc}")


def test_every_combination_of_candidates_decodes():
    # no choice the writer can make leaves the reader a circle
    tables = columns(make_timeline(n=40))
    multi = [k for k in INT_COLUMNS if len(candidates(*k)) > 1]
    base = {key: candidates(*key)[0] for key in INT_COLUMNS}
    for combo in itertools.product(*(candidates(*k) for k in multi)):
        out = decoded(tables, {**base, **dict(zip(multi, combo))})
        assert np.array_equal(out["gpu"]["begin_ns"], tables["gpu"]["begin_ns"])


def test_the_cheapest_candidate_is_chosen_on_a_sample():
    rng = np.random.default_rng(1)
    n = 100_000
    end = np.cumsum(rng.integers(2_000, 20_000, n))
    ops = {"host_begin_ns": end - rng.integers(100, 1_900, n), "host_end_ns": end}
    ops["host_begin_ns"][1:] = end[:-1] + 500  # ops back to back: the gap is constant
    tables = {"ops": ops}
    assert choose("ops", "host_begin_ns", tables)[0] == ("after", "host_end_ns")
    ops["host_begin_ns"] = end - 1_000  # the durations constant: delta is as cheap
    assert choose("ops", "host_begin_ns", tables)[0] == ("delta",)
    enc, res = choose("ops", "host_begin_ns", {"ops": {k: v[:50] for k, v in ops.items()}})
    assert res is not None and len(res) == 50  # a small table: computed for every row


def test_values_wrap_exactly():
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, -5])
    tables = {"ops": {"host_begin_ns": big, "host_end_ns": big[::-1].copy()}}
    for enc in candidates("ops", "host_begin_ns"):
        r = residual(enc, "ops", "host_begin_ns", tables)
        stored = {("ops", "host_begin_ns"): r,
                  ("ops", "host_end_ns"): residual(("minus", "host_begin_ns"), "ops",
                                                   "host_end_ns", tables)}
        out = decode({("ops", "host_begin_ns"): enc,
                      ("ops", "host_end_ns"): ("minus", "host_begin_ns")},
                     lambda t, c: stored[t, c])
        assert np.array_equal(out["ops"]["host_begin_ns"], big)


def test_references_outside_and_circles_are_refused():
    stored = {("gpu", "op"): np.array([0, 5]), ("gpu", "launch_ns"): np.zeros(2, np.int64),
              ("ops", "host_end_ns"): np.zeros(3, np.int64),
              ("ops", "host_begin_ns"): np.zeros(3, np.int64)}
    encodings = {("gpu", "op"): ("delta",),
                 ("gpu", "launch_ns"): ("ref", "op", "ops", "host_end_ns"),
                 ("ops", "host_end_ns"): ("minus", "host_begin_ns"),
                 ("ops", "host_begin_ns"): ("raw",)}
    with pytest.raises(CodecError, match="gpu.op refers to rows outside table 'ops'"):
        decode(encodings, lambda t, c: stored[t, c])
    circle = {("ops", "host_end_ns"): ("minus", "host_begin_ns"),
              ("ops", "host_begin_ns"): ("minus", "host_end_ns")}
    with pytest.raises(CodecError, match="depends on itself"):
        decode(circle, lambda t, c: stored[t, c])
