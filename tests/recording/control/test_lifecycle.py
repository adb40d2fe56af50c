"""lifecycle.py: a rank recording with out_dir that SIGTERM, Ctrl-C or an
exit ends still leaves a loadable file marked partial, and the handlers it
installs go back exactly.

Signalled ranks are processes forked from this one (the fork start method;
torch is imported already, so a fork costs milliseconds); each tells the
test when it has recorded a few steps, and the signal lands after a random
delay, so that it finds the rank at a different point of its loop each try.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import cutimeline as ctl
from cutimeline.recording.control import lifecycle

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods() or not hasattr(signal, "SIGTERM"),
    reason="needs the fork start method and POSIX signals")

TRIES = 5


def _rank(out: str, conn, device: str, during_stop: int | None) -> None:
    """A rank's loop, recorded until a signal ends it (exit code 7: the
    KeyboardInterrupt came out of the block)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(RANK="1", WORLD_SIZE="2")
    if during_stop is not None:  # the signal arrives while stop() writes the file
        write = lifecycle.write_rank

        def signalled_write(*args, **kwargs):
            signal.raise_signal(during_stop)
            return write(*args, **kwargs)
        lifecycle.write_rank = signalled_write
    where = "cpu" if device == "cpu" else "meta"
    x = torch.ones(64, device=where)
    try:
        with ctl.record(device="cpu" if device == "cpu" else ctl.SimGPU(), out_dir=out,
                        steps="manual", modules=False, measure=False) as rec:
            for i in range(10 ** 9):
                with ctl.span("work"):
                    x = torch.tanh(x * 1.01) + 0.1
                rec.step()
                if i == 4:
                    conn.send("ready")
                if during_stop is not None and i == 6:
                    break
    except KeyboardInterrupt:
        os._exit(7)
    os._exit(0)


def _signal_a_rank(tmp_path, sig: int, device: str = "cpu", during_stop: int | None = None):
    """Run ``_rank``, signal it after a few steps; its exit code and file."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_rank, args=(str(tmp_path), there, device, during_stop))
    p.start()
    try:
        assert here.poll(60), "the rank never got going"
        here.recv()
        if during_stop is None:
            threading.Event().wait(random.uniform(0, 0.02))
            os.kill(p.pid, sig)
        p.join(60)
    finally:
        if p.is_alive():
            p.kill()
    return p.exitcode, ctl.load(tmp_path / "rank-1.ctl")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signalled_rank_leaves_a_loadable_partial_file_every_time(tmp_path, sig):
    random.seed(21)
    number = getattr(signal, sig)
    why = "SIGTERM" if sig == "SIGTERM" else "KeyboardInterrupt"
    gpu = []
    for i in range(TRIES):
        folder = tmp_path / str(i)
        code, tl = _signal_a_rank(folder, number, device="cpu" if i % 2 else "sim")
        # SIGTERM still ends the rank as SIGTERM does; Ctrl-C comes out of the block
        assert code == (-signal.SIGTERM if sig == "SIGTERM" else 7), i
        m = re.fullmatch(rf"{why} at step (\d+)", tl.meta["partial"])
        assert m and int(m.group(1)) >= 5, tl.meta["partial"]
        assert "error" not in tl.meta and tl.meta["rank"] == 1 and tl.meta["world_size"] == 2
        steps = tl.step_numbers()
        assert len(steps) >= 5 and steps.tolist() == list(range(len(steps)))
        assert len(tl.ops) >= 5 * 3 and len(tl.spans) >= 10  # 3 ops, a span and a step each
        if i % 2 == 0:  # SimGPU: its rows, unless the signal came inside its bookkeeping
            assert len(tl.gpu) >= 5 * 3 or "device's own" in tl.meta["device_error"], \
                tl.meta.get("device_error")
            gpu.append(len(tl.gpu))
        assert [p.name for p in folder.iterdir()] == ["rank-1.ctl"]  # no temporary left
    print(f"{sig}: gpu rows kept per SimGPU try {gpu}")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_during_stop_waits_for_the_whole_file(tmp_path, sig):
    number = getattr(signal, sig)
    code, tl = _signal_a_rank(tmp_path, number, during_stop=number)
    assert code == (-signal.SIGTERM if sig == "SIGTERM" else 7)
    assert "partial" not in tl.meta  # the recording was over: the file is whole
    assert tl.step_numbers().tolist() == list(range(7))


def test_a_merge_names_the_signalled_rank(tmp_path, monkeypatch):
    code, _ = _signal_a_rank(tmp_path, signal.SIGTERM)
    assert code == -signal.SIGTERM
    monkeypatch.setenv("RANK", "0")   # rank 0 of the same world (merge refuses others)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False) as rec:  # rank 0
        torch.ones(3).sum()
        rec.step()
    tl = ctl.merge(tmp_path)
    assert tl.meta["partial_ranks"] == [1] and tl.meta["missing_ranks"] == []
    summary = ctl.analyze(tl).summary()
    why = tl.meta["ranks"][1]["partial"]
    assert f"ranks: 2 of 2 present; rank 1 partial ({why})" in summary


# -- the handlers ------------------------------------------------------------------------

def _handlers():
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


@pytest.fixture
def sigterm():
    """SIGTERM's handler put back after the test, whatever it did."""
    before = _handlers()
    yield
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])


@pytest.fixture
def exits(monkeypatch):
    """The atexit functions registered and not unregistered since the test
    began (atexit itself cannot list them)."""
    live = []
    register, unregister = atexit.register, atexit.unregister

    def registered(f, *args, **kwargs):
        live.append(f)
        return register(f, *args, **kwargs)

    def unregistered(f):
        live[:] = [g for g in live if g != f]
        return unregister(f)
    monkeypatch.setattr(atexit, "register", registered)
    monkeypatch.setattr(atexit, "unregister", unregistered)
    return live


def test_without_out_dir_nothing_is_installed(sigterm, exits):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    before = _handlers()
    with ctl.record(device="cpu", measure=False):
        assert _handlers() == before and exits == []
    assert _handlers() == before and exits == []


@pytest.mark.parametrize("previous", ["default", "ignored", "user's"])
def test_handlers_are_put_back_exactly(tmp_path, sigterm, exits, previous):
    def users(signum, frame):
        pass
    handler = {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN, "user's": users}[previous]
    signal.signal(signal.SIGTERM, handler)
    before = _handlers()
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False):
        during = _handlers()
        assert len(exits) == 1
    assert during[0] is before[0]  # Ctrl-C is Python's KeyboardInterrupt while recording
    assert (during[1] is handler) == (previous == "ignored")  # nothing to do for SIG_IGN
    after = _handlers()
    assert after[0] is before[0] and after[1] is handler and exits == []


def test_a_handler_the_user_installs_while_recording_stays(tmp_path, sigterm):
    def theirs(signum, frame):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False):
        signal.signal(signal.SIGTERM, theirs)
    assert signal.getsignal(signal.SIGTERM) is theirs


def test_the_users_handler_decides_and_the_file_says_sigterm(tmp_path, sigterm):
    calls = []

    def theirs(signum, frame):
        calls.append(signum)
        if len(calls) == 2:
            raise SystemExit("bye")
    signal.signal(signal.SIGTERM, theirs)
    with pytest.raises(SystemExit, match="bye"):
        with ctl.record(device="cpu", out_dir=tmp_path, steps="manual",
                        measure=False) as rec:
            for i in range(5):
                torch.ones(3).sum()
                rec.step()
                signal.raise_signal(signal.SIGTERM)  # the first: the program goes on
    assert calls == [signal.SIGTERM] * 2 and signal.getsignal(signal.SIGTERM) is theirs
    tl = ctl.load(tmp_path / "rank-0.ctl")
    assert tl.meta["partial"] == "SIGTERM at step 2" and rec.timeline.meta["partial"]


def test_a_recording_started_in_another_thread_installs_no_handler(tmp_path, sigterm):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seen = []

    def run():
        with ctl.record(device="cpu", out_dir=tmp_path, measure=False):
            torch.ones(2).sum()
            seen.append(_handlers())
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [(signal.getsignal(signal.SIGINT), signal.SIG_DFL)]
    assert "partial" not in ctl.load(tmp_path / "rank-0.ctl").meta


def test_a_process_forked_while_recording_dies_of_sigterm_as_before(tmp_path, sigterm):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False):
        torch.ones(2).sum()
        pid = os.fork()
        if pid == 0:  # the child: our handler passes the signal on
            signal.raise_signal(signal.SIGTERM)
            os._exit(3)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert "partial" not in ctl.load(tmp_path / "rank-0.ctl").meta  # the parent's, whole


def test_an_exit_while_recording_writes_the_file(tmp_path):
    script = textwrap.dedent(f"""
        import torch, cutimeline as ctl
        rec = ctl.record(device="cpu", out_dir={str(tmp_path)!r}, measure=False).start()
        torch.ones(3).sum()
        rec.step()
        raise RuntimeError("boom")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "RuntimeError: boom" in proc.stderr
    tl = ctl.load(tmp_path / "rank-0.ctl")
    assert tl.meta["partial"] == "RuntimeError at step 1"
    assert tl.meta["error"] == "RuntimeError: boom" and len(tl.ops) >= 2
