"""parquet.py: Timeline.to_parquet, read back with pyarrow (and with DuckDB,
running the README's recipe over several ranks' folders)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.alignment import align
from cutimeline.timeline.schema import ENUM_COLUMNS, NONE, REFERENCES, SCHEMA, STRING_COLUMNS

from handmade import random_timeline
from synth import trace

README = pathlib.Path(__file__).parents[2] / "README.md"


def test_each_table_reads_back_with_strings_decoded(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    tl = align(trace(1, devices=2, n_ops=400))   # every table has rows
    tl = tl.replace(meta={**tl.meta, "rank": 2})
    tl.to_parquet(tmp_path / "out")
    files = sorted(os.listdir(tmp_path / "out"))
    assert files == sorted([f"{t}.parquet" for t in SCHEMA] + ["meta.json"])
    head = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert head["format"] == "cutimeline-parquet" and head["meta"]["rank"] == 2
    for name, columns in SCHEMA.items():
        table = pq.read_table(tmp_path / "out" / f"{name}.parquet")
        assert table.column_names == [c for c, _ in columns]
        assert table.num_rows == len(tl.table(name)) == head["tables"][name]["rows"]
        for col, dtype in columns:
            have = table.column(col).to_pylist()
            a = tl.table(name)[col]
            if (name, col) in STRING_COLUMNS:
                want = [None if i == NONE else tl.strings[i] for i in a.tolist()]
            elif (name, col) in ENUM_COLUMNS:
                want = [ENUM_COLUMNS[name, col](v).name.lower() for v in a.tolist()]
            elif (name, col) in REFERENCES:
                want = [None if i == NONE else i for i in a.tolist()]
            else:
                want = a.tolist()
                assert table.schema.field(col).type.to_pandas_dtype() == dtype
            assert have == want, (name, col)


def test_string_columns_keep_just_the_strings_they_use(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    tl = random_timeline(2, n=500)
    extra = [f"unused {i}" for i in range(1_000)]
    tl = ctl.Timeline({n: tl.table(n) for n in SCHEMA}, list(tl.strings) + extra, tl.meta)
    tl.to_parquet(tmp_path)
    names = pq.read_table(tmp_path / "ops.parquet").column("name").combine_chunks()
    assert set(names.dictionary.to_pylist()) == set(tl.decode(tl.ops["name"]))


def test_a_second_write_replaces_the_first(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    random_timeline(1, n=300).to_parquet(tmp_path)
    small = random_timeline(1, n=30, steps=1)
    small.to_parquet(tmp_path)
    assert pq.read_table(tmp_path / "ops.parquet").num_rows == len(small.ops)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_errors_name_the_problem_and_the_fix(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    tl = random_timeline(1, n=30, steps=1)
    (tmp_path / "file").write_text("")
    with pytest.raises(CutimelineError, match="it is a file; give a folder"):
        tl.to_parquet(tmp_path / "file")
    with pytest.raises(CutimelineError, match="meta cannot be written as JSON"):
        tl.replace(meta={**tl.meta, "bad": object()}).to_parquet(tmp_path / "x")
    assert not (tmp_path / "x").exists()
    monkeypatch.setitem(sys.modules, "pyarrow", None)   # as if not installed
    with pytest.raises(CutimelineError, match=re.escape("pip install 'cutimeline[parquet]'")):
        tl.to_parquet(tmp_path / "y")


def readme_recipe() -> str:
    """The Python block of the README's Parquet section."""
    text = README.read_text()
    section = text.split("## Many ranks, big runs: Parquet", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_recipe_finds_the_slowest_rank_of_each_step(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    pytest.importorskip("duckdb")
    paths = []
    for rank in range(3):
        tl = random_timeline(10 + rank, n=400, steps=4)
        tl = tl.replace(meta={**tl.meta, "rank": rank})
        paths.append(str(tmp_path / f"rank{rank}.ctl"))
        tl.save(paths[-1])
    monkeypatch.chdir(tmp_path)
    scope = {"paths": paths}
    exec(compile(readme_recipe(), "README.md", "exec"), scope)
    got = {row[0]: row[1:] for row in scope["slowest"].fetchall()}
    # the same answer, from the Timelines
    length = {}
    for rank, path in enumerate(paths):
        s = ctl.load(path).spans
        for k in np.flatnonzero(s.kind == 0):
            length.setdefault(int(s.number[k]), {})[rank] = int(s.end_ns[k] - s.begin_ns[k])
    assert sorted(got) == sorted(length)
    for step, by_rank in length.items():
        rank, slowest_ms = got[step][:2]
        assert int(rank) == max(by_rank, key=by_rank.get)
        assert slowest_ms == pytest.approx(max(by_rank.values()) / 1e6)


def test_collectives_read_back_with_their_kinds_named_and_ops_as_rows(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    tl = ctl.load(pathlib.Path(__file__).parents[1] / "data" / "ctl" / "v4_merged.ctl")
    tl.to_parquet(tmp_path)
    t = pq.read_table(tmp_path / "collectives.parquet").to_pydict()
    c = tl.collectives
    assert t["op"] == c.op.tolist() and t["group"] == c.group.tolist()
    assert t["kind"] == ["all", "from_root", "to_root"] * 4
    assert t["number"] == c.number.tolist() and t["peer"] == c.peer.tolist()
    assert t["done_ns"] == c.done_ns.tolist()
    head = json.loads((tmp_path / "meta.json").read_text())
    assert head["tables"]["collectives"]["rows"] == 12 and "collectives" not in head["meta"]
