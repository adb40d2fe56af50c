"""fileformat.py: a Timeline as one .ctl file (an .npz of columns and JSON
meta, no pickle) — exact round trips, and damaged, foreign, newer or
incomplete files refused with a sentence that names the file."""

import io
import json
import zipfile

import numpy as np
import pytest
from test_timeline import assert_same, make_timeline

import cutimeline as ctl
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline


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
    assert_same(tl, ctl.load(tmp_path / "x.ctl"))


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
    with pytest.raises(ctl.CutimelineError, match="ctl.load and ctl.import_chrome") as info:
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


def _rewrite(path, fn):
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members = fn(members)
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)


def _meta(members, **changes):
    arr = np.load(io.BytesIO(members["meta.json.npy"]))
    head = json.loads(bytes(arr).decode())
    head.update(changes)
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(json.dumps(head).encode(), np.uint8))
    members["meta.json.npy"] = buf.getvalue()
    return members


def test_newer_foreign_and_incomplete_files(tmp_path):
    path = tmp_path / "run.ctl"
    make_timeline().save(path)
    _rewrite(path, lambda m: _meta(m, format_version=99))
    with pytest.raises(ctl.CutimelineError, match="newer cutimeline.*upgrade"):
        ctl.load(path)
    make_timeline().save(path)
    _rewrite(path, lambda m: _meta(m, format="other"))
    with pytest.raises(ctl.CutimelineError, match="not a cutimeline file"):
        ctl.load(path)
    make_timeline().save(path)
    _rewrite(path, lambda m: {k: v for k, v in m.items() if k != "ops.seq.npy"})
    with pytest.raises(ctl.CutimelineError, match="lacks column ops.seq"):
        ctl.load(path)
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(ctl.CutimelineError, match="no meta.json"):
        ctl.load(tmp_path / "plain.npz")
    with pytest.raises(ctl.CutimelineError, match="does not exist"):
        ctl.load(tmp_path / "missing.ctl")


def test_a_version_1_file_reads_with_the_columns_added_since_unknown(tmp_path):
    path = tmp_path / "old.ctl"
    tl = make_timeline()
    assert len(tl.syncs) and (tl.syncs.thread != -1).any()
    tl.save(path)
    # what version 1 wrote: no syncs.thread
    _rewrite(path, lambda m: _meta({k: v for k, v in m.items() if k != "syncs.thread.npy"},
                                   format_version=1))
    old = ctl.load(path)
    assert (old.syncs.thread == -1).all()
    assert np.array_equal(old.syncs.host_end_ns, tl.syncs.host_end_ns)
    # a version 2 file without it is damaged
    tl.save(path)
    _rewrite(path, lambda m: {k: v for k, v in m.items() if k != "syncs.thread.npy"})
    with pytest.raises(ctl.CutimelineError, match="lacks column syncs.thread"):
        ctl.load(path)
