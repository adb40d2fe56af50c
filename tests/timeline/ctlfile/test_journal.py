"""journal.py: a journal reads back up to its last whole chunk, whatever
cut or damaged the rest, and a journal that is not one is refused with a
sentence."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.timeline.ctlfile import journal
from cutimeline.timeline.schema import NONE, SCHEMA, SpanKind


def _ops(first: int, n: int) -> dict:
    seq = np.arange(first, first + n)
    t = 10 ** 12 + 1000 * seq
    cols = {c: np.full(n, NONE) for c, _ in SCHEMA["ops"]}
    cols.update(seq=seq, thread=np.zeros(n), name=seq % 3, shapes=np.full(n, 3),
                flags=np.zeros(n), host_begin_ns=t, host_end_ns=t + 500)
    return cols


def _spans(number: int) -> dict:
    t = 10 ** 12 + 1000 * number
    return {"kind": [int(SpanKind.STEP)], "name": [4], "thread": [0], "depth": [0],
            "number": [number], "begin_ns": [t], "end_ns": [t + 900]}


def _write(path, chunks: int = 4, end: bool = False) -> list[int]:
    """A journal of ``chunks`` rows chunks of 10 ops and a step each; the
    file size after each chunk."""
    j = journal.Journal(path, {"source": "record", "rank": 0})
    sizes = [os.path.getsize(path)]
    for k in range(chunks):
        strings = ["a", "b", "c", "\ud800lone", "step"] if k == 0 else []
        j.append({"ops": _ops(10 * k, 10), "spans": _spans(k)}, strings,
                 {"step": k + 1, "host_ns": 0, "truncated": False,
                  "threads_from": 0 if k == 0 else 1, "threads": ["MainThread"] if k == 0
                  else []})
        sizes.append(os.path.getsize(path))
    if end:
        j.end({"step": chunks})
    j.close()
    return sizes


def test_a_journal_reads_back_whole(tmp_path):
    path = tmp_path / "rank-0.ctl"
    _write(path, end=True)
    tl = ctl.load(path)
    assert tl.ops.seq.tolist() == list(range(40))
    assert tl.step_numbers().tolist() == [0, 1, 2, 3]
    assert tl.strings[3] == "\ud800lone" and tl.meta["threads"] == ["MainThread"]
    assert tl.meta["journal"]["chunks"] == 6 and tl.meta["journal"]["stopped"]
    assert tl.meta["partial"].startswith("stopped at step 4, but the process ended")


def test_a_journal_cut_anywhere_keeps_every_whole_chunk(tmp_path):
    path = tmp_path / "rank-0.ctl"
    sizes = _write(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.ctl"
    near = {s + d for s in sizes for d in (-2, -1, 0, 1, 2)}  # each chunk's bounds
    for at in sorted(a for a in near | set(range(sizes[0], len(data), 13))
                     if sizes[0] <= a <= len(data)):
        cut.write_bytes(data[:at])
        tl = ctl.load(cut)
        whole = sum(s <= at for s in sizes[1:])
        assert len(tl.ops) == 10 * whole, at
        assert tl.meta["partial"].startswith(f"unknown cause at step {whole}"), at
        assert tl.meta["journal"]["unread_bytes"] == at - sizes[whole]
    for at in range(0, sizes[0], 5):  # not even its start: refused, with a sentence
        cut.write_bytes(data[:at])
        with pytest.raises(CutimelineError, match="cut.ctl"):
            ctl.load(cut)


def test_a_damaged_chunk_ends_the_reading_there(tmp_path):
    path = tmp_path / "rank-0.ctl"
    sizes = _write(path)
    data = bytearray(path.read_bytes())
    for at in range(sizes[2], sizes[3], 7):  # every part of chunk 3 (the 3rd of rows)
        bad = bytearray(data)
        bad[at] ^= 0x40
        path.write_bytes(bytes(bad))
        tl = ctl.load(path)
        assert len(tl.ops) == 20, at
        assert tl.meta["journal"]["why_unread"], at


def test_chunks_out_of_order_or_repeated_are_not_read(tmp_path):
    path = tmp_path / "rank-0.ctl"
    sizes = _write(path)
    data = path.read_bytes()
    chunk2 = data[sizes[1]:sizes[2]]
    path.write_bytes(data[:sizes[2]] + chunk2 + data[sizes[2]:])  # chunk 2 twice
    tl = ctl.load(path)
    assert len(tl.ops) == 20 and "not numbered 3" in tl.meta["journal"]["why_unread"]


def _rewrite_chunk(data: bytes, at: int, end: int, edit) -> bytes:
    """Chunk data[at:end] with its header edited and its CRC made good again."""
    import json
    import zlib
    _, h, p, _ = struct.unpack_from("<4sIII", data, at)
    head = json.loads(data[at + 16:at + 16 + h])
    payload = data[at + 16 + h:end]
    head = json.dumps(edit(head)).encode()
    sizes = struct.pack("<II", len(head), len(payload))
    crc = zlib.crc32(payload, zlib.crc32(head, zlib.crc32(sizes)))
    return data[:at] + b"CTLJ" + sizes + struct.pack("<I", crc) + head + payload + data[end:]


@pytest.mark.parametrize("lie, why", [
    (lambda h: {**h, "strings": {**h["strings"], "from": 7}}, "rows chunk"),
    (lambda h: {**h, "tables": {**h["tables"], "gpu": h["tables"]["ops"]}}, "rows chunk"),
    (lambda h: {**h, "tables": {"ops": {**h["tables"]["ops"], "rows": 10 ** 12}}},
     "not one this layout"),
    (lambda h: {**h, "tables": {"ops": {**h["tables"]["ops"], "rows": 11}}}, "chunk 2"),
    (lambda h: {**h, "tables": {"ops": {"rows": 10, "columns": {
        **h["tables"]["ops"]["columns"], "seq": {"fill": 0, "offset": 0, "size": 0}}}}},
     "entry this layout does not write"),
    (lambda h: {**h, "tables": {"ops": {"rows": 10, "columns": {
        **h["tables"]["ops"]["columns"],
        "host_begin_ns": {**h["tables"]["ops"]["columns"]["host_begin_ns"],
                          "minus": "host_end_ns"}}}}}, "subtracts"),
])
def test_a_chunk_that_lies_is_not_read(tmp_path, lie, why):
    path = tmp_path / "rank-0.ctl"
    sizes = _write(path)
    data = path.read_bytes()
    path.write_bytes(_rewrite_chunk(data, sizes[1], sizes[2], lie))
    tl = ctl.load(path)
    assert len(tl.ops) == 10
    assert why in tl.meta["journal"]["why_unread"]


def test_a_start_that_is_not_one_is_refused(tmp_path):
    path = tmp_path / "rank-0.ctl"
    sizes = _write(path, chunks=1)
    data = path.read_bytes()
    at = len(journal.MAGIC)
    path.write_bytes(_rewrite_chunk(data, at, sizes[0], lambda h: {**h, "journal": 99}))
    with pytest.raises(CutimelineError, match="layout 99.*upgrade"):
        ctl.load(path)
    path.write_bytes(_rewrite_chunk(data, at, sizes[0], lambda h: {**h, "kind": "rows"}))
    with pytest.raises(CutimelineError, match="does not begin with the recording's meta"):
        ctl.load(path)
    path.write_bytes(_rewrite_chunk(
        data, at, sizes[0], lambda h: {**h, "meta": {"overhead_ns_per_op": "x"}}))
    with pytest.raises(CutimelineError, match="damaged: its meta"):
        ctl.load(path)


def test_string_ids_past_the_strings_read_are_damage(tmp_path):
    path = tmp_path / "rank-0.ctl"
    j = journal.Journal(path, {"source": "record"})
    j.append({"ops": _ops(0, 3)}, ["a"], {"step": 0})  # names 0..2, one string
    j.close()
    with pytest.raises(CutimelineError,
                       match=r"damaged: column ops\.(name|shapes) refers to strings"):
        ctl.load(path)
