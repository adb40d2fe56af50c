"""ranks.py and collectives.py: per-rank recording under torch.distributed, end to end through merge.

Real ranks are forked processes on the gloo backend (file init, CPU); the
parent imports what recording needs first, so a fork costs milliseconds.
Clock truth: every rank of this machine reads the same host clock, so a
rank's true shift is minus the skew the test hook gave it. Synthetic ranks
(``fake_ranks``, in test_merger.py and test_straggler.py) cover kinds and
drifts the processes do not.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import cutimeline as ctl
import cutimeline.recording.recorder
import cutimeline.timeline.ctlfile.fileformat
from cutimeline.dist.straggler import collectives, describe, rank_activity, stragglers
from cutimeline.errors import CutimelineError
from cutimeline.recording import ranks as cdist
from cutimeline.recording.measures.collectives import FROM_ROOT, CollectiveLog
from cutimeline.timeline.ranks import rank_of_thread, shift_host
from cutimeline.timeline.schema import NONE, OpFlag
from cutimeline.timeline.timeline import Timeline

from fakeranks import fake_ranks

DELAY_S = 0.04
STEPS = 6  # step 0 lines the ranks up; the slow rank sleeps in the others


# -- real ranks -------------------------------------------------------------------------

def _child(rank: int, world: int, folder: str, job: dict) -> None:
    code = 0
    try:
        if rank in job.get("skew", {}):
            os.environ[cdist.SKEW_ENV] = str(job["skew"][rank])
        dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=30))
        code = _train(rank, world, os.path.join(folder, "ranks"), **job.get("train", {}))
        dist.destroy_process_group()
    except BaseException as exc:  # the exit code tells the parent
        print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    os._exit(code)


def _train(rank: int, world: int, out: str, *, slow: int | None = None, steps: int = STEPS,
           crash: int | None = None, p2p: bool = False) -> int:
    def inputs(r):
        g = torch.Generator().manual_seed(r)
        return torch.randn(512, generator=g), torch.randn(512, generator=g)
    x, w = inputs(rank)
    # what all_reduce must give: every rank's y, computed here
    total = sum(torch.tanh(a * b).sum() for a, b in map(inputs, range(world)))
    try:
        with ctl.record(out_dir=out, steps="manual", modules=False) as rec:
            dist.barrier()  # step 0 lines the ranks up
            rec.step()
            for i in range(1, steps):
                if rank == crash and i == 2:
                    raise RuntimeError("rank crashed on purpose")
                y = torch.tanh(x * w).sum().reshape(1)
                if crash is not None and i >= 2:  # the others go on alone
                    rec.step()
                    continue
                if rank == slow:
                    time.sleep(DELAY_S)
                dist.all_reduce(y)
                if not torch.allclose(y, total.reshape(1)):
                    return 5
                dist.barrier()
                if p2p:
                    if rank == 0:
                        dist.send(y, 1)
                    elif rank == 1:
                        dist.recv(y, 0)
                rec.step()
    except RuntimeError as exc:
        return 3 if str(exc) == "rank crashed on purpose" else 4
    return 0


def _run_ranks(tmp_path, world: int, **job) -> list[int]:
    import torch._dynamo  # noqa: F401  (the first dispatch mode imports it: not per child)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_child, args=(r, world, str(tmp_path), job))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    for p in procs:
        if p.is_alive():
            p.kill()
    return [p.exitcode for p in procs]


def _check_straggler(tl: Timeline, slow: int, world: int) -> None:
    c = collectives(tl)
    ar = c[(c["name"] == "c10d::allreduce_") & (c["step"] >= 1)]
    assert len(ar) == (STEPS - 1) * world
    # the median over steps: on a busy machine another rank is sometimes
    # descheduled too, which the merge then rightly measures
    late = ar["late_ns"][ar["rank"] == slow]
    assert np.all(ar["last"][ar["rank"] == slow])
    assert abs(np.median(late) - DELAY_S * 1e9) <= 0.1 * DELAY_S * 1e9
    held = ar["held_ns"][ar["rank"] == slow]
    assert abs(np.median(held) - DELAY_S * 1e9) <= 0.1 * DELAY_S * 1e9
    s = stragglers(tl)
    for step in range(1, STEPS):
        top = s[(s["step"] == step) & (s["order"] == 1)]
        assert top["rank"].tolist() == [slow]
    waited = ar["wait_ns"][ar["rank"] != slow]
    assert abs(np.median(waited) - DELAY_S * 1e9) <= 0.1 * DELAY_S * 1e9


def _check_clocks(tl: Timeline, skew: dict[int, int]) -> None:
    for r in tl.meta["ranks"]:
        c = r["clock"]
        truth = -skew.get(r["rank"], 0)
        assert c["bound_ns"] is not None and c["relax_ns"] == 0
        # the line at the rank's collectives, against the true shift
        at = np.array([c["ref_ns"], c["ref_ns"] + 10 ** 8])
        line = c["offset_ns"] + c["slope"] * (at - c["ref_ns"])
        assert np.all(np.abs(line - at - truth) <= c["bound_ns"]), (r["rank"], c)


def test_two_ranks_slow_reference_is_named_and_measured(tmp_path):
    assert _run_ranks(tmp_path, 2, train={"slow": 0, "p2p": True}) == [0, 0]
    tl = ctl.merge(tmp_path / "ranks")
    assert [r["rank"] for r in tl.meta["ranks"]] == [0, 1]
    _check_straggler(tl, slow=0, world=2)
    _check_clocks(tl, {})
    c = collectives(tl)
    sends = c[c["kind"] == "send"]
    recvs = c[c["kind"] == "recv"]
    assert len(sends) == len(recvs) == STEPS - 1 and np.all(sends["instance"] == recvs["instance"])
    assert "straggler: rank 0" in describe(tl)


def test_four_ranks_straggler_and_skewed_clock(tmp_path):
    skew = {3: 5_000_000_000}
    assert _run_ranks(tmp_path, 4, skew=skew, train={"slow": 2}) == [0, 0, 0, 0]
    raw3 = ctl.load(tmp_path / "ranks" / "rank-3.ctl")
    assert raw3.meta["test_clock_skew_ns"] == skew[3] and raw3.meta["world_size"] == 4
    tl = ctl.merge(tmp_path / "ranks")
    _check_clocks(tl, skew)
    clock3 = tl.meta["ranks"][3]["clock"]
    assert clock3["method"] == "collectives"  # the skewed epoch cannot say it
    assert clock3["bound_ns"] < 0.1 * DELAY_S * 1e9
    _check_straggler(tl, slow=2, world=4)
    act = rank_activity(tl)
    assert act["rank"].tolist() == [0, 1, 2, 3]
    assert np.all(act["busy_ns"] > 0) and np.all(act["idle_ns"] >= 0)
    assert act["wait_ns"][2] < act["wait_ns"][0]  # the straggler waits least
    # ranks as thread groups: every rank's ops and steps on its own thread ids
    rot = rank_of_thread(tl)
    o = tl.ops
    assert sorted(set(rot[o.thread].tolist())) == [0, 1, 2, 3]
    assert tl.meta["threads"][tl.meta["ranks"][3]["threads"][0]].startswith("rank 3 · ")
    assert len(np.unique(o.seq)) == len(o)
    assert np.all(o.flags[tl.string_id("c10d::allreduce_") == o["name"]] & OpFlag.COLLECTIVE)


def test_crashed_rank_leaves_partial_file_and_merges(tmp_path):
    assert _run_ranks(tmp_path, 2, train={"crash": 1}) == [0, 3]
    part = ctl.load(tmp_path / "ranks" / "rank-1.ctl")
    full = ctl.load(tmp_path / "ranks" / "rank-0.ctl")
    assert part.meta["error"] == "RuntimeError: rank crashed on purpose"
    assert "error" not in full.meta
    assert part.step_numbers().tolist() == [0, 1]
    assert full.step_numbers().tolist() == list(range(STEPS))
    tl = ctl.merge(tmp_path / "ranks")
    assert tl.meta["errors"] == [1] and tl.meta["ranks"][1]["error"].startswith("RuntimeError")
    assert len(tl.ops) == len(part.ops) + len(full.ops)
    _check_clocks(tl, {})
    c = collectives(tl)
    assert np.all(c["n_ranks"] == 2)  # the ones before the crash, on both ranks
    out = tmp_path / "merged.ctl"
    proc = subprocess.run([sys.executable, "-m", "cutimeline", "merge", str(tmp_path / "ranks"),
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "rank 1" in proc.stdout and "raised RuntimeError" in proc.stdout
    assert len(ctl.load(out).ops) == len(tl.ops)


# -- the recorder in one process -----------------------------------------------------

@pytest.fixture
def world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/init", rank=0,
                            world_size=1)
    yield tmp_path
    dist.destroy_process_group()


def test_recorder_flags_collectives_with_group_number_and_completion(world_of_one):
    x = torch.arange(4.0)
    try:  # gloo has it from torch 2.5 or so
        dist.reduce_scatter(torch.zeros(4), [x])
        scatters = True
    except RuntimeError as exc:
        assert "does not support reduce_scatter" in str(exc)
        scatters = False
    with ctl.record(out_dir=world_of_one / "r") as rec:
        dist.all_reduce(x)
        dist.broadcast(x, 0)
        dist.all_gather([torch.zeros(4)], x)
        if scatters:
            dist.reduce_scatter(torch.zeros(4), [x])
        dist.barrier()
        sub = dist.new_group([0])
        dist.all_reduce(x, group=sub)
        work = dist.all_reduce(x, async_op=True)
        work.wait()
        y = torch.ops._c10d_functional.all_reduce(x, "sum", "0")
        y = torch.ops._c10d_functional.wait_tensor(y)
        z = x + 1
    assert torch.equal(x, torch.arange(4.0)) and torch.equal(y, x) and torch.equal(z, x + 1)
    tl = rec.timeline
    assert tl.meta["rank"] == 0 and tl.meta["world_size"] == 1 and tl.meta["backend"] == "gloo"
    assert os.path.exists(world_of_one / "r" / "rank-0.ctl")
    assert "collectives" not in tl.meta
    c = tl.collectives
    names = tl.decode(tl.ops["name"])
    flagged = (tl.ops.flags & OpFlag.COLLECTIVE) != 0
    assert np.flatnonzero(flagged).tolist() == c.op.tolist()  # one row per op, in op order
    assert set(names[flagged]) == {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_",
                                   "c10d::barrier", "_c10d_functional::all_reduce"} | \
        ({"c10d::reduce_scatter_"} if scatters else set())
    assert "_c10d_functional::wait_tensor" in set(names[~flagged])
    groups = [tl.meta["groups"][g]["ranks"] for g in c.group]
    assert groups == [[0]] * len(groups) and len(tl.meta["groups"]) == 2
    world = [i for i, g in enumerate(c.group) if tl.meta["groups"][g]["name"] == "0"]
    assert [c.number[i] for i in world] == list(range(len(world)))
    assert c.kind[1] == FROM_ROOT and c.peer[1] == 0
    row = c.op
    done = c.done_ns
    # gloo's list reduce_scatter has no future, so its completion is unknown
    no_future = names[row] == "c10d::reduce_scatter_"
    assert no_future.sum() == scatters and np.all(done[no_future] == NONE)
    assert np.all(done[~no_future] >= tl.ops.host_begin_ns[row][~no_future])


def test_collective_error_propagates_unchanged_and_file_is_written(world_of_one):
    with pytest.raises(ValueError, match="bad shapes"):
        with ctl.record(out_dir=world_of_one / "r") as rec:
            dist.all_reduce(torch.ones(2))
            raise ValueError("bad shapes")
    tl = ctl.load(world_of_one / "r" / "rank-0.ctl")
    assert tl.meta["error"] == "ValueError: bad shapes" and rec.timeline.meta["error"]
    assert len(tl.collectives) == 1


def test_record_out_dir_and_skew_hook_errors(tmp_path, monkeypatch):
    with pytest.raises(CutimelineError, match="out_dir"):
        ctl.record(out_dir=5)
    monkeypatch.setenv(cdist.SKEW_ENV, "soon")
    rec = ctl.record(out_dir=tmp_path, measure=False).start()
    torch.ones(2) + 1
    with pytest.raises(CutimelineError, match="whole number of nanoseconds"):
        rec.stop()


def test_without_process_group_rank_comes_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv(cdist.SKEW_ENV, "-250")
    with ctl.record(out_dir=tmp_path, measure=False) as rec:
        torch.ones(2) * 2
    tl = ctl.load(tmp_path / "rank-3.ctl")
    assert tl.meta["rank"] == 3 and tl.meta["world_size"] == 8 and tl.meta["local_rank"] == 3
    assert tl.meta["test_clock_skew_ns"] == -250
    assert tl.ops.host_begin_ns[0] == rec.timeline.ops.host_begin_ns[0]




def test_shift_host_moves_every_host_time_and_back():
    tl = fake_ranks(4, 2)[1]
    tl = tl.replace(meta={**tl.meta, "overhead_calibrations": [[1_000, 2_000, 950]]})
    moved = shift_host(tl, 123, epoch=True)
    assert moved.meta["overhead_calibrations"] == [[1_123, 2_123, 950]]
    assert np.array_equal(moved.ops.host_begin_ns, tl.ops.host_begin_ns + 123)
    assert np.array_equal(moved.spans.end_ns, tl.spans.end_ns + 123)
    assert moved.meta["start_epoch_ns"] == tl.meta["start_epoch_ns"] + 123
    assert moved.collectives.done_ns[0] == tl.collectives.done_ns[0] + 123
    unknown = tl.replace(collectives=tl.collectives.replace(
        done_ns=np.where(np.arange(len(tl.collectives)) == 1, NONE, tl.collectives.done_ns)))
    assert shift_host(unknown, 123).collectives.done_ns[1] == NONE  # unknown stays unknown
    back = shift_host(moved, -123, epoch=True)
    assert np.array_equal(back.collectives.done_ns, tl.collectives.done_ns)
    assert np.array_equal(back.ops.host_end_ns, tl.ops.host_end_ns) and back.meta == tl.meta


def test_a_collective_the_log_cannot_read_warns_once_and_never_raises():
    log = CollectiveLog()

    class Odd:  # an op whose arguments hold no process group
        namespace = "c10d"
        _schema = torch.ops.c10d.allreduce_.default._schema

        def name(self):
            return "c10d::allreduce_"
    with pytest.warns(RuntimeWarning, match="could not read the process group") as seen:
        log.note(Odd(), ([torch.ones(1)], "not a group"), {}, None, 0, None)
        log.note(Odd(), ([torch.ones(1)], "not a group"), {}, None, 1, None)
    assert len(seen) == 1
    assert log.rows == [] and log.snapshot().shape == (0, 6) and log.meta() == {"groups": []}


def test_a_collective_that_failed_gets_no_completion_time():
    from cutimeline.recording.measures.collectives import _completed
    ok, failed = torch.futures.Future(), torch.futures.Future()
    rows = [[0, 0, 0, 0, NONE, NONE], [1, 0, 0, 1, NONE, NONE]]
    for row, fut in zip(rows, (ok, failed)):
        fut.add_done_callback(lambda f, row=row: _completed(row, f))
    before = time.perf_counter_ns()
    ok.set_result(None)
    failed.set_exception(dist.DistBackendError("NCCL watchdog timed out"))
    assert before <= rows[0][5] <= time.perf_counter_ns()
    assert rows[1][5] == NONE
    # an error that is no backend failure is not swallowed
    odd = torch.futures.Future()
    odd.set_exception(ValueError("not a collective's error"))
    with pytest.raises(ValueError, match="not a collective's error"):
        _completed(rows[1], odd)
    assert rows[1][5] == NONE
