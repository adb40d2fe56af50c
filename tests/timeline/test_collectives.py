"""collectives.py and the collectives table: files of format 4 load their
``meta["collectives"]`` as the table, the table round-trips a ``.ctl``
file, and a damaged one is refused with a sentence.

``tests/data/ctl/v4_collectives.ctl`` and ``v4_merged.ctl`` were written by
cutimeline at file format 4 (before the table): a gloo world of one
recording two steps of all_reduce, broadcast, reduce_scatter (its
completion unknown: gloo's has no future), barrier, a subgroup's
all_reduce, an async all_reduce and a functional one with its wait
(``record(out_dir=..., measure=False)``); and ``ctl.merge(fake_ranks(7,
2, n=6, slow=1, kinds=("all", "from_root", "to_root")))``.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import adversarial
import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.collectives import (ALL, COLUMNS, FROM_ROOT, KINDS, META_COLUMNS,
                                             TO_ROOT)
from cutimeline.timeline.schema import FORMAT_VERSION, NONE, SCHEMA, CollectiveKind

from handmade import assert_same, make_timeline

DATA = Path(__file__).parents[1] / "data" / "ctl"
RECORDED, MERGED = DATA / "v4_collectives.ctl", DATA / "v4_merged.ctl"


def _head(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("meta.json"))


def _rewrite(source: Path, path: Path, edit) -> Path:
    """``source`` with its meta.json head edited by ``edit(head)``."""
    with zipfile.ZipFile(source) as z:
        members = {n: z.read(n) for n in z.namelist()}
    head = json.loads(members["meta.json"])
    edit(head)
    members["meta.json"] = json.dumps(head).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    return path


def test_the_kinds_are_the_schema_enum_and_the_columns_the_table():
    assert KINDS == ("all", "from_root", "to_root", "send", "recv", "wait")
    assert [int(k) for k in CollectiveKind] == list(range(len(KINDS)))
    assert (ALL, FROM_ROOT, TO_ROOT) == (0, 1, 2)
    assert COLUMNS == tuple(c for c, _ in SCHEMA["collectives"])
    assert COLUMNS == ("op",) + META_COLUMNS[1:]


def test_a_format_4_recording_loads_its_meta_collectives_as_the_table():
    head = _head(RECORDED)
    assert head["format_version"] == 4
    old = head["meta"]["collectives"]
    tl = ctl.load(RECORDED)
    assert "collectives" not in tl.meta and tl.meta["groups"] == head["meta"]["groups"]
    c = tl.collectives
    assert len(c) == len(old["seq"]) == 14
    assert tl.ops.seq[c.op].tolist() == old["seq"]  # each row is its op's
    for col in META_COLUMNS[1:]:
        assert c[col].tolist() == old[col], col
    assert {col: c[col].dtype for col in COLUMNS} == dict(SCHEMA["collectives"])
    names = tl.decode(tl.ops.name[c.op])
    assert set(names) >= {"c10d::allreduce_", "c10d::broadcast_", "c10d::barrier"}
    assert (c.done_ns[names == "c10d::reduce_scatter_"] == NONE).all()  # gloo: no future
    kinds = tl.to_pandas("collectives")["kind"]
    assert set(kinds) == {"all", "from_root"}


def test_a_format_4_merge_loads_them_on_their_ranks():
    head = _head(MERGED)
    old = head["meta"]["collectives"]
    tl = ctl.load(MERGED)
    c = tl.collectives
    assert "collectives" not in tl.meta
    assert tl.ops.seq[c.op].tolist() == old["seq"]
    # the table keeps no rank: it is the op's thread's
    rank = np.asarray(tl.meta["thread_rank"])[tl.ops.thread[c.op]]
    assert rank.tolist() == old["rank"]
    for col in META_COLUMNS[1:]:
        assert c[col].tolist() == old[col], col


def test_the_table_round_trips_a_file_of_this_format(tmp_path):
    for source in (RECORDED, MERGED):
        tl = ctl.load(source)
        tl.save(tmp_path / "now.ctl")
        assert _head(tmp_path / "now.ctl")["format_version"] == FORMAT_VERSION == 5
        assert "collectives" not in _head(tmp_path / "now.ctl")["meta"]
        assert_same(tl, ctl.load(tmp_path / "now.ctl"))
    tl = make_timeline()  # every table filled
    assert len(tl.collectives)
    tl.save(tmp_path / "all.ctl")
    assert_same(tl, ctl.load(tmp_path / "all.ctl"))


def test_slices_and_kept_rows_keep_the_collectives_of_their_ops():
    tl = make_timeline(n=60)
    c = tl.collectives
    part = tl.slice_time(int(tl.ops.host_begin_ns[20]), int(tl.ops.host_end_ns[40]))
    kept = (c.op >= 20) & (c.op <= 40)
    assert len(part.collectives) == kept.sum()
    # each row still names its own op (renumbered): the same seq as before
    assert part.ops.seq[part.collectives.op].tolist() == tl.ops.seq[c.op[kept]].tolist()
    assert part.collectives.done_ns.tolist() == c.done_ns[kept].tolist()
    mask = np.ones(len(tl.ops), bool)
    mask[c.op[0]] = False
    fewer = tl.keep_rows(ops=mask)
    assert len(fewer.collectives) == len(c) - 1
    assert fewer.ops.seq[fewer.collectives.op].tolist() == tl.ops.seq[c.op[1:]].tolist()


def test_format_4_entries_whose_op_is_gone_are_left_out_and_rows_come_in_op_order(tmp_path):
    def edit(head):
        c = head["meta"]["collectives"]
        for col in META_COLUMNS:  # the first two swapped, and one of an op a slice left out
            c[col] = [c[col][1], c[col][0]] + c[col][2:] + [c[col][0]]
        c["seq"][-1] = 10 ** 6
    tl = ctl.load(_rewrite(RECORDED, tmp_path / "old.ctl", edit))
    want = _head(RECORDED)["meta"]["collectives"]
    assert tl.ops.seq[tl.collectives.op].tolist() == want["seq"]
    assert tl.collectives.done_ns.tolist() == want["done_ns"]


@pytest.mark.parametrize("damage, match", [
    (lambda c: c["kind"].__setitem__(0, 9), "kind 0 to 5"),
    (lambda c: c["peer"].pop(), "equally long lists"),
    (lambda c: c["done_ns"].__setitem__(0, 1.5), "lists of integers"),
    (lambda c: c["group"].__setitem__(0, "0"), "lists of integers"),
    (lambda c: c.pop("number"), "seq, group, kind, number, peer, done_ns"),
    (lambda c: c.update(seq=7), "equally long lists"),
])
def test_damaged_format_4_collectives_are_refused_with_a_sentence(tmp_path, damage, match):
    path = _rewrite(RECORDED, tmp_path / "old.ctl",
                    lambda h: damage(h["meta"]["collectives"]))
    with pytest.raises(CutimelineError, match=match) as info:
        ctl.load(path)
    text = str(info.value)
    assert text.startswith(str(path)) and "meta['collectives']" in text
    assert "record the run again" in text  # and what to do


def test_a_format_4_merge_whose_collectives_name_other_ranks_is_refused(tmp_path):
    path = _rewrite(MERGED, tmp_path / "old.ctl",
                    lambda h: h["meta"]["collectives"]["rank"].__setitem__(0, 1))
    with pytest.raises(CutimelineError, match=r"on rank 1, but that op's thread is rank "
                       r"0's \(meta\['thread_rank'\]\).*merge the rank files again"):
        ctl.load(path)


def test_a_format_4_file_without_collectives_loads_an_empty_table(tmp_path):
    path = _rewrite(RECORDED, tmp_path / "old.ctl",
                    lambda h: h["meta"].update(collectives=None))
    tl = ctl.load(path)
    assert not len(tl.collectives) and "collectives" not in tl.meta


def _column(name, fn):
    def edit(head):
        fn(head["manifest"]["columns"][name])
    return edit


def _saved(tmp_path, tl=None) -> Path:
    path = tmp_path / "now.ctl"
    (tl or make_timeline()).save(path)
    return path


@pytest.mark.parametrize("lie, match", [
    # a column whose values its dtype cannot hold
    (_column("collectives.peer", lambda e: e.update(first=10 ** 12)),
     r"collectives.peer holds values outside int32 .*where each must lie within "
     r"-2147483648..2147483647"),
    (_column("collectives.kind", lambda e: e.update(first=-3)), "outside uint8"),
    # references out of range
    (_column("collectives.op", lambda e: e.update(first=10 ** 6)),
     r"collectives.op refers to rows outside table 'ops' \(0..49\)"),
    (_column("collectives.op", lambda e: e.update(first=-1)),
     r"collectives.op of row 0 is -1, where it must be the row of its op"),
    (_column("collectives.group", lambda e: e.update(first=5)),
     r"collectives.group of row 0 is 5.*where it must be an index into meta\['groups'\] "
     r"\(which names 2 process groups\) or -1"),
    (_column("collectives.kind", lambda e: e.update(first=9)),
     r"collectives.kind holds codes it does not know \(such as 9\).*0 all, 1 from_root"),
    (_column("collectives.peer", lambda e: e.update(first=2 ** 20)),
     r"collectives.peer of row 0 is 1048576.*a global rank below 1,048,576 or -1"),
    (_column("collectives.done_ns", lambda e: e.update(first=2 ** 61)),
     r"its times run over .* days.*collectives.done_ns"),
    (lambda h: h["meta"].update(groups=None), r"meta\['groups'\] \(which names 0 process "
     r"groups\)"),
])
def test_a_damaged_collectives_table_is_refused_with_a_sentence(tmp_path, lie, match):
    path = _rewrite(_saved(tmp_path), tmp_path / "bad.ctl", lie)
    with pytest.raises(CutimelineError, match=match) as info:
        ctl.load(path)
    assert str(info.value).startswith(f"{path} is damaged")


def test_a_collectives_table_held_in_memory_is_checked_as_it_is_made():
    tl = make_timeline()
    with pytest.raises(CutimelineError, match=r"column collectives.op refers to rows "
                       r"outside table 'ops' \(0..49\): row 0 holds 50"):
        tl.replace(collectives=tl.collectives.replace(op=tl.collectives.op + 48))
    with pytest.raises(CutimelineError, match=r"collectives.kind must hold integers, not "
                       r"fractions"):
        ctl.Timeline({"collectives": {"kind": [0.5]}})
    with pytest.raises(CutimelineError, match=r"collectives.done_ns must hold integers "
                       r"\(nanoseconds\)"):
        ctl.Timeline({"collectives": {"done_ns": [np.nan]}})


def test_write_raw_files_with_a_negative_op_are_refused(tmp_path):
    tl = make_timeline()
    tables = {n: tl.table(n) for n in SCHEMA}
    tables["collectives"] = tl.collectives.replace(op=np.full(len(tl.collectives), NONE))
    path = tmp_path / "raw.ctl"
    path.write_bytes(adversarial.write_raw(tables, tl.strings, tl.meta))
    with pytest.raises(CutimelineError, match=r"collectives.op of row 0 is -1 \(and \d+ more "
                       r"rows\), where it must be the row of its op in table 'ops'"):
        ctl.load(path)


def test_the_memory_budget_counts_the_collectives_table(tmp_path):
    from cutimeline.timeline import budgets
    path = _saved(tmp_path)
    head = _head(path)
    rows, strings = head["manifest"]["rows"], head["manifest"]["strings"]
    assert rows["collectives"] == 7
    needed = budgets.timeline_bytes(rows, strings)
    without = budgets.timeline_bytes({**rows, "collectives": 0}, strings)
    assert needed - without == 7 * budgets.PEAK_PER_COLUMN_BYTE * 33  # 8+4+1+8+4+8 bytes a row
    with pytest.raises(CutimelineError, match=r"claims .*7 collectives\).*memory budget"):
        ctl.load(path, max_bytes=needed - 1)
    assert len(ctl.load(path, max_bytes=needed).collectives) == 7
