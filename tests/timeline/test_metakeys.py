"""Every meta key cutimeline writes is declared in ``timeline/metakeys.py``
(read from the source, and from the Timelines each producer makes), and a
declared key with a damaged value is refused at load."""

from __future__ import annotations

import ast
import json
import os
import warnings
from pathlib import Path

import pytest
import torch

import adversarial
import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline import invariants
from cutimeline.timeline.metakeys import KEYS, RETIRED, STRAGGLER_COLUMNS

from fakeranks import fake_ranks

ROOT = Path(ctl.__file__).parent
DATA = Path(__file__).parent.parent / "data"
#: folders whose ``meta`` is not a Timeline's (Comparison's settings)
NOT_TIMELINE_META = ("comparison",)
#: functions whose dict is the value of one key, not keys of meta
VALUES_OF_A_KEY = {"_pool_meta"}  # meta["cuda"]'s


def _is_meta(node: ast.AST) -> bool:
    """``meta``, ``self._meta``, ``tl.meta``, ``h.meta``, ..."""
    name = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("meta")


def _dict_keys(d: ast.AST) -> set[str]:
    """The string keys of a dict literal, of both of a conditional's, and
    of the dicts it spreads (``{**({"a": 1} if x else {"b": 2})}``)."""
    if isinstance(d, ast.IfExp):
        return _dict_keys(d.body) | _dict_keys(d.orelse)
    if not isinstance(d, ast.Dict):
        return set()
    return {k.value for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            } | {x for k, v in zip(d.keys, d.values) if k is None for x in _dict_keys(v)}


def _written(tree: ast.AST) -> set[str]:
    """String keys written into a meta in ``tree``: ``meta["k"] = ...``,
    ``meta.update(k=...)``, ``meta.setdefault("k", ...)``, ``dict(meta, k=...)``,
    a dict literal assigned to a meta, passed as ``meta=``, returned by a
    function named ``*meta``, or spreading ``**meta``."""
    keys: set[str] = set()
    funcs = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for f in funcs:
        if f.name.endswith("meta") and f.name not in VALUES_OF_A_KEY:
            for r in ast.walk(f):
                if isinstance(r, ast.Return) and r.value is not None:
                    keys |= _dict_keys(r.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and _is_meta(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute) and _is_meta(fn.value) and \
                    fn.attr in ("update", "setdefault"):
                keys |= {k.arg for k in node.keywords if k.arg}
                for a in node.args[:1]:
                    if isinstance(a, ast.Dict):
                        keys |= _dict_keys(a)
                    if fn.attr == "setdefault" and isinstance(a, ast.Constant):
                        keys.add(a.value)
            if isinstance(fn, ast.Name) and fn.id == "dict" and node.args and \
                    _is_meta(node.args[0]):
                keys |= {k.arg for k in node.keywords if k.arg}
            for k in node.keywords:
                if k.arg == "meta":
                    keys |= _dict_keys(k.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node.value, ast.Dict) and any(map(_is_meta, targets)):
                keys |= _dict_keys(node.value)
        elif isinstance(node, ast.Dict) and any(
                k is None and _is_meta(v) for k, v in zip(node.keys, node.values)):
            keys |= _dict_keys(node)
    return keys


def test_every_key_the_source_writes_is_declared():
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_TIMELINE_META:
            continue
        for key in _written(ast.parse(path.read_text())):
            found.setdefault(key, []).append(str(rel))
    undeclared = {k: v for k, v in found.items() if k not in KEYS}
    assert not undeclared, f"meta keys written but not declared in metakeys.KEYS: {undeclared}"
    # and the declaration holds no key nobody writes
    assert set(KEYS) <= set(found), f"declared, written nowhere: {set(KEYS) - set(found)}"


def test_every_declaration_names_a_writer_that_exists_and_says_what_it_means():
    for k in KEYS.values():
        assert k.meaning and k.what and "\n" not in k.meaning, k.name
        for w in k.writer.replace("(", ",").replace(")", ",").split(","):
            w = w.strip()
            if w:
                assert (ROOT / w).is_file(), f"{k.name}: writer {w} is not a module"


def _assert_declared(tl: ctl.Timeline, label: str) -> None:
    undeclared = set(tl.meta) - set(KEYS)
    assert not undeclared, f"{label} writes undeclared meta keys {sorted(undeclared)}"
    invariants.check_meta(tl.meta, label)


def test_every_key_the_producers_write_is_declared_and_fits(tmp_path, monkeypatch):
    warnings.simplefilter("ignore")
    made: list[tuple[str, ctl.Timeline]] = []
    x = torch.randn(32, 32, device="meta")
    with ctl.record(device=ctl.SimGPU()) as rec:
        for _ in range(3):
            (x @ x).sum()
    made.append(("SimGPU recording", rec.timeline))
    made.append(("slice", rec.timeline.slice_time(rec.timeline.start_ns, rec.timeline.end_ns)))
    for r in (0, 1):  # two ranks of one run, each to its file
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", "2")
        with ctl.record(out_dir=tmp_path / "run") as rec:
            torch.randn(8).sum()
        made.append((f"CPU rank {r} with out_dir", rec.timeline))
    made.append(("merge of files", ctl.merge(tmp_path / "run")))
    made.append(("merge with collectives", ctl.merge(fake_ranks(1))))
    with ctl.record(schedule=ctl.schedule(wait=0, warmup=1, active=2)) as srec:
        for _ in range(4):
            torch.randn(4).sum()
            srec.step()
    made += [("schedule window", t) for t in srec.timelines_ready]
    made.append(("kineto import",
                 ctl.load(DATA / "kineto" / "trace_filter" / "sampled_rank-0.json.gz")))
    for label, tl in made:
        _assert_declared(tl, label)
        tl.save(tmp_path / "back.ctl")
        _assert_declared(ctl.load(tmp_path / "back.ctl"), f"{label}, saved and loaded")
    merged = made[5][1]
    assert set(STRAGGLER_COLUMNS) <= set(merged.meta["stragglers"])
    assert len(merged.collectives) > 0 and "collectives" not in merged.meta


def _refused(tmp_path, **fields) -> str:
    path = tmp_path / "bad.ctl"
    path.write_bytes(adversarial.ctl_meta(**fields))
    with pytest.raises(CutimelineError) as info:
        ctl.load(path)
    message = str(info.value)
    assert message.startswith(f"{path} is damaged: its meta[")
    assert "\n" not in message
    return message


@pytest.mark.parametrize("key, value, words", [
    ("aligned", "yes", ('"yes", not true or false',)),
    ("start_epoch_ns", 2 ** 70, ("not a time in integer ns",)),
    ("truncated", 1, ("not true or false", "max_ops/max_bytes")),
    ("devices", {"0": "a"}, ("a list of objects",)),
    ("sim", {"peak_flops": {"fp32": "fast"}}, ("SimGPU",)),
    ("window", [5, 1], ("[begin, end]",)),
    ("groups", [{"name": "0", "ranks": [-1]}], ('"ranks"',)),
    ("stragglers", {"step": [-1], "rank": [0], "held_ns": [5], "last": [1],
                    "collectives": [2]}, ("late_mean_ns",)),
    ("ranks", [{"rank": "zero"}], ("one per rank",)),
    ("overhead_calibrations", [[1, 2]], ("triples",)),
])
def test_a_declared_key_with_a_damaged_value_is_refused_at_load(tmp_path, key, value, words):
    message = _refused(tmp_path, **{key: value})
    assert f"meta[{key!r}] is {json.dumps(value)[:20]}" in message, message
    for w in words:
        assert w in message, message


def test_a_retired_key_is_refused_at_load_and_in_a_timeline_made(tmp_path):
    old = {"seq": [1], "group": [0], "kind": [0], "number": [0], "peer": [-1],
           "done_ns": [-1]}  # a file of this format keeps them in the collectives table
    assert set(RETIRED) == {"collectives"} and not set(RETIRED) & set(KEYS)
    with pytest.raises(CutimelineError) as info:
        ctl.Timeline(meta={"collectives": old})
    for message in (_refused(tmp_path, collectives=old), str(info.value)):
        for w in ("its meta['collectives'] is where files of formats 1-4 kept the "
                  "collectives", "collectives table", "tables={'collectives'"):
            assert w in message, message
    assert not len(ctl.Timeline(meta={"collectives": None}).collectives)  # None: absent


def test_unknown_keys_and_none_are_kept_as_they_are(tmp_path):
    path = tmp_path / "future.ctl"
    path.write_bytes(adversarial.ctl_meta(from_a_newer_version={"x": [1]}, device_name=None))
    tl = ctl.load(path)
    assert tl.meta["from_a_newer_version"] == {"x": [1]}
    assert tl.meta["device_name"] is None


def test_a_long_value_is_cut_in_the_message(tmp_path):
    message = _refused(tmp_path, warnings=["x" * 500, 3])
    assert "..." in message and len(message) < 400
    assert os.fspath(tmp_path) in message
