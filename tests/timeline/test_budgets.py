"""budgets.py: what a file may claim, held to its bytes before anything is read.

The memory bombs of issue 38 (a 100 KB ``.ctl`` claiming 10^8 rows, a
``meta.json`` inflating 1,000×, a ``.json.gz`` inflating past its budget)
and the zip damage of issue 37 (flags, methods, CRCs) are refused with a
sentence, and refusing them allocates almost nothing; paths that are no
regular file are refused without a read. Issue 45's: files that pass the
rows-per-byte budget but claim more rows than memory holds (a 378 KB
``.ctl`` of 2·10^7 ops, a 1.3 MB journal of 2.4·10^7) and traces of more
events or text than it holds are refused by the memory budget, before the
rows are made, whichever reader reads them.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import tempfile
import tracemalloc
import zipfile

import numpy as np
import pytest

import adversarial

import cutimeline as ctl
from cutimeline import CutimelineError, Timeline
from cutimeline.timeline import budgets
from cutimeline.timeline.ctlfile.columncodec import pack
from cutimeline.timeline.ctlfile.journal import Journal
from cutimeline.timeline.schema import SCHEMA


def _refused(tmp_path, data: bytes, words: str, suffix: str = ".ctl",
             most_bytes: int = 64 << 20) -> None:
    path = tmp_path / f"bomb{suffix}"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(CutimelineError) as info:
            ctl.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert words in str(info.value), str(info.value)
    assert path.name in str(info.value)
    assert peak < most_bytes, f"{peak / 2**20:.0f} MiB to refuse it"


def test_rows_past_what_the_file_can_hold_are_refused(tmp_path):
    _refused(tmp_path, adversarial.ctl_claimed_rows(10 ** 7),
             "claims 10,000,000 rows in", most_bytes=8 << 20)


def test_a_meta_json_that_inflates_past_its_budget_is_refused(tmp_path):
    _refused(tmp_path, adversarial.ctl_meta_bomb(24 << 20), "its meta.json claims",
             most_bytes=4 << 20)


def test_a_meta_json_that_lies_about_its_size_inflates_no_further(tmp_path):
    _refused(tmp_path, adversarial.ctl_meta_bomb(24 << 20, honest=False), "damaged",
             most_bytes=8 << 20)


@pytest.mark.parametrize("honest", [True, False])
def test_a_gzip_trace_that_inflates_past_its_budget_is_refused(tmp_path, honest):
    # refused as the stream passes the budget (~72 MB here), never much
    # past it, whatever size its trailer claims
    data = adversarial.trace_gzip_bomb(80 << 20, honest=honest)
    most = budgets.text_budget(len(data))
    assert most < 80 << 20
    _refused(tmp_path, data, f"inflates past {most:,} bytes", ".json.gz",
             most_bytes=most + most // 4 + (8 << 20))  # a bytearray grows by 1/8


@pytest.mark.parametrize("make, words", [
    (adversarial.ctl_zip_flag, "flagged encrypted"),
    (adversarial.ctl_zip_method, "compression method 99"),
    (adversarial.ctl_bad_crc, "Bad CRC-32"),
    (adversarial.ctl_truncated, "not a cutimeline file"),
])
def test_zip_damage_is_a_sentence(tmp_path, make, words):
    _refused(tmp_path, make(), words)


@pytest.mark.parametrize("name, kind", [("/dev/zero", "character device"),
                                        ("/dev/urandom", "character device"),
                                        ("FIFO", "FIFO")])
def test_a_path_that_is_no_regular_file_is_refused_unread(tmp_path, name, kind):
    path = adversarial.special_paths(str(tmp_path))[name]
    for load in (ctl.load, lambda p: ctl.Timeline and __import__(
            "cutimeline.formats.kineto", fromlist=["import_chrome"]).import_chrome(p),
            lambda p: __import__("cutimeline.timeline.timeline",
                                 fromlist=["load"]).load(p)):
        with pytest.raises(CutimelineError, match=f"is a {kind}.*regular files only"):
            load(path)


def test_budgets_leave_real_files_alone(tmp_path):
    # the checked-in traces and files of every format version load as before
    import pathlib
    data = pathlib.Path(__file__).parents[1] / "data"
    for path in [*sorted((data / "ctl").glob("*.ctl")),
                 *sorted((data / "kineto").rglob("*.json.gz"))[:6]]:
        tl = ctl.load(path)
        assert len(tl.ops) + len(tl.gpu) > 0, path


def test_running_out_of_memory_is_a_sentence_naming_the_file(tmp_path, monkeypatch):
    from cutimeline.timeline.ctlfile import fileformat
    path = tmp_path / "run.ctl"
    adversarial.base(n=50).save(path)

    def starved(*a, **k):
        raise MemoryError
    monkeypatch.setattr(fileformat, "_decode", starved)
    with pytest.raises(CutimelineError, match=r"run.ctl claims \d[\d,]* rows, and reading "
                                              r"it ran out of memory"):
        ctl.load(path)


# -- the memory budget (issue 45): what a file claims, held to memory ----------------

def _identical_ops(n: int) -> Timeline:
    """``n`` ops of one name, 1 µs apart, 200 ns each: the writer stores
    every column as a constant but the last, whatever ``n``."""
    i = np.arange(n, dtype=np.int64)
    return Timeline({"ops": {"seq": i, "name": np.zeros(n, np.int32),
                             "host_begin_ns": 10 ** 9 + 1000 * i,
                             "host_end_ns": 10 ** 9 + 1000 * i + 200}},
                    ["aten::add"], {"source": "test"})


def ctl_of_identical_ops(rows: int, pad: int = 0) -> bytes:
    """The ``.ctl`` file the writer makes of ``_identical_ops(rows)``, made
    without the rows: a file of 1,000 such ops whose one stored column
    (``ops.host_end_ns``: 200 less than its prediction, deflated) is
    stretched to ``rows``; ``pad`` random bytes after the columns, which no
    column refers to, let it pass the rows-per-byte budget as the issue's
    file (378 KB for 2·10^7 ops) did."""
    small = _identical_ops(1000)
    items = adversarial._members(adversarial.write_raw(
        {k: small.table(k) for k in SCHEMA}, small.strings, small.meta))
    (_, text, method), (_, payload, _) = items
    head = json.loads(text)
    cols = head["manifest"]["columns"]
    entry, data = pack(np.broadcast_to(np.int64(200), rows), fill=False)
    cols["ops.host_end_ns"] = dict(entry, encoding=cols["ops.host_end_ns"]["encoding"],
                                   offset=len(payload), size=len(data))
    head["manifest"]["rows"]["ops"] = rows
    return adversarial._zip([("meta.json", json.dumps(head).encode(), method),
                             ("columns.bin", payload + data + os.urandom(pad),
                              zipfile.ZIP_STORED)])


def journal_of_identical_ops(path, chunks: int, rows: int) -> None:
    """A journal of ``chunks`` chunks of ``rows`` identical ops each, written
    by the recorder's own writer (the issue's: 6 × 4·10^6 rows in 1.5 MB)."""
    j = Journal(path, {"source": "record"})
    try:
        for c in range(chunks):
            seq = np.arange(c * rows, (c + 1) * rows, dtype=np.int64)
            begin = 10 ** 9 + 1000 * seq
            ops = {col: np.broadcast_to(np.int64(-1 if col in ("shapes", "module", "grad_fn",
                                                               "device", "stream") else 0),
                                        rows) for col, _ in SCHEMA["ops"]}
            ops.update(seq=seq, host_begin_ns=begin, host_end_ns=begin + 200)
            j.append({"ops": ops}, ["aten::add"] if c == 0 else [],
                     {"step": 0, "host_ns": 0, "truncated": False,
                      "threads_from": min(c, 1), "threads": [] if c else ["main"]})
    finally:
        j.close()


def _refused_by_memory(load, path, words: str, most_bytes: int = 8 << 20) -> str:
    """Load ``path``, which must be refused by the memory budget with a
    sentence naming the file, the claim, the budget and how to raise it,
    allocating under ``most_bytes`` to refuse it."""
    tracemalloc.start()
    try:
        with pytest.raises(CutimelineError) as info:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = str(info.value)
    assert str(path) in text and words in text, text
    assert "memory budget of" in text and "CUTIMELINE_MAX_BYTES" in text, text
    assert "max_bytes" in text, text
    assert peak < most_bytes, f"{peak / 2**20:.0f} MiB to refuse it"
    return text


def test_crafted_files_are_what_the_writer_makes():
    # the crafted files are honest: under a budget that fits, they load
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ops.ctl")
        with open(path, "wb") as f:
            f.write(ctl_of_identical_ops(50_000))
        assert len(ctl.load(path).ops) == 50_000
        path = os.path.join(d, "journal.ctl")
        journal_of_identical_ops(path, 3, 20_000)
        tl = ctl.load(path)
        assert len(tl.ops) == 60_000 and tl.meta["journal"]["chunks"] == 4


def test_a_small_ctl_claiming_2e7_ops_is_refused_by_the_memory_budget(tmp_path, monkeypatch):
    # issue 45: a 378 KB file claiming 2·10^7 ops passes the rows-per-byte
    # budget, then took 3.75 GB through load → analyze → plot → export
    monkeypatch.delenv(budgets.ENV_MAX_BYTES, raising=False)
    path = tmp_path / "ops.ctl"
    path.write_bytes(ctl_of_identical_ops(2 * 10 ** 7, pad=220_000))
    assert path.stat().st_size < 400_000
    budgets.row_budget(str(path), 2 * 10 ** 7 + 1, path.stat().st_size)  # passes it
    text = _refused_by_memory(ctl.load, path, "claims 20,000,000 rows (20,000,000 ops)")
    assert f"{budgets.timeline_bytes({'ops': 2 * 10 ** 7}, 1) / 2**30:.1f} GiB" in text


def test_a_small_journal_claiming_24e6_ops_is_refused_by_the_memory_budget(tmp_path,
                                                                         monkeypatch):
    # issue 45: a 1.3 MB journal of 6 chunks × 4·10^6 rows loaded 25 M ops
    # (4.3 GB): the journal reader had no budget at all
    monkeypatch.delenv(budgets.ENV_MAX_BYTES, raising=False)
    path = tmp_path / "rank-0.ctl"
    journal_of_identical_ops(path, 6, 4 * 10 ** 6)
    assert path.stat().st_size < 2 << 20
    _refused_by_memory(ctl.load, path, "claims 24,000,000 rows (24,000,000 ops) and 1 string")


def test_a_journal_is_held_to_the_same_budget_as_a_ctl_file(tmp_path):
    journal = tmp_path / "rank-0.ctl"
    journal_of_identical_ops(journal, 3, 20_000)
    plain = tmp_path / "plain.ctl"
    plain.write_bytes(ctl_of_identical_ops(60_000))
    needed = budgets.timeline_bytes({"ops": 60_000}, 1)
    for path in (journal, plain):
        _refused_by_memory(lambda p: ctl.load(p, max_bytes=needed - 1), path,
                           "claims 60,000 rows (60,000 ops) and 1 string")
        assert len(ctl.load(path, max_bytes=needed).ops) == 60_000


def test_a_journal_is_held_to_the_rows_per_byte_budget_too(tmp_path, monkeypatch):
    # the writer's journals store every column, so none comes near 64 rows
    # per byte: a budget of 1 shows the reader consults it
    path = tmp_path / "rank-0.ctl"
    journal_of_identical_ops(path, 2, 20_000)
    assert len(ctl.load(path).ops) == 40_000
    monkeypatch.setattr(budgets, "FREE_ROWS", 0)
    monkeypatch.setattr(budgets, "ROWS_PER_BYTE", 1)
    assert path.stat().st_size < 40_001
    with pytest.raises(CutimelineError, match=r"claims 40,001 rows in [\d,]+ bytes"):
        ctl.load(path)


def test_format_1_and_2_files_are_held_to_the_memory_budget():
    data = pathlib.Path(__file__).parents[1] / "data" / "ctl"
    for name in ("v1.ctl", "v2.ctl", "v3.ctl"):
        path = data / name
        _refused_by_memory(lambda p: ctl.load(p, max_bytes=1000), path, "rows (")
        assert len(ctl.load(path).ops)


def _trace(events: int) -> bytes:
    rows = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1000 + 2 * i, "dur": 1,
             "pid": 1, "tid": 1, "args": {}} for i in range(events)]
    return json.dumps({"traceEvents": rows}).encode()


def test_a_trace_with_more_events_than_the_budget_is_refused_before_its_columns(
        tmp_path, monkeypatch):
    from cutimeline.formats.kineto import importer
    path = tmp_path / "trace.json"
    path.write_bytes(_trace(2000))
    assert len(ctl.load(path).ops) == 2000

    def no_columns(*a, **k):
        raise AssertionError("columns built past the budget")
    monkeypatch.setattr(importer, "columns", no_columns)
    most = 2000 * budgets.PEAK_PER_EVENT - 1
    assert path.stat().st_size * budgets.PEAK_PER_TEXT_BYTE <= most  # the text fits
    _refused_by_memory(lambda p: ctl.load(p, max_bytes=most), path, "claims 2,000 trace events")


def test_trace_text_past_the_budget_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    path = tmp_path / "trace.json"
    path.write_bytes(_trace(2000))
    most = path.stat().st_size * budgets.PEAK_PER_TEXT_BYTE - 1
    _refused_by_memory(lambda p: ctl.load(p, max_bytes=most), path,
                       f"claims {path.stat().st_size:,} bytes of JSON text")
    # gzipped: inflated no further than the budget lets be parsed (~1 MB of 64)
    text = b'{"traceEvents": [' + b" " * (64 << 20) + b"]}"
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(text, 9))
    words = f"more than {(5 << 20) // budgets.PEAK_PER_TEXT_BYTE:,} bytes of JSON text"
    _refused_by_memory(lambda p: ctl.load(p, max_bytes=5 << 20), gz, words,
                       most_bytes=8 << 20)  # the file is read 4 MB at a time


def test_the_budget_is_max_bytes_else_the_environment_else_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv(budgets.ENV_MAX_BYTES, raising=False)
    assert budgets.max_bytes() <= budgets.MAX_BYTES
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert budgets.max_bytes() == min(budgets.MAX_BYTES, memory // 2)
    for text, value in [("123456", 123456), ("64M", 64 << 20), ("16G", 16 << 30),
                        ("1.5GiB", 3 << 29), (" 2 gb ", 2 << 30), ("512k", 512 << 10)]:
        monkeypatch.setenv(budgets.ENV_MAX_BYTES, text)
        assert budgets.max_bytes() == value, text
        assert budgets.max_bytes(1000) == 1000  # the argument rules
    path = tmp_path / "ops.ctl"
    path.write_bytes(ctl_of_identical_ops(10_000))
    monkeypatch.setenv(budgets.ENV_MAX_BYTES, "100k")
    text = _refused_by_memory(ctl.load, path, "claims 10,000 rows")
    assert "budget of 102,400 bytes ($CUTIMELINE_MAX_BYTES)" in text
    monkeypatch.setenv(budgets.ENV_MAX_BYTES, "10M")
    assert len(ctl.load(path).ops) == 10_000


@pytest.mark.parametrize("value", ["lots", "-5", "0", "1e9", "4 GB please"])
def test_a_bad_budget_in_the_environment_is_a_sentence(monkeypatch, tmp_path, value):
    path = tmp_path / "ops.ctl"
    path.write_bytes(ctl_of_identical_ops(10))
    monkeypatch.setenv(budgets.ENV_MAX_BYTES, value)
    with pytest.raises(CutimelineError, match=rf"CUTIMELINE_MAX_BYTES='{value}' is not a "
                                              rf"positive size; give bytes"):
        ctl.load(path)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "4G"])
def test_a_bad_max_bytes_is_a_sentence(tmp_path, value):
    path = tmp_path / "ops.ctl"
    path.write_bytes(ctl_of_identical_ops(10))
    trace = tmp_path / "trace.json"
    trace.write_bytes(_trace(10))
    for p in (path, trace):
        with pytest.raises(CutimelineError, match=rf"max_bytes={value!r} must be a positive "
                                                  rf"number of bytes"):
            ctl.load(p, max_bytes=value)
