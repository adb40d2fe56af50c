"""The merged run in ``analyze(merged).summary()`` (analysis/ranks_report.py,
fed by merger.py and straggler.slowest): missing, partial, errored and
truncated ranks, and the straggler per step, on synthetic ranks."""

from __future__ import annotations

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.ranks_report import run_notes
from cutimeline.dist.straggler import stragglers
from cutimeline.text import fmt_ns
from cutimeline.timeline.schema import NONE

from fakeranks import fake_ranks


def _with(tl, **meta):
    return tl.replace(meta={**tl.meta, **meta})


def _damaged_run():
    """Four ranks of which rank 2 left no file, rank 1 was SIGTERM'd, rank 3
    raised and rank 0 was cut at max_ops."""
    rs = fake_ranks(5, world=4, n=12, slow=2)
    rs[0] = _with(rs[0], truncated=True, truncated_by="spans", max_ops=1000)
    rs[1] = _with(rs[1], partial="SIGTERM at step 7")
    rs[3] = _with(rs[3], error="RuntimeError: boom")
    return [rs[0], rs[1], rs[3]]


def test_merge_names_missing_partial_errored_and_truncated_ranks():
    tl = ctl.merge(_damaged_run())
    m = tl.meta
    assert m["world_size"] == 4 and m["missing_ranks"] == [2]
    assert m["partial_ranks"] == [1] and m["errors"] == [3] and m["truncated"]
    by = {r["rank"]: r for r in m["ranks"]}
    assert by[1]["partial"] == "SIGTERM at step 7" and by[3]["error"] == "RuntimeError: boom"
    assert by[0]["truncated"] and by[0]["truncated_by"] == "spans" and by[0]["max_ops"] == 1000
    assert by[3]["partial"] is None and not by[1]["truncated"]
    summary = ctl.analyze(tl).summary()
    assert ("ranks: 3 of 4 present; rank 2 missing; rank 1 partial (SIGTERM at step 7); "
            "rank 3 raised RuntimeError: boom; rank 0 truncated at max_ops (1,000 spans)"
            ) in summary
    assert "TRUNCATED: rank 0 (1,000 spans) reached max_ops" in summary


def test_the_straggler_per_step_is_in_the_summary():
    tl = ctl.merge(fake_ranks(2, world=4, n=12, slow=2, delay_ns=3_000_000))
    found = tl.meta["stragglers"]
    s = stragglers(tl)
    top = s[s["order"] == 1]
    assert found["step"] == top["step"].tolist() and found["rank"] == [2] * 13
    assert found["held_ns"] == top["held_ns"].tolist() and found["steps"] == 12
    assert found["step"][0] == NONE  # the whole run first
    summary = ctl.analyze(tl).summary()
    lines = [line for line in summary.splitlines() if line.startswith("straggler: ")]
    assert len(lines) == 1 and "ranks: 4 of 4 present" in summary
    line = lines[0]
    whole = top[top["step"] == NONE][0]
    assert line.startswith(f"straggler: rank 2 held the others up "
                           f"{fmt_ns(whole['held_ns'])} in all, last "
                           f"to arrive at 12 of 12 collectives")
    per = top["held_ns"][top["step"] != NONE]
    assert (f"slowest rank per step: rank 2 in 12 of 12 steps, by "
            f"{fmt_ns(np.median(per))} median") in line
    # each step's delay is about the 3 ms the slow rank sleeps
    assert np.all(np.abs(per - 3_000_000) < 500_000)


def test_a_balanced_run_names_no_straggler_and_every_rank_present():
    rs = fake_ranks(3, world=2, n=6)
    tl = ctl.merge(rs)
    notes = run_notes(tl)
    assert notes[0] == "ranks: 2 of 2 present"
    assert all(not n.startswith("straggler") or "rank" in n for n in notes)


def test_the_notes_survive_the_merged_file(tmp_path):
    tl = ctl.merge(_damaged_run())
    tl.save(tmp_path / "merged.ctl")
    back = ctl.load(tmp_path / "merged.ctl")
    assert run_notes(back) == run_notes(tl) and len(run_notes(tl)) == 3


def test_a_single_rank_file_says_it_is_partial_or_errored():
    tl = fake_ranks(4, world=1, n=4)[0]
    assert run_notes(tl) == []
    notes = run_notes(_with(tl, partial="KeyboardInterrupt at step 2"))
    assert notes == ["PARTIAL: the recording was cut short (KeyboardInterrupt at step 2); "
                     "it holds what was recorded until then."]
    assert "raised RuntimeError: x" in run_notes(_with(tl, error="RuntimeError: x"))[0]
    assert run_notes(_with(tl, truncated=True, truncated_by="ops", max_ops=10))[0].startswith(
        "TRUNCATED: the recording stopped at max_ops (10 ops); nothing after that point")
    assert "TRUNCATED" in ctl.analyze(_with(tl, truncated=True)).summary()


@pytest.mark.parametrize("junk", [None, "x", 2 ** 70, [1, "a"], {"step": [1, 2]}, [[]],
                                  {"step": [-1], "rank": ["a"], "held_ns": [1],
                                   "last": [1], "collectives": [1]}])
def test_meta_of_the_wrong_type_reads_as_absent(junk):
    tl = ctl.merge(fake_ranks(6, world=2, n=4))
    for key in ("ranks", "stragglers", "missing_ranks", "world_size", "partial", "error",
                "truncated_by", "max_ops"):
        notes = run_notes(_with(tl, **{key: junk}))
        assert all(isinstance(n, str) for n in notes)
    ranks = [{"rank": junk, "partial": junk, "error": junk, "truncated": junk}]
    assert all(isinstance(n, str) for n in run_notes(_with(tl, ranks=ranks)))


def test_an_unbelievable_world_size_is_refused():
    # it would list 10^12 missing ranks; the door refuses it (invariants.META)
    rs = fake_ranks(7, world=2, n=4)
    rs[1] = _with(rs[1], world_size=10 ** 12)
    with pytest.raises(ctl.CutimelineError, match=r"Timeline 1 .*meta\['world_size'\] is "
                       r"1000000000000, not a world size from 1 to 1048576"):
        ctl.merge(rs)


def test_many_missing_ranks_read_as_runs():
    from cutimeline.dist.straggler import describe
    rs = fake_ranks(7, world=2, n=4)
    rs = [_with(r, world_size=4096) for r in rs]
    tl = ctl.merge(rs)
    assert len(tl.meta["missing_ranks"]) == 4094
    assert "ranks 2–4095: missing (no file; the world size is 4096)" in describe(tl)
    assert "ranks: 2 of 4096 present; ranks 2–4095 missing" in ctl.analyze(tl).summary()


def test_the_cli_description_names_partial_and_missing_ranks_too():
    from cutimeline.dist.straggler import describe
    text = describe(ctl.merge(_damaged_run()))
    assert "raised RuntimeError: boom" in text and "partial (SIGTERM at step 7)" in text
    assert "rank 2: missing (no file; the world size is 4)" in text
