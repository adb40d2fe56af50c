"""recording/capture/ and the trust model of on-demand capture: a private
folder held by descriptor, every file below it opened through it without
following links and read only when the job's user owns them, captures
only under the folder the job chose (walked the same way), and a
``capture PID`` that checks the process before it sends any signal.

The two-user tests run where the suite runs as root: the other user is
uid 65534 ("nobody"), taken on by a process forked from this one
(``os.setuid``), which has torch and cutimeline loaded already (the
interpreter itself may be where nobody cannot read it).
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import cutimeline as ctl
import cutimeline.cli as cli
from cutimeline import CutimelineError
from cutimeline.recording import ondemand
from cutimeline.recording.capture import files as capturefiles, heldfolder
from cutimeline.recording.capture import request as capturerequest

NOBODY = 65534
root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="two users need root (setuid)")
needs_sigusr2 = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2")


@pytest.fixture(autouse=True)
def _disarmed():
    yield
    ondemand.disarm()


@pytest.fixture
def shared(monkeypatch):
    """A sticky, world-writable temp folder (as /tmp is) that this process
    and nobody both use as their temp folder; and a folder for captures
    that nobody may write."""
    base = tempfile.mkdtemp(prefix="ctl-shared-", dir="/tmp")
    os.chmod(base, 0o1777)
    out = os.path.join(base, "out")
    os.mkdir(out)
    os.chmod(out, 0o777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", base)
    monkeypatch.setattr(tempfile, "tempdir", base)
    yield base, out
    subprocess.run(["rm", "-rf", base], check=False)


def _as(uid: int, fn, *args):
    """``fn(*args)`` in a process forked from this one that runs as ``uid``;
    what it returns, or the text of what it raised."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()

    def run():
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            there.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - the parent asserts on it
            there.send(("raised", f"{type(exc).__name__}: {exc}"))
        finally:
            os._exit(0)

    p = ctx.Process(target=run)
    p.start()
    assert here.poll(120), "the other user's process never answered"
    got = here.recv()
    p.join(30)
    return got


def _write(path, data):
    """A request or marker written by hand (as its user would)."""
    with open(path, "w") as f:
        json.dump(data, f)


def steps(n):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    for _ in range(n):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


# -- the folder ------------------------------------------------------------------------

def test_the_folder_is_made_private_and_checked(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = capturefiles.capture_dir(create=True)
    assert folder == str(tmp_path / f"cutimeline-{os.geteuid()}")
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    os.chmod(folder, 0o755)
    with pytest.raises(CutimelineError, match="mode 0755 lets others in"):
        capturefiles.capture_dir()
    os.rmdir(folder)
    os.symlink(tmp_path, folder)
    with pytest.raises(CutimelineError, match="not a folder \\(a symlink\\).*remove it"):
        ctl.arm(signal=None)
    assert ondemand._TRIGGER is None
    # a private XDG_RUNTIME_DIR of ours is preferred; one that is not, ignored
    xdg = tmp_path / "run"
    xdg.mkdir(mode=0o700)
    assert capturefiles.capture_dir(env={"XDG_RUNTIME_DIR": str(xdg)}, create=True) == \
        str(xdg / "cutimeline")
    os.chmod(xdg, 0o755)
    other = tmp_path / "t"
    other.mkdir()
    assert capturefiles.capture_dir(env={"XDG_RUNTIME_DIR": str(xdg), "TMPDIR": str(other)},
                                    create=True) == str(other / f"cutimeline-{os.geteuid()}")


@root_only
def test_a_folder_another_user_made_first_is_refused(shared):
    base, _ = shared
    planted = os.path.join(base, f"cutimeline-{os.geteuid()}")
    assert _as(NOBODY, os.mkdir, planted, 0o700) == ("ok", None)
    with pytest.raises(CutimelineError, match=f"belongs to uid {NOBODY}, not 0"):
        ctl.arm(signal=None)
    assert ondemand._TRIGGER is None


@root_only
def test_another_user_can_neither_write_nor_plant_in_the_folder(shared):
    trigger = ctl.arm(signal=None, options={"device": "cpu", "measure": False})
    assert stat.S_IMODE(os.lstat(trigger.folder).st_mode) == 0o700
    for attempt in (lambda p: open(p, "w").close(), lambda p: os.symlink("/etc/passwd", p)):
        kind, what = _as(NOBODY, attempt, trigger.request)
        assert kind == "raised" and "PermissionError" in what
    assert not os.path.lexists(trigger.request)


# -- the job reads only its user's files ------------------------------------------------

@root_only
def test_a_request_another_user_owns_is_not_obeyed(shared):
    _, out = shared
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=out)
    with open(trigger.request, "w") as f:
        json.dump({"steps": 1, "out": os.path.join(out, "x.ctl")}, f)
    os.chown(trigger.request, NOBODY, NOBODY)  # as if nobody had put it there
    with pytest.warns(RuntimeWarning, match=f"belongs to uid {NOBODY}, not 0; .*this job's user"):
        steps(3)
    assert trigger.captures == [] and not os.path.lexists(trigger.request)


def test_a_request_that_is_a_link_is_not_followed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"steps": 1}))
    os.symlink(secret, trigger.request)
    with pytest.warns(RuntimeWarning, match="ignores the capture request"):
        steps(2)
    assert trigger.captures == [] and secret.exists()


def test_captures_go_only_under_the_folder_armed_with(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    out = tmp_path / "captures"
    out.mkdir()
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=out)
    with pytest.raises(CutimelineError, match="lies outside .*captures, the folder process"):
        ondemand.send_capture(os.getpid(), out=tmp_path / "elsewhere.ctl")
    (out / "link").symlink_to(tmp_path)  # inside by name, outside in fact
    with pytest.raises(CutimelineError, match="lies outside"):
        ondemand.send_capture(os.getpid(), out=out / "link" / "x.ctl")
    _write(trigger.request, {"out": str(tmp_path / "x.ctl")})
    with pytest.warns(RuntimeWarning, match="lies outside .* arm\\(out_dir=...\\) allows"):
        steps(2)
    assert trigger.captures == [] and not (tmp_path / "x.ctl").exists()
    with pytest.raises(CutimelineError, match="lies outside out_dir"):
        ctl.arm(path=tmp_path / "a.ctl", out_dir=out, signal=None)


def test_default_names_are_unique_to_the_nanosecond():
    names = {capturerequest.default_out(123, "/x") for _ in range(1000)}
    assert len(names) > 990 and all(n.startswith("/x/cutimeline-123-") for n in names)


# -- capture PID checks the process first -----------------------------------------------

def _sleeper():
    p = subprocess.Popen(["sleep", "30"])
    for _ in range(100):  # until it is sleep (not the forked python) that runs
        try:
            if open(f"/proc/{p.pid}/comm").read().strip() == "sleep":
                break
        except OSError:
            pass
        time.sleep(0.01)
    return p


@needs_sigusr2
def test_a_stale_marker_sends_no_signal_to_a_process_that_reused_its_pid(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    folder = capturefiles.capture_dir(create=True)
    victim = _sleeper()  # SIGUSR2's default would kill it
    try:
        start = capturefiles.start_time(victim.pid)
        marker = capturefiles.armed_path(victim.pid, folder)
        base = {"pid": victim.pid, "uid": os.geteuid(), "signal": int(signal.SIGUSR2),
                "out_dir": str(tmp_path), "armed": True}
        _write(marker, {**base, "start": start - 1})
        with pytest.raises(CutimelineError, match="left by an earlier process.*No signal"):
            ondemand.send_capture(victim.pid, out=tmp_path / "a.ctl")
        # the right start time, but no handler for SIGUSR2: the request, no signal
        _write(marker, {**base, "start": start})
        ondemand.send_capture(victim.pid, out=tmp_path / "b.ctl")
        assert os.path.exists(capturefiles.request_path(victim.pid, folder))
        time.sleep(0.1)
        assert victim.poll() is None  # alive: nothing was sent
        os.remove(marker)
        with pytest.raises(CutimelineError, match="not armed for capture"):
            ondemand.send_capture(victim.pid, out=tmp_path / "c.ctl")
    finally:
        victim.kill()
        victim.wait()
    with pytest.raises(CutimelineError, match="There is no process"):
        ondemand.send_capture(victim.pid)


@root_only
def test_capture_from_another_user_is_refused_and_sends_nothing(shared):
    _, out = shared
    trigger = ctl.arm(steps=1, options={"device": "cpu", "measure": False}, out_dir=out)

    def capture():
        sys.stderr = io.StringIO()  # this process's own: the parent's capsys sees nothing
        code = cli.main(["capture", str(pid), "--steps", "1",
                         "--timeout", "0", "--out", os.path.join(out, "x.ctl")])
        return code, sys.stderr.getvalue()
    pid = os.getpid()
    _, (code, err) = _as(NOBODY, capture)
    assert code == 2 and "belongs to another user (uid 0)" in err, err
    assert not trigger._signals and not os.path.lexists(trigger.request)


def _nobody_job(out: str, ready, stop) -> None:
    """A training loop armed as nobody, until ``stop`` is set."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    trigger = ctl.arm(steps=2, options={"device": "cpu", "measure": False}, out_dir=out)
    ready.send(trigger.folder)
    while not stop.is_set():
        steps(1)
        time.sleep(0.01)
    ready.send(trigger.captures)
    os._exit(0)


@root_only
@needs_sigusr2
def test_root_captures_another_user_s_job(shared):
    _, out = shared
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    stop = ctx.Event()
    job = ctx.Process(target=_nobody_job, args=(out, there, stop))
    job.start()
    try:
        assert here.poll(60)
        folder = here.recv()
        assert os.lstat(folder).st_uid == NOBODY
        path = ondemand.send_capture(job.pid, steps=2, out=os.path.join(out, "cap.ctl"),
                                     timeout=60, folder=folder)
        tl = ctl.load(path)
        assert len(tl.step_numbers()) == 2 and os.stat(path).st_uid == NOBODY
        stop.set()
        assert here.poll(60) and here.recv() == [path]
    finally:
        stop.set()
        job.join(30)
        if job.is_alive():
            job.kill()


# -- one walker: every path below a held folder (issue 45) -------------------------------

def test_the_walker_checks_then_makes_each_folder_where_it_is(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with heldfolder.Folder.open(str(tmp_path / "top"), create=True) as top:
        with top.walk("a/b", create=True) as b, b.replacing("f.bin") as f:
            f.write(b"x")
        assert (tmp_path / "top/a/b/f.bin").read_bytes() == b"x"
        (tmp_path / "top/a/link").symlink_to(elsewhere)
        with pytest.raises(CutimelineError, match="link.*a symlink; cutimeline follows no"):
            top.walk("a/link/deeper", create=True)
        with pytest.raises(CutimelineError, match="climbs out"):
            top.walk("a/../..", create=True)
        # a link swapped in between making a folder and opening it: refused
        mkdir = os.mkdir

        def mkdir_then_swap(name, mode=0o777, *, dir_fd=None):
            mkdir(name, mode, dir_fd=dir_fd)
            if name == "late":
                os.rmdir(tmp_path / "top/late")
                (tmp_path / "top/late").symlink_to(elsewhere)
        monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
        with pytest.raises(CutimelineError, match="late: it is a symlink"):
            top.walk("late/x", create=True)
        monkeypatch.undo()
        assert list(elsewhere.iterdir()) == []
        # read: regular files of the uid only; a link or a FIFO is named, not followed
        (tmp_path / "top/j").write_text("{}")
        assert top.read("j", os.geteuid()) == b"{}" and top.read("absent", 0) is None
        with pytest.raises(CutimelineError, match="j belongs to uid 0, not 12345"):
            top.read("j", 12345)
        (tmp_path / "top/l").symlink_to(tmp_path / "top/j")
        with pytest.raises(CutimelineError, match="l is a symlink, not a regular file"):
            top.read("l", os.geteuid())
        os.mkfifo(tmp_path / "top/fifo")
        with pytest.raises(CutimelineError, match="a FIFO"):
            top.read("fifo", os.geteuid())
        with pytest.raises(CutimelineError, match="it is a FIFO, and cutimeline replaces"):
            with top.replacing("fifo") as f:
                f.write(b"")
        # take: renamed away first, then read and removed whatever it was
        with pytest.raises(CutimelineError, match="/l is a symlink"):  # its own name
            top.take("l", os.geteuid())
        assert not os.path.lexists(tmp_path / "top/l") and (tmp_path / "top/j").exists()
        # exclusive: published only where the name is free
        assert top.write_json("req", {"a": 1}, exclusive=True)
        assert not top.write_json("req", {"a": 2}, exclusive=True)
        assert json.loads(top.take("req", os.geteuid())) == {"a": 1}
        assert sorted(os.listdir(tmp_path / "top")) == ["a", "fifo", "j", "late"]


def _private_capture_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _swap_after_check(monkeypatch, swap):
    """Run ``swap`` once, at the moment ``send_capture`` has checked the
    job's folder and read its marker, before it writes the request."""
    real = capturerequest.inside
    done = []

    def inside(path, folder):
        if not done:
            done.append(swap())
        return real(path, folder)
    monkeypatch.setattr(capturerequest, "inside", inside)
    return done


def test_a_folder_swapped_for_a_link_after_its_check_gets_the_request_not_the_link(
        tmp_path, monkeypatch):
    """The job's user swaps its capture folder for a link (to a folder the
    sender may write and the user may not) between the sender's check and
    its write: the request goes in the folder checked, nothing through
    the link."""
    _private_capture_folder(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=out)
    target, moved = tmp_path / "root-only", tmp_path / "moved"
    target.mkdir(mode=0o700)

    def swap():
        os.rename(trigger.folder, moved)
        os.symlink(target, trigger.folder)
    done = _swap_after_check(monkeypatch, swap)
    path = ondemand.send_capture(os.getpid(), steps=1, out=out / "a.ctl")
    assert done and os.path.islink(trigger.folder)
    assert os.listdir(target) == []
    assert f"capture-{os.getpid()}" in os.listdir(moved)
    steps(2)  # the job holds its folder open: it takes the request where it was put
    assert trigger.captures == [path] and ctl.load(path).meta["steps"]


def test_a_named_folder_that_is_a_link_is_refused(tmp_path, monkeypatch):
    _private_capture_folder(tmp_path, monkeypatch)
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    link = tmp_path / "link"
    link.symlink_to(trigger.folder)
    with pytest.raises(CutimelineError, match="not a folder \\(a symlink\\)"):
        ondemand.send_capture(os.getpid(), out=tmp_path / "a.ctl", folder=str(link))
    assert not os.path.lexists(trigger.request)


def test_a_link_swapped_in_during_a_capture_makes_nothing_outside(tmp_path, monkeypatch):
    """A folder on the way to ``out`` becomes a link while the capture runs:
    the write fails with a warning, and no folder or file is made where the
    link points (the job made them before re-checking)."""
    _private_capture_folder(tmp_path, monkeypatch)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    trigger = ctl.arm(steps=2, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=out)
    _write(trigger.request, {"out": str(out / "sub" / "deeper" / "x.ctl")})
    steps(1)
    assert trigger._window is not None  # capturing
    (out / "sub").symlink_to(elsewhere)
    with pytest.warns(RuntimeWarning, match="could not write the capture") as caught:
        steps(3)
    assert list(elsewhere.iterdir()) == [] and trigger.captures == []
    assert "sub: it is a symlink; cutimeline follows no link" in str(caught[0].message)
    # without the link the same request makes its folders, below out_dir only
    (out / "sub").unlink()
    _write(trigger.request, {"out": str(out / "sub" / "deeper" / "x.ctl")})
    steps(4)
    assert trigger.captures == [str(out / "sub" / "deeper" / "x.ctl")]


def test_a_request_is_sent_only_where_none_is_pending(tmp_path, monkeypatch):
    _private_capture_folder(tmp_path, monkeypatch)
    trigger = ctl.arm(steps=1, signal=None, options={"device": "cpu", "measure": False},
                      out_dir=tmp_path)
    first = ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / "a.ctl")
    with pytest.raises(CutimelineError, match="has not yet taken the capture request"):
        ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / "b.ctl")
    steps(3)
    assert trigger.captures == [first]
    assert ondemand.send_capture(os.getpid(), steps=1, out=tmp_path / "b.ctl")


@root_only
@needs_sigusr2
def test_root_capturing_for_a_user_who_swaps_the_folder_writes_nothing_elsewhere(shared):
    """Root runs ``capture PID`` for nobody's job while nobody swaps the
    job's folder for a link to a folder only root may enter: no file of
    nobody's appears there; the request lands in the folder root checked,
    and the capture is written as before."""
    base, out = shared
    secret = tempfile.mkdtemp(prefix="ctl-root-only-", dir="/tmp")
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    stop = ctx.Event()
    job = ctx.Process(target=_nobody_job, args=(out, there, stop))
    job.start()
    try:
        assert here.poll(60)
        folder = here.recv()
        moved = os.path.join(base, "moved")

        def swap():  # as nobody: its folder, in a sticky folder everyone may write
            return _as(NOBODY, lambda: (os.rename(folder, moved), os.symlink(secret, folder)))

        with pytest.MonkeyPatch.context() as mp:
            done = _swap_after_check(mp, swap)
            path = ondemand.send_capture(job.pid, steps=2, out=os.path.join(out, "cap.ctl"),
                                         folder=folder)
        assert done == [("ok", (None, None))] and os.path.islink(folder)
        # (it was: capture-<pid>, a file of nobody's, made by root in root's folder)
        assert [(name, os.lstat(os.path.join(secret, name)).st_uid)
                for name in os.listdir(secret)] == []
        for _ in range(600):  # the job takes the request where root put it
            if os.path.exists(path):
                break
            time.sleep(0.1)
        assert os.stat(path).st_uid == NOBODY and len(ctl.load(path).step_numbers()) == 2
        stop.set()
        assert here.poll(60) and here.recv() == [path]
    finally:
        stop.set()
        job.join(30)
        if job.is_alive():
            job.kill()
        subprocess.run(["rm", "-rf", secret], check=False)
