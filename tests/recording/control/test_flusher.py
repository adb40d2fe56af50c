"""flusher.py: a rank recording with out_dir that dies without a word
(SIGKILL, SIGTERM then SIGKILL before its file is written, os._exit,
abort) leaves a journal that ctl.load reads, holding all but the last
moments, marked partial for an unknown cause; a clean stop leaves the
ordinary file.

Ranks are processes forked from this one, as in test_lifecycle.py; each
counts the ops it has run in shared memory, so the test knows how many a
kill took.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import random
import signal
import threading
import time
import warnings

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.recording.control import flusher, lifecycle
from cutimeline.timeline.ctlfile import journal

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods() or not hasattr(signal, "SIGKILL"),
    reason="needs the fork start method and POSIX signals")

KILLS = 20
LOST_S = 1.0  # the goal: a kill takes at most this much of the recording
OPS_PER_ITER = 3


@pytest.fixture(scope="module", autouse=True)
def warm():
    """The recorder's first op imports torch._dynamo (seconds): once here,
    so that each forked rank records from its first moment."""
    with ctl.record(device="cpu", measure=False, modules=False):
        torch.tanh(torch.ones(4) * 1.01) + 0.1


def _rank(out: str, conn, done, device: str, end: str, slow_write: float) -> None:
    """A rank's loop, recorded until it is killed, or ends by ``end``
    ("exit": os._exit, "abort": abort(), "stop": the block ends) after
    the first flush."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if slow_write:  # the final file takes that long to write (as 10^6 ops do)
        write = lifecycle.write_rank

        def slow(*args, **kwargs):
            time.sleep(slow_write)
            return write(*args, **kwargs)
        lifecycle.write_rank = slow
    x = torch.ones(16, device="cpu" if device == "cpu" else "meta")
    with ctl.record(device="cpu" if device == "cpu" else ctl.SimGPU(), out_dir=out,
                    steps="manual", modules=False, measure=False) as rec:
        conn.send(time.perf_counter_ns())
        i = 0
        while True:
            x = torch.tanh(x * 1.01) + 0.1
            i += 1
            done.value = i
            if i % 50 == 0:
                rec.step()
            if end != "kill" and i == 6000:
                break
        if end == "exit":
            os._exit(3)
        if end == "abort":
            faulthandler.disable()  # pytest's would print this process's stack
            os.abort()
    os._exit(0)


def _run(tmp_path, *, delay: float = 0.0, sig: int | None = signal.SIGKILL,
         device: str = "cpu", end: str = "kill", slow_write: float = 0.0,
         then_kill: float | None = None):
    """Start ``_rank``, send ``sig`` ``delay`` s after its recording began
    (then SIGKILL ``then_kill`` s later); its exit code, its file, the ops
    it had run, and when the signal went (host clock)."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    done = ctx.Value("q", 0, lock=False)
    p = ctx.Process(target=_rank, args=(str(tmp_path), there, done, device, end, slow_write))
    p.start()
    try:
        assert here.poll(60), "the rank never got going"
        started = here.recv()
        sent = None
        if sig is not None:
            threading.Event().wait(max(0.0, started / 1e9 + delay - time.perf_counter()))
            sent = time.perf_counter_ns()
            os.kill(p.pid, sig)
            if then_kill is not None:
                threading.Event().wait(then_kill)
                os.kill(p.pid, signal.SIGKILL)
        p.join(60)
    finally:
        if p.is_alive():
            p.kill()
            p.join()
    return p.exitcode, ctl.load(tmp_path / "rank-0.ctl"), done.value * OPS_PER_ITER, sent


def _check_journal(tl, ran: int, sent: int | None) -> tuple[float, int]:
    """A journal's Timeline is plausible: a prefix of the ops in order, no
    more than ran, and what is missing at most LOST_S; (seconds, ops) lost."""
    assert tl.meta["partial"].startswith("unknown cause at step"), tl.meta["partial"]
    assert tl.meta["journal"]["stopped"] is False and tl.meta["rank"] == 0
    seq = tl.ops.seq
    assert seq.tolist() == list(range(len(seq)))  # nothing missing before the last
    assert len(seq) <= ran
    last = max(int(tl.ops.host_end_ns.max()) if len(seq) else 0, tl.meta["start_host_ns"])
    lost_s = ((sent or time.perf_counter_ns()) - last) / 1e9
    assert lost_s <= LOST_S, (lost_s, len(seq), ran)
    steps = tl.step_numbers()
    assert steps.tolist() == list(range(len(steps)))
    assert len(steps) >= len(seq) // (50 * OPS_PER_ITER) - 1
    return lost_s, ran - len(seq)


@pytest.mark.slow
def test_a_rank_killed_at_any_moment_leaves_a_journal_that_loads(tmp_path):
    """SIGKILL at 20 random moments of the first 0.8 s: 20/20 journals load."""
    rng = random.Random(38)
    lost, kept = [], []
    t0 = time.perf_counter()
    for i in range(KILLS):
        code, tl, ran, sent = _run(tmp_path / str(i), delay=rng.uniform(0, 0.8),
                                   device="sim" if i % 4 == 3 else "cpu")
        assert code == -signal.SIGKILL
        lost.append(_check_journal(tl, ran, sent))
        kept.append(len(tl.ops))
        if i % 4 == 3 and len(tl.ops):  # SimGPU: host rows with their launches' streams
            assert len(tl.gpu) == 0 and (tl.ops.stream >= 0).any()
    assert sum(n > 0 for n in kept) >= KILLS // 2  # most were killed after a flush
    print(f"{KILLS} kills in {time.perf_counter() - t0:.1f} s; lost at most "
          f"{max(s for s, _ in lost):.3f} s / {max(n for _, n in lost):,} ops; "
          f"median {np.median([s for s, _ in lost]):.3f} s")


def test_sigterm_then_sigkill_before_the_file_is_written_leaves_the_journal(tmp_path):
    # the file takes 2 s to write: the SIGKILL 0.3 s after the SIGTERM ends it
    code, tl, ran, sent = _run(tmp_path, delay=0.6, sig=signal.SIGTERM, slow_write=2.0,
                               then_kill=0.3)
    assert code == -signal.SIGKILL
    _check_journal(tl, ran, sent)
    # the SIGTERM stopped the journal, and nothing was recorded after it
    assert sent - int(tl.ops.host_end_ns.max()) >= 0


@pytest.mark.parametrize("end, code", [("exit", 3), ("abort", -signal.SIGABRT)])
def test_os_exit_and_abort_leave_a_journal(tmp_path, end, code):
    got, tl, ran, _ = _run(tmp_path, sig=None, end=end)
    assert got == code
    _check_journal(tl, ran, None)


def test_a_clean_stop_replaces_the_journal_with_the_file(tmp_path):
    code, tl, ran, _ = _run(tmp_path, sig=None, end="stop")
    assert code == 0 and "partial" not in tl.meta and "journal" not in tl.meta
    assert len(tl.ops) == ran
    assert not journal.is_journal(tmp_path / "rank-0.ctl")
    assert [p.name for p in tmp_path.iterdir()] == ["rank-0.ctl"]


def test_a_stop_whose_file_is_not_written_leaves_a_whole_journal(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(lifecycle, "write_rank", fail)
    with pytest.raises(OSError, match="disk full"):
        with ctl.record(device="cpu", out_dir=tmp_path, measure=False) as rec:
            for _ in range(30):
                torch.ones(3).sum()
            rec.step()
    tl = ctl.load(tmp_path / "rank-0.ctl")
    assert tl.meta["partial"].startswith("stopped at step 1, but the process ended")
    assert len(tl.ops) == 60 and tl.meta["journal"]["stopped"]


def test_the_journal_thread_is_not_recorded(tmp_path):
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False, threads=True) as rec:
        torch.ones(3).sum()
        time.sleep(2 * flusher.PERIOD_S)
        torch.ones(3).sum()
    assert rec.timeline.meta["threads"] == [threading.current_thread().name]


def test_a_journal_that_cannot_be_written_warns_and_the_recording_goes_on(tmp_path,
                                                                         monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("read-only file system")
    monkeypatch.setattr(lifecycle, "Journal", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ctl.record(device="cpu", out_dir=tmp_path, measure=False) as rec:
            torch.ones(3).sum()
    assert any("cannot keep a journal" in str(w.message) for w in caught)
    assert len(ctl.load(tmp_path / "rank-0.ctl").ops) == len(rec.timeline.ops) == 2


def test_a_merge_reads_a_killed_rank_s_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")   # the forked rank's world: merge checks they agree
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, killed, _, _ = _run(tmp_path, delay=0.5)
    assert code == -signal.SIGKILL
    monkeypatch.setenv("RANK", "1")
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False) as rec:
        torch.ones(3).sum()
        rec.step()
    tl = ctl.merge(tmp_path)
    assert tl.meta["partial_ranks"] == [0] and tl.meta["missing_ranks"] == []
    assert len(tl.ops) == len(killed.ops) + 2
    assert "rank 0 partial (unknown cause at step" in ctl.analyze(tl).summary()


def test_a_rank_that_changed_since_start_leaves_no_stale_journal(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with ctl.record(device="cpu", out_dir=tmp_path, measure=False):
        assert journal.is_journal(tmp_path / "rank-3.ctl")
        torch.ones(3).sum()
        monkeypatch.setenv("RANK", "4")  # as if the process group said otherwise at stop
    assert [p.name for p in tmp_path.iterdir()] == ["rank-4.ctl"]
