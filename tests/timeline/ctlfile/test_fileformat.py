"""fileformat.py: a Timeline as one .ctl file (a zip of JSON meta with a
manifest and the columns' bytes, no pickle) — exact round trips, the files
of versions 1 and 2 (.npz) still read, and damaged, foreign, newer,
incomplete or lying files refused with a sentence that names the file."""

import io
import json
import os
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from handmade import assert_same, make_timeline

import cutimeline as ctl
from cutimeline.timeline.ctlfile import fileformat
from cutimeline.timeline.schema import FORMAT_VERSION, SCHEMA
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

OLD_FILES = Path(__file__).parents[2] / "data" / "ctl"


def test_save_load_round_trips_every_table(tmp_path):
    tl = make_timeline()
    path = tmp_path / "run.ctl"
    tl.save(path)
    assert_same(tl, ctl.load(path))


def test_round_trip_survives_extreme_values(tmp_path):
    # differences that overflow int64 must still decode exactly
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 0, -5])
    s = Strings(["", "naïve ✓ \udcff"])
    tl = Timeline({"ops": dict(host_begin_ns=big, host_end_ns=big[::-1].copy(),
                               name=[0, 1, 1, 0])}, s, {})
    tl.save(tmp_path / "x.ctl")
    assert_same(tl, Timeline(*fileformat.read(tmp_path / "x.ctl")))
    # the codec keeps them; the door refuses them (times past ±2^62:
    # timeline/invariants.py)
    with pytest.raises(ctl.CutimelineError, match=r"x.ctl is damaged: ops.host_begin_ns of "
                       r"row 0 is 9223372036854775807 \(and 1 more row\)"):
        ctl.load(tmp_path / "x.ctl")


def test_empty_timeline_round_trips(tmp_path):
    tl = Timeline()
    tl.save(tmp_path / "e.ctl")
    back = ctl.load(tmp_path / "e.ctl")
    assert_same(tl, back)
    assert "0 ops" in repr(back)


def test_meta_that_is_not_json_is_refused(tmp_path):
    tl = Timeline(meta={"x": object()})
    with pytest.raises(ctl.CutimelineError, match="JSON"):
        tl.save(tmp_path / "m.ctl")
    assert not list(tmp_path.iterdir())  # nothing half-written


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[: len(b) // 2], "not a cutimeline file|damaged"),
    (lambda b: b"\0" * len(b), "not a cutimeline file"),
])
def test_damaged_files_name_the_file(tmp_path, damage, message):
    path = tmp_path / "run.ctl"
    make_timeline().save(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ctl.CutimelineError, match=message) as info:
        ctl.load(path)
    assert str(path) in str(info.value)


def test_a_trace_where_a_ctl_file_was_expected_is_named(tmp_path):
    from cutimeline.timeline.timeline import load
    path = tmp_path / "run.ctl"
    path.write_bytes(b'{"traceEvents": []}')
    with pytest.raises(ctl.CutimelineError, match="trace: ctl.load reads those") as info:
        load(path)  # the .ctl reader alone
    assert str(path) in str(info.value)
    # ctl.load reads it as the trace it is, and says what the trace lacks
    with pytest.raises(ctl.CutimelineError, match="no cpu_op, kernel"):
        ctl.load(path)


@pytest.mark.parametrize("what", ["folder", "missing"])
def test_load_names_what_is_not_a_file(tmp_path, what):
    path = tmp_path / "x"
    if what == "folder":
        path.mkdir()
    with pytest.raises(ctl.CutimelineError, match="folder|does not exist") as info:
        ctl.load(path)
    assert str(path) in str(info.value)


def test_flipped_bytes_inside_a_member_are_caught(tmp_path):
    path = tmp_path / "run.ctl"
    make_timeline(n=2000).save(path)
    raw = bytearray(path.read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    with pytest.raises(ctl.CutimelineError, match="damaged"):
        ctl.load(path)


def test_saving_twice_writes_the_same_bytes_readable_by_others(tmp_path):
    tl = make_timeline(n=300)
    tl.save(tmp_path / "a.ctl")
    tl.save(tmp_path / "b.ctl")
    assert (tmp_path / "a.ctl").read_bytes() == (tmp_path / "b.ctl").read_bytes()
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.ctl").stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ctl", "b.ctl"]  # no temp left


def test_an_older_cutimeline_sees_a_newer_format(tmp_path):
    # versions 1 and 2 read meta.json with np.load and refuse a format_version
    # above theirs, with a sentence that says to upgrade
    make_timeline().save(tmp_path / "run.ctl")
    with np.load(tmp_path / "run.ctl", allow_pickle=False) as z:
        head = json.loads(bytes(z["meta.json"]).decode())
    assert head["format"] == "cutimeline" and head["format_version"] == FORMAT_VERSION


# -- files of earlier versions -----------------------------------------------

def fixture_timeline():
    """The Timeline tests/data/ctl/v1.ctl and v2.ctl were written from, by the
    writer of format 2 (``save_before`` in benchmarks/speed/bench_io.py; v1.ctl
    from a Timeline without syncs.thread, as version 1 wrote)."""
    tl = make_timeline(n=40, seed=1, extras=False)
    s = Strings(list(tl.strings) + ["naïve ✓ \udcff"])
    return Timeline({n: tl.table(n).columns for n in SCHEMA}, s,
                    dict(tl.meta, note="ünïcode", numbers=[1.5, -2, None]))


def test_a_version_2_file_reads_as_it_was_written():
    assert_same(fixture_timeline(), ctl.load(OLD_FILES / "v2.ctl"))


def test_a_version_3_file_reads_with_the_tables_added_since_empty():
    old = ctl.load(OLD_FILES / "v3.ctl")
    assert not len(old.sources) and not len(old.memory) and not len(old.flops)
    assert_same(make_timeline(extras=False), old)


def test_a_version_1_file_reads_with_the_columns_added_since_unknown():
    tl, old = fixture_timeline(), ctl.load(OLD_FILES / "v1.ctl")
    assert (tl.syncs.thread != -1).all() and (old.syncs.thread == -1).all()
    assert_same(tl, Timeline({n: old.table(n).columns for n in SCHEMA}
                             | {"syncs": old.syncs.replace(thread=tl.syncs.thread)},
                             old.strings, old.meta))


def _rewrite(path, fn, source=None):
    with zipfile.ZipFile(source or path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members = fn(members)
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)


def _npz_meta(members, **changes):
    head = json.loads(bytes(np.load(io.BytesIO(members["meta.json.npy"]))).decode())
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps({**head, **changes}).encode(), np.uint8))
    return {**members, "meta.json.npy": buf.getvalue()}


def test_old_files_missing_a_column_or_claiming_a_newer_layout_are_damaged(tmp_path):
    path = tmp_path / "old.ctl"
    _rewrite(path, lambda m: {k: v for k, v in m.items() if k != "syncs.thread.npy"},
             OLD_FILES / "v2.ctl")
    with pytest.raises(ctl.CutimelineError, match="lacks column syncs.thread") as info:
        ctl.load(path)
    assert str(path) in str(info.value)
    _rewrite(path, lambda m: _npz_meta(m, format_version=3), OLD_FILES / "v2.ctl")
    with pytest.raises(ctl.CutimelineError, match="laid out as version 1 or 2"):
        ctl.load(path)
    _rewrite(path, lambda m: _npz_meta(m, format_version=99), OLD_FILES / "v2.ctl")
    with pytest.raises(ctl.CutimelineError, match="newer cutimeline.*upgrade"):
        ctl.load(path)


# -- format 3: newer, foreign, incomplete and lying files --------------------

def _head(members, fn):
    head = json.loads(members["meta.json"])
    fn(head)
    return {**members, "meta.json": json.dumps(head).encode()}


def _lie(path, fn, tl=None):
    (tl or make_timeline()).save(path)
    _rewrite(path, lambda m: _head(m, fn))


def _damaged(path, match):
    with pytest.raises(ctl.CutimelineError, match=match) as info:
        ctl.load(path)
    assert str(path) in str(info.value) and "damaged" in str(info.value)


def test_newer_foreign_and_incomplete_files(tmp_path):
    path = tmp_path / "run.ctl"
    _lie(path, lambda h: h.update(format_version=99))
    with pytest.raises(ctl.CutimelineError, match="newer cutimeline.*upgrade"):
        ctl.load(path)
    _lie(path, lambda h: h.update(format="other"))
    with pytest.raises(ctl.CutimelineError, match="not a cutimeline file"):
        ctl.load(path)
    _lie(path, lambda h: h.update(format_version=2))
    _damaged(path, "laid out as version 3")
    _lie(path, lambda h: h["manifest"]["columns"].pop("ops.seq"))
    _damaged(path, "lacks column ops.seq")
    _lie(path, lambda h: h.pop("manifest"))
    _damaged(path, "no manifest")
    make_timeline().save(path)
    _rewrite(path, lambda m: {"meta.json": m["meta.json"]})
    _damaged(path, "lacks columns.bin")
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(ctl.CutimelineError, match="no meta.json"):
        ctl.load(tmp_path / "plain.npz")
    with pytest.raises(ctl.CutimelineError, match="does not exist"):
        ctl.load(tmp_path / "missing.ctl")


def _column(name):
    def edit(fn):
        return lambda h: fn(h["manifest"]["columns"][name])
    return edit


@pytest.mark.parametrize("lie, match", [
    (_column("ops.host_end_ns")(lambda e: e.update(width=4)), "ops.host_end_ns: its width"),
    (_column("ops.host_end_ns")(lambda e: e.update(width=8, planes=e["planes"] * 4)),
     "ops.host_end_ns: its plane"),
    (_column("ops.host_end_ns")(lambda e: e["planes"][0].__setitem__(0, "lzma")),
     "its codec 'lzma'"),
    (_column("ops.host_end_ns")(lambda e: e["planes"][0].__setitem__(1, 10**9)),
     "its plane 0 claims"),
    (_column("ops.host_end_ns")(lambda e: e.update(size=e["size"] + 1)), "its planes fill"),
    (_column("ops.host_end_ns")(lambda e: e.update(offset=10**9)), "lies outside columns.bin"),
    (_column("ops.host_end_ns")(lambda e: e.update(first="0")), "its first value"),
    (_column("ops.host_end_ns")(lambda e: e.update(encoding=["delta"])), "prediction"),
    (_column("ops.host_end_ns")(lambda e: e.update(encoding="minus")), "prediction"),
    (_column("ops.seq")(lambda e: e.update(fill=[1])), "its fill value"),
    (_column("clocks.slope")(lambda e: e.update(zigzag=True)), "clocks.slope: its width"),
    (_column("strings.blob")(lambda e: e.update(bytes=e["bytes"] - 1)), "strings.blob"),
    (_column("gpu.op")(lambda e: e.update(first=10**6)), "gpu.op refers to"),
    (_column("ops.name")(lambda e: e.update(first=99)), "name refers to strings"),
    (_column("ops.device")(lambda e: e.update(first=10**6)), "outside int16"),
    (lambda h: h["manifest"]["rows"].update(ops=51), "make|promises|holds"),
    (lambda h: h["manifest"]["rows"].update(ops=-1), "rows of every table"),
    (lambda h: h["manifest"]["rows"].update(ops=True), "rows of every table"),
    (lambda h: h["manifest"].update(strings=3), "strings.lengths"),
    (_column("strings.lengths")(lambda e: e.update(fill=3)), "string lengths claim a fill"),
])
def test_a_manifest_that_lies_is_caught(tmp_path, lie, match):
    path = tmp_path / "run.ctl"
    _lie(path, lie)
    _damaged(path, match)


def test_huge_claimed_lengths_allocate_nothing(tmp_path):
    path = tmp_path / "run.ctl"
    for rows in (10**12, 2**62):
        _lie(path, lambda h: h["manifest"]["rows"].update(ops=rows, gpu=rows))
        tracemalloc.start()
        try:
            _damaged(path, "cannot hold|promises")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 20 * 2**20


def test_truncated_and_flipped_columns_are_caught(tmp_path):
    path = tmp_path / "run.ctl"
    tl = make_timeline(n=3000)
    tl.save(path)
    with zipfile.ZipFile(path) as z:
        head = json.loads(z.read("meta.json"))
    entry = head["manifest"]["columns"]["ops.host_end_ns"]
    deflated = entry["offset"] + sum(s for c, s in entry["planes"] if c == "raw")
    assert any(c == "deflate" for c, _ in entry["planes"])

    def flip(m, at):  # rewritten, so the zip's CRC matches the damage
        b = bytearray(m["columns.bin"])
        b[at:at + 8] = bytes(x ^ 0x5A for x in b[at:at + 8])
        return {**m, "columns.bin": bytes(b)}

    _rewrite(path, lambda m: flip(m, deflated + 2))
    _damaged(path, "ops.host_end_ns: its deflated bytes")
    tl.save(path)
    _rewrite(path, lambda m: {**m, "columns.bin": m["columns.bin"][:-200]})
    _damaged(path, "lies outside columns.bin")
    tl.save(path)
    raw = bytearray(path.read_bytes())  # the zip's CRC catches a flip it did not see
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    _damaged(path, "CRC|Bad|corrupt|damaged")


def test_every_prediction_round_trips(tmp_path, monkeypatch):
    from cutimeline.timeline.ctlfile.prediction import candidates
    tl = make_timeline(n=500)
    options = {(t, c): candidates(t, c) for t, s in SCHEMA.items() for c, d in s
               if d.kind != "f"}
    most = max(len(o) for o in options.values())
    for k in range(most):  # the k-th candidate of every column at once
        monkeypatch.setattr(fileformat, "choose", lambda t, c, tables:
                            (options[t, c][min(k, len(options[t, c]) - 1)], None))
        tl.save(tmp_path / "run.ctl")
        assert_same(tl, ctl.load(tmp_path / "run.ctl"))
