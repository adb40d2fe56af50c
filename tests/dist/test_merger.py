"""merger.py: ctl.merge on synthetic ranks (clock lines against their truth,
epochs, devices and threads kept apart, bad input) and on Kineto ranks; real
forked ranks are in test_dist.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.dist.straggler import collectives, stragglers
from cutimeline.errors import CutimelineError
from cutimeline.timeline.ranks import rank_of_device, rank_of_thread
from cutimeline.timeline.schema import NONE
from cutimeline.timeline.timeline import Timeline

from fakeranks import fake_ranks


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
    bare = tls[1].replace(collectives=tls[1].collectives.take(np.zeros(0, np.int64)))
    tl = ctl.merge([tls[0], bare])
    c = tl.meta["ranks"][1]["clock"]
    assert c["method"] == "epoch" and c["bound_ns"] is None
    assert c["shift_ns"] == -10 ** 9 + 5_000
    no_epoch = {k: v for k, v in bare.meta.items() if k != "start_epoch_ns"}
    with pytest.raises(CutimelineError, match="nothing relates its clock"):
        ctl.merge([tls[0], bare.replace(meta=no_epoch)])


def test_merge_keeps_devices_apart_and_serves_analyze_and_slicing():
    def one(rank):
        with ctl.record(device=ctl.SimGPU(), measure=False, steps="manual") as rec:
            a = torch.randn(64, 64, device="meta")
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
    assert set(rank_of_device(tl)[tl.gpu.device].tolist()) == {0, 1}
    assert np.all(tl.gpu.op[len(tls[0].gpu):] >= len(tls[0].ops))  # references moved
    assert tl.string(tl.ops["name"][tl.gpu.op[-1]]) == tls[1].string(
        tls[1].ops["name"][tls[1].gpu.op[-1]])
    assert len(tl.clocks) == 2 and set(tl.clocks.device.tolist()) == {0, 1}
    rep = ctl.analyze(tl)
    assert len(rep.devices) == 2
    sliced = tl.slice_steps(1)
    assert set(rank_of_thread(sliced)[sliced.ops.thread].tolist()) == {0, 1}
    # syncs keep the thread that waited, moved with its rank; unknown stays so
    y0 = tls[0].syncs
    assert (y0.thread[y0.op >= 0] >= 0).all()
    moved = tls[1].syncs.thread
    got = tl.syncs.thread[len(y0):]
    assert np.array_equal(got, np.where(moved == NONE, NONE, moved + 1))
    unknown = tls[1].replace(syncs={**tls[1].syncs.columns,
                                    "thread": np.full(len(tls[1].syncs), NONE)})
    assert (ctl.merge([tls[0], unknown]).syncs.thread[len(y0):] == NONE).all()


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


def _rows(a: np.ndarray) -> list:
    return [tuple("nan" if isinstance(v, float) and v != v else v for v in r)
            for r in a.tolist()]


def test_merged_collectives_follow_their_ops_and_groups_are_renumbered():
    tls = fake_ranks(5, 3, n=8, kinds=("all", "from_root"), slow=1)
    # rank 2 knows another group first: its world group is its group 1
    other = {"name": "7", "ranks": [2], "backend": "gloo"}
    tls[2] = tls[2].replace(collectives=tls[2].collectives.replace(group=np.ones(8)),
                            meta={**tls[2].meta, "groups": [other, *tls[2].meta["groups"]]})
    tl = ctl.merge(tls)
    c = tl.collectives
    assert "collectives" not in tl.meta and len(c) == 3 * 8
    assert tl.meta["groups"] == [{"name": "0", "ranks": [0, 1, 2]}, {"name": "7", "ranks": [2]}]
    assert (c.group == 0).all()  # the world group, on every rank
    base = [r["seq_base"] for r in tl.meta["ranks"]]
    for r, t in enumerate(tls):
        mine = rank_of_thread(tl)[tl.ops.thread[c.op]] == r
        assert (tl.ops.seq[c.op[mine]] - base[r]).tolist() == t.ops.seq[t.collectives.op].tolist()
        assert c.kind[mine].tolist() == t.collectives.kind.tolist()
    plain = ctl.merge(fake_ranks(5, 3, n=8, kinds=("all", "from_root"), slow=1))
    assert _rows(collectives(tl)) == _rows(collectives(plain))
    assert tl.meta["stragglers"] == plain.meta["stragglers"]


def test_a_format_4_merge_reads_as_the_same_merge_made_now():
    # tests/data/ctl/v4_merged.ctl: this merge, saved at file format 4
    # (collectives in meta; tests/timeline/test_collectives.py)
    from pathlib import Path
    old = ctl.load(Path(__file__).parents[1] / "data" / "ctl" / "v4_merged.ctl")
    now = ctl.merge(fake_ranks(7, 2, n=6, slow=1, kinds=("all", "from_root", "to_root")))
    for name in ("ops", "spans", "collectives"):
        for col, a in now.table(name).columns.items():
            assert np.array_equal(old.table(name)[col], a), (name, col)
    assert _rows(collectives(old)) == _rows(collectives(now))
    assert _rows(stragglers(old)) == _rows(stragglers(now))
    assert old.meta["stragglers"] == now.meta["stragglers"]
    assert [r["clock"] for r in old.meta["ranks"]] == [r["clock"] for r in now.meta["ranks"]]


def test_kineto_ranks_merge_by_epoch_and_plot_one_group_per_rank(tmp_path):
    tls = [ctl.load(f"tests/data/kineto/trace_filter/sampled_rank-{r}.json.gz")
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
    assert rank_of_device(tl).tolist() == [0, 1]


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


def _meta(tl: Timeline, **fields) -> Timeline:
    return tl.replace(meta={**tl.meta, **fields})


@pytest.mark.parametrize("change, words", [
    (lambda tls: [_meta(tls[0], run_id="a"), _meta(tls[1], run_id="b")],
     "they name different run ids (rank 0: 'a', rank 1: 'b')"),
    (lambda tls: [tls[0], _meta(tls[1], world_size=4)],
     "they name different world sizes (rank 0: 2, rank 1: 4)"),
    (lambda tls: [tls[0], _meta(tls[1], start_epoch_ns=tls[1].meta["start_epoch_ns"]
                                + 3600 * 10 ** 9)],
     "they were recorded at different times (rank 0's recording ended 3,600 s before "
     "rank 1's began"),
])
def test_recordings_of_different_runs_are_refused_unless_forced(tmp_path, change, words):
    tls = change(fake_ranks(3, 2, n=6))
    with pytest.raises(CutimelineError, match="not the ranks of one run") as info:
        ctl.merge(tls)
    assert words in str(info.value) and "force=True" in str(info.value)
    tl = ctl.merge(tls, force=True)
    assert any("Merged with force=True" in w and words in w for w in tl.warnings)
    tl.save(tmp_path / "m.ctl")
    assert ctl.load(tmp_path / "m.ctl").warnings == tl.warnings


def test_merge_checks_a_timeline_it_is_handed_and_carries_its_warnings():
    tls = fake_ranks(3, 2, n=6)
    bad = tls[1].replace(ops=tls[1].ops.replace(thread=np.full(len(tls[1].ops), -5)))
    with pytest.raises(CutimelineError, match=r"merge's Timeline 1 .*ops.thread of row 0 "
                                              r"is -5"):
        ctl.merge([tls[0], bad])
    noted = _meta(tls[1], import_warnings=["3 kernel events have no numeric 'ts'."])
    tl = ctl.merge([tls[0], noted])
    assert tl.warnings == ("rank 1: 3 kernel events have no numeric 'ts'.",)


def test_the_command_merges_different_runs_only_with_force(tmp_path):
    from cutimeline.cli import main
    tls = fake_ranks(3, 2, n=6)
    _meta(tls[0], run_id="a").save(tmp_path / "rank-0.ctl")
    _meta(tls[1], run_id="b").save(tmp_path / "rank-1.ctl")
    assert main(["-q", "merge", str(tmp_path), "-o", str(tmp_path / "m.ctl")]) == 2
    assert main(["-q", "merge", str(tmp_path), "-o", str(tmp_path / "m.ctl"),
                 "--force"]) == 0
