"""cutimeline/integrations/tensorboard.py: a recording and a schedule's
windows logged to TensorBoard, read back with tensorboard's event reader;
and the misuse errors."""

import sys

import pytest
import torch
from torch import nn

import cutimeline as ctl
from cutimeline import CutimelineError
from readback import tensorboard_events, tensorboard_scalars, tensorboard_text

CAUSES = ("data", "sync", "launch", "host", "dependency", "unknown", "communication")


def _writer(folder):
    pytest.importorskip("tensorboard", reason="pip install 'cutimeline[tensorboard]'")
    from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter(str(folder))


def test_a_report_becomes_a_figure_a_summary_and_a_point_per_step(recorded, tmp_path):
    import cutimeline.integrations.tensorboard as ctl_tb
    tl, rep = recorded
    writer = _writer(tmp_path)
    assert ctl_tb.log(rep, writer, step=100) is rep
    writer.close()
    acc = tensorboard_events(tmp_path)
    s = rep.steps
    # one point per recorded step, from the step given on
    step_ms = tensorboard_scalars(acc, "cutimeline/step_ms")
    assert sorted(step_ms) == [100, 101, 102]
    assert [step_ms[k] for k in (100, 101, 102)] == pytest.approx(s["duration_ns"] / 1e6)
    busy = tensorboard_scalars(acc, "cutimeline/gpu_busy")
    assert [busy[k] for k in (100, 101, 102)] == pytest.approx(s["busy_frac"])
    idle = {c: tensorboard_scalars(acc, f"cutimeline/idle_{c}") for c in CAUSES}
    for i, k in enumerate((100, 101, 102)):
        assert idle["launch"][k] == pytest.approx(s["launch_ns"][i] / s["duration_ns"][i])
        # busy and the idle causes share the step between them
        assert busy[k] + sum(idle[c][k] for c in CAUSES) == pytest.approx(1, abs=1e-4)
    mfu = tensorboard_scalars(acc, "cutimeline/mfu")
    assert [mfu[k] for k in (100, 101, 102)] == pytest.approx(s["mfu"])
    # the figure and the summary, at the step given
    (image,) = acc.Images("cutimeline/timeline")
    assert image.step == 100 and image.encoded_image_string[:4] == b"\x89PNG"
    assert image.width > 500
    text = tensorboard_text(acc, "cutimeline/summary")
    assert text.lstrip().startswith("Verdict: " + rep.judgement.verdict.value)


def test_each_schedule_window_is_logged_at_its_own_steps(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install 'cutimeline[tensorboard]'")
    import cutimeline.integrations.tensorboard as ctl_tb
    gpu = ctl.SimGPU("h100")
    handler = ctl_tb.trace_handler(tmp_path / "tb")
    with gpu.as_cuda():
        model = nn.Linear(64, 64).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        plan = ctl.schedule(wait=1, warmup=0, active=1, repeat=2)
        with ctl.record(device=gpu, schedule=plan, on_trace_ready=handler) as rec:
            for _ in range(4):
                model(torch.randn(8, 64, device="cuda")).sum().backward()
                opt.step()
                opt.zero_grad()
    assert [tl.meta["steps"] for tl in rec.timelines_ready] == [[1, 1], [3, 3]]
    acc = tensorboard_events(tmp_path / "tb")
    assert sorted(tensorboard_scalars(acc, "cutimeline/step_ms")) == [1, 3]
    assert [i.step for i in acc.Images("cutimeline/timeline")] == [1, 3]
    for a in (1, 3):  # each window saved beside its events
        assert ctl.load(tmp_path / "tb" / f"step-{a}-{a}.ctl").step_numbers().tolist() == [a]


def test_misuse_is_one_sentence_naming_what_to_pass(recorded, tmp_path):
    import cutimeline.integrations.tensorboard as ctl_tb
    rep = recorded[1]
    with pytest.raises(CutimelineError, match="needs a TensorBoard writer .*not dict"):
        ctl_tb.log(rep, {"run": 1})  # e.g. a W&B run, or a dict of logs
    with pytest.raises(CutimelineError, match="needs a TensorBoard writer .*not object"):
        ctl_tb.trace_handler(object())
    writer = _writer(tmp_path)
    with pytest.raises(CutimelineError, match="takes a Report .* or a Timeline .*not str"):
        ctl_tb.log("run.ctl", writer)
    with pytest.raises(CutimelineError, match=r"step='3'\) must be a whole step number"):
        ctl_tb.log(rep, writer, step="3")
    handler = ctl_tb.trace_handler(writer)
    with pytest.raises(CutimelineError, match="windows of ctl.record\\(schedule=...\\)"):
        handler(ctl.Timeline(meta={}))
    writer.close()


def test_without_tensorboard_the_error_says_what_to_install(recorded, monkeypatch, tmp_path):
    import cutimeline.integrations.tensorboard as ctl_tb
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(CutimelineError, match=r"needs the tensorboard package.*"
                                              r"pip install 'cutimeline\[tensorboard\]'"):
        ctl_tb.trace_handler(tmp_path)
