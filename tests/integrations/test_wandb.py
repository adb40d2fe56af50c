"""cutimeline/integrations/wandb.py: a recording logged to a W&B run in
offline mode, read back from the run's folder; and the misuse errors."""

import gzip
import json
import os
import shutil
import sys

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline import CutimelineError
from readback import wandb_run


def test_a_recording_lands_in_the_run(recorded, offline_wandb, tmp_path):
    wandb = pytest.importorskip("wandb", reason="pip install 'cutimeline[wandb]'")
    import cutimeline.integrations.wandb as ctl_wandb
    tl, rep = recorded
    run = wandb.init(project="ctl-test")
    assert ctl_wandb.log(tl) is not None  # a Timeline: analysed there
    run.finish()
    got = wandb_run(offline_wandb, run.id)

    # the summary fields, as the report says them
    s = got["summary"]
    said = rep.to_dict()["verdict"]
    steady = rep.steps[1:]
    assert s["cutimeline/verdict"] == said["verdict"] == rep.judgement.verdict.value
    assert s["cutimeline/fix"] == said["change"] and s["cutimeline/fix"]
    assert s["cutimeline/predicted_gain"] == pytest.approx(said["gain"])
    assert s["cutimeline/step_ms"] == pytest.approx(steady["duration_ns"].mean() / 1e6)
    assert s["cutimeline/gpu_busy"] == pytest.approx(
        steady["busy_ns"].sum() / steady["duration_ns"].sum())
    assert 0 < s["cutimeline/mfu"] == pytest.approx(rep.compute()["mfu"])

    # the figure, the summary text and the step table, as logged media
    row = next(r for r in got["history"] if "cutimeline/timeline/path" in r)
    png = os.path.join(got["files"], row["cutimeline/timeline/path"])
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    html = open(os.path.join(got["files"], row["cutimeline/summary/path"])).read()
    assert "Verdict: " + said["verdict"] in html and said["change"].split(":")[0] in html
    table = json.load(open(os.path.join(got["files"], row["cutimeline/steps/path"])))
    assert table["columns"][:6] == ["step", "verdict", "fix", "gain", "step_ms", "gpu_busy"]
    assert [r[0] for r in table["data"]] == [0, 1, 2]
    assert [r[1] for r in table["data"]] == list(rep.steps["verdict"])
    assert [r[4] for r in table["data"]] == pytest.approx(rep.steps["duration_ns"] / 1e6)

    # the artifact: the .ctl (it loads as the same recording) and the Perfetto trace
    kind, files = got["artifacts"][f"cutimeline-{run.id}"]
    assert kind == "cutimeline" and sorted(files) == ["cutimeline.ctl", "cutimeline.json.gz"]
    shutil.copy(files["cutimeline.ctl"], tmp_path / "back.ctl")
    back = ctl.load(tmp_path / "back.ctl")
    assert np.array_equal(back.ops.host_begin_ns, tl.ops.host_begin_ns)
    assert len(back.gpu) == len(tl.gpu) > 0
    trace = json.loads(gzip.decompress(open(files["cutimeline.json.gz"], "rb").read()))
    assert len(trace["traceEvents"]) > len(tl.ops)


def test_it_logs_to_the_run_it_is_given_under_its_name(recorded, offline_wandb):
    wandb = pytest.importorskip("wandb", reason="pip install 'cutimeline[wandb]'")
    import cutimeline.integrations.wandb as ctl_wandb
    run = wandb.init(project="ctl-test")
    ctl_wandb.log(recorded[1], run=run, name="eval")
    run.finish()
    got = wandb_run(offline_wandb, run.id)
    assert got["summary"]["eval/verdict"] == recorded[1].judgement.verdict.value
    assert not any(k.startswith("cutimeline/") for k in got["summary"])
    assert got["artifacts"][f"eval-{run.id}"][0] == "cutimeline"


def test_misuse_is_one_sentence_naming_what_to_pass(recorded, offline_wandb):
    wandb = pytest.importorskip("wandb", reason="pip install 'cutimeline[wandb]'")
    import cutimeline.integrations.wandb as ctl_wandb
    assert wandb.run is None
    with pytest.raises(CutimelineError, match=r"no active W&B run; call wandb.init\(\)"):
        ctl_wandb.log(recorded[1])
    run = wandb.init(project="ctl-test")
    with pytest.raises(CutimelineError, match="takes a Report .* or a Timeline .*not dict"):
        ctl_wandb.log(recorded[1].to_dict())
    with pytest.raises(CutimelineError, match=r"run=object object\) needs a W&B run: "
                                              r"what wandb.init\(\) returns"):
        ctl_wandb.log(recorded[1], run=object())  # e.g. a Lightning WandbLogger itself
    with pytest.raises(CutimelineError, match="name='a/b'"):
        ctl_wandb.log(recorded[1], name="a/b")
    run.finish()
    with pytest.raises(CutimelineError, match=f"run {run.id}, which has finished"):
        ctl_wandb.log(recorded[1], run=run)


def test_without_wandb_the_error_says_what_to_install(recorded, monkeypatch):
    import cutimeline.integrations.wandb as ctl_wandb
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails
    with pytest.raises(CutimelineError, match=r"needs the wandb package.*"
                                              r"pip install 'cutimeline\[wandb\]'"):
        ctl_wandb.log(recorded[1])
