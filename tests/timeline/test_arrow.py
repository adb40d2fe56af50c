"""arrow.py: Timeline.to_arrow and to_polars, the report's tables as pandas, and a
DuckDB query over many ranks' Arrow tables (duckdb and polars are optional: their
tests skip without them; duckdb is in the ``test`` extra)."""

from __future__ import annotations

import numpy as np
import pytest
from fakeranks import fake_ranks
from synth import trace

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.alignment import align
from cutimeline.timeline.schema import (ENUM_COLUMNS, NONE, REFERENCES, SCHEMA,
                                        STRING_COLUMNS, SpanKind)


@pytest.fixture(scope="module")
def tl():
    return align(trace(3, devices=2, n_ops=300))


def test_to_arrow_gives_every_table_spelled_as_the_parquet_files(tl, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    tables = tl.to_arrow()
    assert list(tables) == list(SCHEMA)
    tl.to_parquet(tmp_path / "out")
    for name, t in tables.items():
        assert isinstance(t, pa.Table)
        assert t.column_names == [c for c, _ in SCHEMA[name]] and t.num_rows == len(tl.table(name))
        assert t.equals(pq.read_table(tmp_path / "out" / f"{name}.parquet")), name
    one = tl.to_arrow("gpu")
    assert one.equals(tables["gpu"])
    ops = tables["ops"]
    names = ops.column("name").to_pylist()
    assert names == [None if i == NONE else tl.strings[i] for i in tl.ops["name"].tolist()]
    kinds = tables["gpu"].column("kind").to_pylist()
    assert kinds == [ENUM_COLUMNS["gpu", "kind"](k).name.lower() for k in tl.gpu.kind.tolist()]
    refs = tables["gpu"].column("op").to_pylist()
    assert refs == [None if i == NONE else i for i in tl.gpu.op.tolist()]
    assert ("gpu", "op") in REFERENCES and ("ops", "name") in STRING_COLUMNS


def test_to_arrow_and_to_polars_errors_are_sentences(tl, monkeypatch):
    pytest.importorskip("pyarrow")
    with pytest.raises(CutimelineError, match=r"to_arrow\('nope'\): there is no such table"):
        tl.to_arrow("nope")
    import builtins
    real = builtins.__import__

    def no(name, *args, **kwargs):
        if name in ("polars", "pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no)
    with pytest.raises(CutimelineError, match=r"to_polars needs polars \(and pyarrow\): "
                                              r"pip install polars"):
        tl.to_polars()
    with pytest.raises(CutimelineError, match=r"to_arrow needs pyarrow: pip install "
                                              r"'cutimeline\[parquet\]'"):
        tl.to_arrow()


def test_to_polars_matches_to_arrow(tl):
    pl = pytest.importorskip("polars")
    frames = tl.to_polars()
    assert list(frames) == list(SCHEMA)
    for name, frame in frames.items():
        assert isinstance(frame, pl.DataFrame)
        assert frame.columns == [c for c, _ in SCHEMA[name]] and frame.height == len(tl.table(name))
    gpu = tl.to_polars("gpu")
    assert gpu["kind"].cast(pl.String).to_list() == \
        tl.to_arrow("gpu").column("kind").to_pylist()
    assert gpu["op"].to_list() == [None if i == NONE else i for i in tl.gpu.op.tolist()]


def test_every_report_table_comes_as_pandas(tl):
    pd = pytest.importorskip("pandas")
    rep = ctl.analyze(tl)
    for name in ("streams", "devices", "steps", "gaps", "ops", "sources"):
        t = rep.table(name)
        df = rep.table(name, pandas=True)
        assert isinstance(df, pd.DataFrame), name
        assert list(df.columns) == list(t.dtype.names) and len(df) == len(t), name
        for col in t.dtype.names:
            np.testing.assert_array_equal(df[col].to_numpy(), t[col], err_msg=f"{name}.{col}")


def test_duckdb_over_many_ranks_arrow_tables():
    """The GPU time of each rank by kernel name, and the slowest rank of each
    step, in SQL over every rank's Arrow tables (in memory, no files)."""
    duckdb = pytest.importorskip("duckdb")
    ranks = fake_ranks(7, world=4, n=12, slow=2, delay_ns=3_000_000)
    pa = pytest.importorskip("pyarrow")
    gpu = pa.concat_tables([t.to_arrow("gpu").append_column(
        "rank", pa.array(np.full(len(t.gpu), r))) for r, t in enumerate(ranks)],
        promote_options="permissive")
    spans = pa.concat_tables([t.to_arrow("spans").append_column(
        "rank", pa.array(np.full(len(t.spans), r))) for r, t in enumerate(ranks)],
        promote_options="permissive")
    busy = duckdb.sql("SELECT rank, sum(end_ns - begin_ns) AS ns FROM gpu "
                      "GROUP BY rank ORDER BY rank").fetchall()
    assert busy == [(r, int((t.gpu.end_ns - t.gpu.begin_ns).sum()))
                    for r, t in enumerate(ranks) if len(t.gpu)]
    slowest = duckdb.sql("""
        SELECT number AS step, arg_max(rank, end_ns - begin_ns) AS rank
        FROM spans WHERE kind = 'step' GROUP BY step ORDER BY step""").fetchall()
    assert len(slowest) == 12
    for step, rank in slowest:
        times = []
        for t in ranks:
            s = t.spans
            m = (s.kind == SpanKind.STEP) & (s.number == step)
            times.append(int((s.end_ns[m] - s.begin_ns[m]).max()))
        assert rank == int(np.argmax(times)), step
