"""dist.py and straggler.py: per-rank recording, merge, rank clocks, stragglers.

Real ranks are forked processes on the gloo backend (file init, CPU); the
parent imports what recording needs first, so a fork costs milliseconds.
Clock truth: every rank of this machine reads the same host clock, so a
rank's true shift is minus the skew the test hook gave it. Synthetic ranks
(``fake_ranks``) cover kinds and drifts the processes do not.
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
import cutimeline.fileformat  # noqa: F401  (imported before forking)
import cutimeline.recorder  # noqa: F401
from cutimeline import dist as cdist
from cutimeline.errors import CutimelineError
from cutimeline.straggler import (_median_of_others, _union_ns, collectives, describe,
                                  rank_activity, stragglers)
from cutimeline.timeline import NONE, OpFlag, SpanKind, Timeline

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
    rot = cdist.rank_of_thread(tl)
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
    with ctl.record(out_dir=world_of_one / "r") as rec:
        dist.all_reduce(x)
        dist.broadcast(x, 0)
        dist.all_gather([torch.zeros(4)], x)
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
    c = tl.meta["collectives"]
    names = tl.decode(tl.ops["name"])
    flagged = (tl.ops.flags & OpFlag.COLLECTIVE) != 0
    assert sorted(tl.ops.seq[flagged].tolist()) == c["seq"]
    assert set(names[flagged]) == {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_",
                                   "c10d::reduce_scatter_", "c10d::barrier",
                                   "_c10d_functional::all_reduce"}
    assert "_c10d_functional::wait_tensor" in set(names[~flagged])
    groups = [tl.meta["groups"][g]["ranks"] for g in c["group"]]
    assert groups == [[0]] * len(groups) and len(tl.meta["groups"]) == 2
    world = [i for i, g in enumerate(c["group"]) if tl.meta["groups"][g]["name"] == "0"]
    assert [c["number"][i] for i in world] == list(range(len(world)))
    assert c["kind"][1] == cdist.FROM_ROOT and c["peer"][1] == 0
    row = np.searchsorted(tl.ops.seq, c["seq"])
    done = np.array(c["done_ns"])
    # gloo's list reduce_scatter has no future, so its completion is unknown
    no_future = names[row] == "c10d::reduce_scatter_"
    assert no_future.sum() == 1 and np.all(done[no_future] == NONE)
    assert np.all(done[~no_future] >= tl.ops.host_begin_ns[row][~no_future])


def test_collective_error_propagates_unchanged_and_file_is_written(world_of_one):
    with pytest.raises(ValueError, match="bad shapes"):
        with ctl.record(out_dir=world_of_one / "r") as rec:
            dist.all_reduce(torch.ones(2))
            raise ValueError("bad shapes")
    tl = ctl.load(world_of_one / "r" / "rank-0.ctl")
    assert tl.meta["error"] == "ValueError: bad shapes" and rec.timeline.meta["error"]
    assert len(tl.meta["collectives"]["seq"]) == 1


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


# -- synthetic ranks ----------------------------------------------------------------------

def fake_ranks(seed: int, world: int = 3, *, n: int = 60, slow: int | None = None,
               delay_ns: int = 2_000_000, shift_ns=None, drift_ppm=None,
               epoch_error_ns=None, kinds=("all",)) -> list[Timeline]:
    """Ranks that run ``n`` collectives of the given kinds (cycled) on one
    world group, one step each, with a host op between: rank r's host clock
    reads ``shift[r] + (1 + drift[r]·1e-6)·t`` at true time t; its stored
    epoch is off by ``epoch_error[r]``. ``meta["true_shift"]`` holds (for
    the test) the rank's clock parameters."""
    rng = np.random.default_rng(seed)
    shift = np.zeros(world, np.int64) if shift_ns is None else np.asarray(shift_ns, np.int64)
    drift = np.zeros(world) if drift_ppm is None else np.asarray(drift_ppm, float)
    err = np.zeros(world, np.int64) if epoch_error_ns is None else np.asarray(epoch_error_ns)
    t0 = 10 ** 12
    kind = np.array([cdist.KINDS.index(kinds[k % len(kinds)]) for k in range(n)])
    root = rng.integers(0, world, n)
    arrive = np.zeros((world, n), np.int64)
    done = np.zeros((world, n), np.int64)
    t = np.full(world, t0 + 1_000_000)
    for k in range(n):
        a = t + rng.integers(20_000, 200_000, world)
        if slow is not None:
            a[slow] += delay_ns
        lat = rng.integers(5_000, 60_000, world)
        if kind[k] == cdist.FROM_ROOT:
            d = np.maximum(a, a[root[k]]) + lat
        elif kind[k] == cdist.TO_ROOT:
            d = a + lat
            d[root[k]] = a.max() + lat[root[k]]
        else:
            d = a.max() + lat
        arrive[:, k], done[:, k] = a, d
        t = d + rng.integers(1_000, 30_000, world)

    def clock(r, x):
        return shift[r] + x + np.rint((x - t0) * drift[r] * 1e-6).astype(np.int64)

    out = []
    for r in range(world):
        hb = np.empty(2 * n, np.int64)
        hb[0::2] = arrive[r] - 15_000  # a host op, then the collective
        hb[1::2] = arrive[r]
        he = hb + 8_000
        names = np.tile([0, 1], n)
        steps_b = np.concatenate([[t0], done[r, :-1] + 1])
        meta = {"source": "fake", "rank": r, "world_size": world, "host": "h",
                "start_epoch_ns": 1_700_000_000 * 10 ** 9 + t0 + int(err[r]),
                "start_host_ns": int(clock(r, t0)), "threads": ["MainThread"],
                "groups": [{"name": "0", "ranks": list(range(world)), "backend": "gloo"}],
                "collectives": {"seq": list(range(1, 2 * n, 2)), "group": [0] * n,
                                "kind": kind.tolist(),
                                "number": list(range(n)),
                                "peer": np.where(kind == cdist.ALL, NONE, root).tolist(),
                                "done_ns": clock(r, done[r]).tolist()},
                "true_clock": [int(shift[r]), float(drift[r]), t0]}
        out.append(Timeline({
            "ops": {"seq": np.arange(2 * n), "thread": np.zeros(2 * n), "name": names,
                    "flags": np.tile([0, int(OpFlag.COLLECTIVE)], n),
                    "host_begin_ns": clock(r, hb), "host_end_ns": clock(r, he)},
            "spans": {"kind": np.full(n, int(SpanKind.STEP)), "name": np.full(n, 2),
                      "thread": np.zeros(n), "depth": np.zeros(n), "number": np.arange(n),
                      "begin_ns": clock(r, steps_b), "end_ns": clock(r, done[r])}},
            ["aten::mul", "c10d::allreduce_", "step"], meta))
    return out


def _true_merged(tls: list[Timeline], rank: int, t_rank: np.ndarray) -> np.ndarray:
    """Where host times of ``rank`` truly lie on rank 0's clock."""
    s, d, t0 = tls[rank].meta["true_clock"]
    s0, d0, _ = tls[0].meta["true_clock"]
    true = t0 + (t_rank - s - t0) / (1 + d * 1e-6)
    return s0 + true + (true - t0) * d0 * 1e-6


@pytest.mark.parametrize("kinds", [("all",), ("from_root", "to_root", "all"),
                                   ("from_root", "to_root")])
def test_clock_lines_hold_the_truth_within_their_bound(kinds):
    for seed in range(4):
        tls = fake_ranks(seed, 4, kinds=kinds, shift_ns=[0, 7 * 10 ** 9, -3 * 10 ** 9, 12_345],
                         drift_ppm=[0, 20, -35, 5],
                         epoch_error_ns=[0, 0, 400_000_000, 2_000])
        tl = ctl.merge(tls)
        for r in range(1, 4):
            c = tl.meta["ranks"][r]["clock"]
            raw = tls[r].ops.host_begin_ns
            line = c["offset_ns"] + c["slope"] * (raw - c["ref_ns"])
            err = np.abs(line - _true_merged(tls, r, raw))
            assert c["bound_ns"] is not None and np.all(err <= c["bound_ns"] + 1), (seed, r, c)
            assert err.max() < 500_000  # the band, not the seconds of skew


def test_epoch_line_is_kept_inside_a_straggler_wide_band():
    tls = fake_ranks(1, 3, slow=2, delay_ns=5_000_000, epoch_error_ns=[0, 0, 3_000])
    tl = ctl.merge(tls)
    c = tl.meta["ranks"][2]["clock"]
    assert c["method"] == "epoch+collectives" and abs(c["shift_ns"] - 3_000) <= 100
    assert c["bound_ns"] >= 4_000_000  # the band is as wide as the delay
    s = stragglers(tl)
    whole = s[s["step"] == NONE]
    assert whole["rank"][0] == 2 and whole["last"][0] == 60
    assert abs(whole["late_mean_ns"][0] - 5_000_000) < 250_000


def test_rank_without_collectives_is_related_by_epoch_or_refused():
    tls = fake_ranks(2, 2, shift_ns=[0, 10 ** 9], epoch_error_ns=[0, 5_000])
    bare = tls[1].replace(meta={**tls[1].meta, "collectives": None})
    tl = ctl.merge([tls[0], bare])
    c = tl.meta["ranks"][1]["clock"]
    assert c["method"] == "epoch" and c["bound_ns"] is None
    assert c["shift_ns"] == -10 ** 9 + 5_000
    no_epoch = {k: v for k, v in bare.meta.items() if k != "start_epoch_ns"}
    with pytest.raises(CutimelineError, match="nothing relates its clock"):
        ctl.merge([tls[0], bare.replace(meta=no_epoch)])


def test_collectives_table_semantics():
    tls = fake_ranks(3, 3, n=5, slow=1, delay_ns=10 ** 6)
    tl = ctl.merge(tls)
    c = collectives(tl)
    assert len(c) == 15 and c["instance"].tolist() == np.repeat(np.arange(5), 3).tolist()
    for k in range(5):
        m = c[c["instance"] == k]
        a = m["arrival_ns"]
        assert np.array_equal(m["wait_ns"], a.max() - a)
        assert m["rank"][m["last"]].tolist() == [1]
        assert m["held_ns"][m["last"]][0] == a.max() - np.sort(a)[-2]
        for i in range(3):
            assert m["late_ns"][i] == a[i] - np.median(np.delete(a, i))
    assert c["step"].tolist() == np.repeat(np.arange(5), 3).tolist()
    assert set(c["name"]) == {"c10d::allreduce_"} and set(c["group_size"]) == {3}


def test_median_of_others_matches_brute_force():
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 7, 50)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sa = np.concatenate([np.sort(rng.integers(0, 100, k)) for k in counts])
    pos = np.concatenate([np.arange(k) for k in counts])
    n = np.repeat(counts, counts)
    got = _median_of_others(sa, first, counts, pos, n)
    want = [np.median(np.delete(sa[f:f + k], i)) if k > 1 else np.nan
            for f, k in zip(first, counts) for i in range(k)]
    assert np.allclose(got, want, equal_nan=True)


def test_union_matches_brute_force():
    rng = np.random.default_rng(1)
    b = rng.integers(0, 1000, 40)
    e = b + rng.integers(0, 80, 40)
    covered = np.zeros(1100, bool)
    for x, y in zip(b, e):
        covered[x:y] = True
    assert _union_ns(b, e) == covered.sum()


def test_shift_host_moves_every_host_time_and_back():
    tl = fake_ranks(4, 2)[1]
    moved = cdist.shift_host(tl, 123, epoch=True)
    assert np.array_equal(moved.ops.host_begin_ns, tl.ops.host_begin_ns + 123)
    assert np.array_equal(moved.spans.end_ns, tl.spans.end_ns + 123)
    assert moved.meta["start_epoch_ns"] == tl.meta["start_epoch_ns"] + 123
    assert moved.meta["collectives"]["done_ns"][0] == tl.meta["collectives"]["done_ns"][0] + 123
    back = cdist.shift_host(moved, -123, epoch=True)
    assert np.array_equal(back.ops.host_end_ns, tl.ops.host_end_ns) and back.meta == tl.meta


def test_merge_keeps_devices_apart_and_serves_analyze_and_slicing():
    def one(rank):
        with ctl.record(device=ctl.SimGPU(), measure=False, steps="manual") as rec:
            a = torch.randn(64, 64)
            for _ in range(3):
                (a @ a).sum().item()
                rec.step()
        tl = rec.timeline
        return tl.replace(meta={**tl.meta, "rank": rank})
    tls = [one(0), one(1)]
    tl = ctl.merge(tls)
    assert tl.meta["device_rank"] == [0, 1]
    assert [d["local_index"] for d in tl.meta["devices"]] == [tls[0].gpu.device[0]] * 2
    assert len(tl.gpu) == sum(len(t.gpu) for t in tls)
    assert set(cdist.rank_of_device(tl)[tl.gpu.device].tolist()) == {0, 1}
    assert np.all(tl.gpu.op[len(tls[0].gpu):] >= len(tls[0].ops))  # references moved
    assert tl.string(tl.ops["name"][tl.gpu.op[-1]]) == tls[1].string(
        tls[1].ops["name"][tls[1].gpu.op[-1]])
    assert len(tl.clocks) == 2 and set(tl.clocks.device.tolist()) == {0, 1}
    rep = ctl.analyze(tl)
    assert len(rep.devices) == 2
    sliced = tl.slice_steps(1)
    assert set(cdist.rank_of_thread(sliced)[sliced.ops.thread].tolist()) == {0, 1}


def test_merge_inputs_are_checked(tmp_path):
    with pytest.raises(CutimelineError, match="no such folder"):
        ctl.merge(tmp_path / "nope")
    with pytest.raises(CutimelineError, match="no rank-<r>.ctl"):
        ctl.merge(tmp_path)
    with pytest.raises(CutimelineError, match="empty list"):
        ctl.merge([])
    with pytest.raises(CutimelineError, match="not int"):
        ctl.merge(5)
    with pytest.raises(CutimelineError, match="item 0 is a int"):
        ctl.merge([5])
    tls = fake_ranks(5, 2)
    with pytest.raises(CutimelineError, match="Rank 1 appears twice"):
        ctl.merge([tls[0], tls[1], tls[1]])
    (tmp_path / "rank-0.ctl").write_bytes(b"not a file")
    with pytest.raises(CutimelineError, match="rank-0.ctl is not a cutimeline file"):
        ctl.merge(tmp_path)
    with pytest.raises(CutimelineError, match="needs a Timeline"):
        collectives("rank-0.ctl")


def test_merged_file_round_trips(tmp_path):
    tls = fake_ranks(6, 3, slow=0)
    for t in tls:
        t.save(tmp_path / f"rank-{t.meta['rank']}.ctl")
    tl = ctl.merge(tmp_path)
    assert [r["file"] for r in tl.meta["ranks"]] == [str(tmp_path / f"rank-{r}.ctl")
                                                      for r in range(3)]
    tl.save(tmp_path / "m.ctl")
    back = ctl.load(tmp_path / "m.ctl")
    assert np.array_equal(collectives(back)["late_ns"], collectives(tl)["late_ns"])
    assert back.meta["missing_ranks"] == [] and back.meta["reference_rank"] == 0


def test_kineto_ranks_merge_by_epoch_and_plot_one_group_per_rank(tmp_path):
    tls = [ctl.import_chrome(f"tests/data/kineto/trace_filter/sampled_rank-{r}.json.gz")
           for r in (1, 0)]
    tl = ctl.merge(tls)  # ranks from their distributedInfo, not list order
    assert [r["rank"] for r in tl.meta["ranks"]] == [0, 1] and tl.meta["world_size"] == 128
    assert tl.meta["missing_ranks"] == list(range(2, 128))
    c = tl.meta["ranks"][1]["clock"]
    assert c["method"] == "epoch" and c["bound_ns"] is None  # no collectives table in Kineto
    assert len(tl.gpu) == sum(len(t.gpu) for t in tls)
    fig = ctl.plot(tl, tmp_path / "ranks.png")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    # one lane group per rank: its spans, its threads, its GPU's streams
    rank = [lb.split(" · ")[0] for lb in labels]
    what = [lb.split(" · ")[1].split(" ")[0] for lb in labels]
    assert rank == ["rank 0"] * 8 + ["rank 1"] * 8
    assert what == ["host", "CPU", "CPU", "GPU0", "GPU0", "GPU0", "GPU0", "GPU0"] + \
        ["host", "CPU", "CPU", "GPU1", "GPU1", "GPU1", "GPU1", "GPU1"]
    assert cdist.rank_of_device(tl).tolist() == [0, 1]


def test_slices_keep_the_collectives_they_hold():
    tl = ctl.merge(fake_ranks(7, 3, n=10, slow=2))
    whole = collectives(tl)
    part = collectives(tl.slice_steps(3, 5))
    # the window is the union of the ranks' steps: a neighbour's op may reach in
    assert {3, 4, 5} <= set(part["number"].tolist()) <= {2, 3, 4, 5, 6}
    for k in (3, 4, 5):
        a = whole[whole["number"] == k]
        b = part[part["number"] == k]
        assert np.array_equal(a["wait_ns"], b["wait_ns"]) and np.array_equal(a["rank"], b["rank"])


def test_bad_rank_numbers_and_unalignable_gpu_rows_are_refused():
    tls = fake_ranks(8, 2)
    with pytest.raises(CutimelineError, match="names rank -2"):
        ctl.merge([tls[0], tls[1].replace(meta={**tls[1].meta, "rank": -2})])
    gpu = tls[1].replace(meta={**tls[1].meta, "aligned": False},
                         events={"device": [0, 0], "stream": [0, 0], "kind": [0, 1],
                                 "op": [0, 0], "raw_ns": [5, 9],
                                 "host_record_ns": tls[1].ops.host_begin_ns[:2]},
                         gpu={"op": [0], "device": [0], "stream": [0], "name": [0],
                              "begin_event": [0], "end_event": [1]})
    with pytest.raises(CutimelineError, match="Rank 1 .* cannot be aligned"):
        ctl.merge([tls[0], gpu])


def test_a_collective_the_log_cannot_read_warns_once_and_never_raises():
    log = cdist.CollectiveLog()

    class Odd:  # an op whose arguments hold no process group
        namespace = "c10d"
        _schema = torch.ops.c10d.allreduce_.default._schema

        def name(self):
            return "c10d::allreduce_"
    with pytest.warns(RuntimeWarning, match="could not read the process group") as seen:
        log.note(Odd(), ([torch.ones(1)], "not a group"), {}, None, 0, None)
        log.note(Odd(), ([torch.ones(1)], "not a group"), {}, None, 1, None)
    assert len(seen) == 1
    assert log.rows == [] and log.meta()["collectives"]["seq"] == []
