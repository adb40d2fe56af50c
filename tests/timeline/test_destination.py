"""destination.py: save, export, plot and to_parquet replace only regular
files, replace a symlink instead of writing through it, and leave nothing
behind when they refuse."""

from __future__ import annotations

import os
import stat

import pytest

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.timeline import destination
from handmade import random_timeline

WRITERS = {
    "save": (".ctl", lambda tl, p: tl.save(p)),
    "export": (".json.gz", lambda tl, p: ctl.export_chrome(tl, p)),
    "plot": (".png", lambda tl, p: ctl.plot(tl, p)),
}


def _special(tmp_path, kind: str, suffix: str):
    path = tmp_path / f"{kind}{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":  # a node like /dev/null's (1, 3), made here, not /dev/null itself
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "socket":
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    return path


@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "socket"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_anything_but_a_regular_file_is_refused_with_a_sentence(tmp_path, writer, kind):
    suffix, write = WRITERS[writer]
    path = _special(tmp_path, kind, suffix)
    before = os.lstat(path)
    with pytest.raises(CutimelineError, match=rf"Cannot write .*{kind}.*: it is .*"
                                              rf"replaces only regular files"):
        write(random_timeline(1, n=40), path)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino, after.st_rdev) == \
        (before.st_mode, before.st_ino, before.st_rdev)  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_symlink_is_replaced_never_written_through(tmp_path, writer):
    suffix, write = WRITERS[writer]
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    link = tmp_path / f"out{suffix}"
    link.symlink_to(target)
    write(random_timeline(1, n=40), link)
    assert not link.is_symlink() and link.stat().st_size > 0
    assert target.read_text() == "keep me"


def test_to_parquet_checks_every_file_before_it_writes_any(tmp_path):
    pytest.importorskip("pyarrow")
    os.mkfifo(tmp_path / "spans.parquet")
    with pytest.raises(CutimelineError, match="spans.parquet: it is a FIFO"):
        random_timeline(1, n=40).to_parquet(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spans.parquet"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "run.ctl"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with destination.replacing(path) as f:
            f.write(b"half")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ctl"]


def test_the_new_file_gets_the_umask_s_mode(tmp_path):
    old = os.umask(0o027)
    try:
        with destination.replacing(tmp_path / "x") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "x").st_mode) == 0o640
