"""jsonrows.py: rows of JSON text from numpy columns, against the same text
made one row at a time in Python."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cutimeline.formats import jsonrows
from cutimeline.formats.jsonrows import Fragments, Rows, escape

EDGES = [0, -1, 1, 9, 10, 99, 100, 999, 1000, 1001, -500, 500, 5000, -999, 10**15,
         -2**63, 2**63 - 1, -2**63 + 1, 2**62, -2**62]


def us(ns: int) -> str:
    """The µs text the export always wrote (a copy of the old ``_us``)."""
    if ns < 0:
        return "-" + us(-ns)
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def text_of(rows: Rows, budget: int | None = None) -> bytes:
    return b"".join(rows.render(a, b).tobytes() for a, b in rows.ranges(budget))


def columns(seed: int, n: int):
    rng = np.random.default_rng(seed)
    kind = seed % 4
    if kind == 0:    # anything int64 holds
        v = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)
    elif kind == 1:  # timestamps: all of a width
        v = rng.integers(10**15, 10**15 + 10**9, n)
    elif kind == 2:  # durations: widths vary, some whole µs
        v = rng.integers(0, 30_000, n) // rng.choice([1, 1000], n)
    else:            # small, signed
        v = rng.integers(-3_000, 3_000, n)
    v[:len(EDGES)] = EDGES[:n] if kind == 0 else v[:len(EDGES)]
    minus = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)
    return rng, v.astype(np.int64), minus


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("budget", [None, 1, 700, 5_000])
def test_rows_match_python_formatting(seed, budget):
    n = 700
    rng, v, minus = columns(seed, n)
    names = ["a", "bé\ud800", 'q"\\\n', "", "x" * 300] + [f"n{i}" for i in range(20)]
    table = Fragments(escape(names) + ['""'])
    ids = rng.integers(-1, len(names), n)
    some = rng.random(n) < (0.5 if seed % 2 else 1.0)
    rows = (Rows(n).text("{").int(v).text(",").us(v).text("|").pick(table, ids)
            .text("?", some).int(v, some).text(";", some).us(v, some, minus=minus)
            .text("~").us(v, minus=minus).text("}\n"))
    esc = [json.dumps(s) for s in names] + ['""']
    want = "".join(
        f"{{{v[i]},{us(int(v[i]))}|{esc[ids[i]]}"
        + (f"?{v[i]};{us(int(v[i]) - int(minus[i]))}" if some[i] else "")
        + f"~{us(int(v[i]) - int(minus[i]))}}}\n" for i in range(n))
    assert text_of(rows, budget) == want.encode()


def test_large_fragment_tables_gather_bytes_alike(monkeypatch):
    rng = np.random.default_rng(5)
    names = [f"name{i}" * (i % 7) for i in range(500)]
    ids = rng.integers(-1, len(names), 3_000)
    small = text_of(Rows(len(ids)).pick(Fragments(escape(names) + ['""']), ids).text("\n"))
    monkeypatch.setattr(jsonrows, "MATRIX_BYTES", 10)
    large = Fragments(escape(names) + ['""'])
    assert large.matrix is None
    assert text_of(Rows(len(ids)).pick(large, ids).text("\n"), 2_000) == small


def test_chunks_stay_within_the_budget_however_long_a_fragment():
    n = 10_000
    table = Fragments(['"short"', '"' + "y" * 100_000 + '"', '""'])
    ids = np.zeros(n, np.int64)
    ids[[10, 7_000]] = 1
    rows = Rows(n).text("[").pick(table, ids).text("]").int(np.arange(n))
    ranges = list(rows.ranges(1 << 16))
    assert [a for a, _ in ranges] == [0] + [b for _, b in ranges[:-1]] and ranges[-1][1] == n
    for a, b in ranges:
        assert b - a == 1 or (b - a) * rows._width(a, b) <= 1 << 16
    assert len(ranges) < 200   # the long rows are cut apart, the rest stay together
    short, long = '"short"', '"' + "y" * 100_000 + '"'
    want = "".join(f"[{long if i in (10, 7_000) else short}]{i}" for i in range(n))
    assert text_of(rows, 1 << 16) == want.encode()


def test_no_rows_no_text():
    rows = Rows(0).text("x").int(np.zeros(0, np.int64)).pick(Fragments(['""']), np.zeros(0))
    assert list(rows.ranges()) == [] and text_of(rows) == b""


def test_escape_is_json_dumps():
    strings = ["plain", "é", "\ud800", "\x00\x1f", '"\\/', "日本", "\U0001F600"]
    assert escape(strings) == [json.dumps(s) for s in strings]
