"""thresholds.py: the analysis's policy figures in one object (issue 47),
read by every module that decides with them, and stated in README.md and
docs/ARCHITECTURE.md as they are in code."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re

import pytest

from cutimeline.analysis import analyzer, summary
from cutimeline.analysis.idle import activity
from cutimeline.analysis.replay import costs, edits, gpuwork, replaying
from cutimeline.analysis.tables import oneoff
from cutimeline.analysis.thresholds import THRESHOLDS, Thresholds
from cutimeline.analysis.verdicts import causal, margins

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text().split())   # lines joined

#: each old name, where it is read, and the field it is
NAMES = [(margins, "GPU_BOUND_AT", "gpu_bound_at"), (margins, "MIXED_MARGIN", "mixed_margin"),
         (causal, "MIN_GAIN", "min_gain"), (causal, "EXPOSED_SHARE", "exposed_share"),
         (activity, "HOST_GAP_NS", "host_gap_ns"), (activity, "SYNC_SLACK_NS", "sync_slack_ns"),
         (replaying, "WAIT_LATENCY_NS", "wait_latency_ns"),
         (costs, "REPEAT_WINDOW", "repeat_window"), (edits, "STAGED_LAUNCHES", "staged_launches"),
         (gpuwork, "CONV_ADVICE_SHARE", "conv_advice_share"),
         (oneoff, "FACTOR", "oneoff_factor"), (oneoff, "SHARE", "oneoff_share"),
         (summary, "SHOWN_SHARE", "shown_share"), (summary, "WARM_UP_SHARE", "warm_up_share")]


def test_every_field_is_read_under_its_old_name_and_none_is_left_out():
    for module, name, field in NAMES:
        assert getattr(module, name) == getattr(THRESHOLDS, field), name
    assert {f for _, _, f in NAMES} == {f.name for f in dataclasses.fields(Thresholds)}


def test_the_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        THRESHOLDS.gpu_bound_at = 0.5


def test_every_field_says_why():
    source = inspect.getsource(Thresholds)
    for f in dataclasses.fields(Thresholds):
        before = source[:source.index(f"    {f.name}: ")].rstrip().splitlines()
        assert before[-1].strip().startswith("#:"), f"{f.name} has no reason above it"


def test_analyze_takes_them_as_defaults():
    params = inspect.signature(analyzer.analyze).parameters
    for name in ("gpu_bound_at", "mixed_margin", "host_gap_ns", "sync_slack_ns"):
        assert params[name].default == getattr(THRESHOLDS, name), name


def test_the_readme_states_the_figures_in_code():
    t = THRESHOLDS
    gpu = re.search(r"GPU-bound when the GPU computes (\d+)% of the step \(`gpu_bound_at`\) "
                    r"and no host-side fix saves (\d+)%", README)
    assert gpu, "README.md no longer states gpu_bound_at where this test reads it"
    assert int(gpu[1]) == round(100 * t.gpu_bound_at)
    assert int(gpu[2]) == round(100 * (1 - t.gpu_bound_at))
    mixed = re.search(r"the best two fixes gain within (\d+)% of each other \(`mixed_margin`\)",
                      README)
    assert mixed and int(mixed[1]) == round(100 * t.mixed_margin)
    assert re.search(r"`unknown` when no fix saves (\d+)%", README)[1] == \
        f"{round(100 * t.min_gain)}"
    gap = re.search(r"op-free stretches of at least `host_gap_ns`, (\d+) µs", README)
    assert gap and int(gap[1]) * 1000 == t.host_gap_ns


def test_the_architecture_table_states_the_figures_in_code():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)`[^|]*\| ([^|]+) \|", doc, re.M))
    t = THRESHOLDS
    assert rows["GPU_BOUND_AT"].strip() == f"{t.gpu_bound_at}"
    assert rows["MIXED_MARGIN"].startswith(f"{t.mixed_margin} ")
    assert rows["MIN_GAIN"].startswith(f"{t.min_gain} ")
    assert rows["EXPOSED_SHARE"].startswith(f"{t.exposed_share} ")
    assert rows["HOST_GAP_NS"].strip() == f"{t.host_gap_ns // 1000} µs"
    assert rows["SYNC_SLACK_NS"].strip() == f"{t.sync_slack_ns // 1000} µs"
    assert rows["WAIT_LATENCY_NS"].strip() == f"{t.wait_latency_ns // 1000} µs"
    assert rows["REPEAT_WINDOW"].strip() == f"{t.repeat_window} ops"
    assert rows["STAGED_LAUNCHES"].strip() == f"{t.staged_launches}"
    assert rows["CONV_ADVICE_SHARE"].strip() == f"{t.conv_advice_share}"
