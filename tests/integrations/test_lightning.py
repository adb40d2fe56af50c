"""cutimeline/integrations/lightning.py: ``Trainer(profiler=CutimelineProfiler())``
on a Lightning fit run on the simulated GPU records the steps asked for,
writes the .ctl and logs it to the Trainer's W&B (offline) and TensorBoard
loggers; and the misuse errors."""

import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import SpanKind
from readback import tensorboard_events, tensorboard_scalars, wandb_run


def _fit(steps, profiler, loggers, root, accumulate=1, fail_at=None):
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))

        def training_step(self, batch, batch_idx):
            if batch_idx == fail_at:
                raise ValueError("the user's bug")
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    n = 16 * steps * accumulate
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))
    trainer = L.Trainer(max_steps=steps, profiler=profiler, logger=loggers,
                        default_root_dir=str(root), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        accumulate_grad_batches=accumulate)
    trainer.fit(Classifier(), DataLoader(data, batch_size=16))
    return trainer


def test_a_fit_on_the_simulated_gpu_logs_its_steps_to_wandb_and_tensorboard(
        offline_wandb, tmp_path):
    pytest.importorskip("lightning", reason="pip install 'cutimeline[frameworks]'")
    pytest.importorskip("wandb", reason="pip install 'cutimeline[wandb]'")
    pytest.importorskip("tensorboard", reason="pip install 'cutimeline[tensorboard]'")
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    from cutimeline.integrations.lightning import CutimelineProfiler
    profiler = CutimelineProfiler(skip=1, steps=2, out_dir=tmp_path / "ctl")
    wandb_logger = WandbLogger(project="ctl-test", offline=True, save_dir=str(offline_wandb))
    tb_logger = TensorBoardLogger(str(tmp_path), name="tb")
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():  # the user's CUDA Trainer, unmodified, on the simulated GPU
        trainer = _fit(4, profiler, [tb_logger, wandb_logger], tmp_path)
    run_id = wandb_logger.experiment.id
    wandb_logger.experiment.finish()

    # steps 1 and 2 recorded, on the simulated GPU, and saved
    tl = ctl.load(tmp_path / "ctl" / "cutimeline-step-1-2.ctl")
    assert profiler.saved == str(tmp_path / "ctl" / "cutimeline-step-1-2.ctl")
    assert tl.meta["steps"] == [1, 2] and tl.step_numbers().tolist() == [1, 2]
    assert "simulated" in tl.meta["device_name"] and len(tl.gpu) > 20
    assert int((tl.spans.kind == SpanKind.OPTIMIZER).sum()) == 2
    verdict = profiler.report.judgement.verdict.value
    assert profiler.summary().splitlines()[1].startswith(f"Verdict: {verdict}")
    assert trainer.global_step == 4  # training went on after the recording

    # W&B: the summary fields and the artifact, in the logger's run
    got = wandb_run(offline_wandb, run_id)
    assert got["summary"]["cutimeline/verdict"] == verdict
    assert got["artifacts"][f"cutimeline-{run_id}"][0] == "cutimeline"
    # TensorBoard: one point per recorded step, at its global step
    acc = tensorboard_events(tb_logger.log_dir)
    step_ms = tensorboard_scalars(acc, "cutimeline/step_ms")
    assert sorted(step_ms) == [1, 2]
    assert [step_ms[1], step_ms[2]] == pytest.approx(profiler.report.steps["duration_ns"] / 1e6)


def test_accumulated_batches_are_one_step_and_without_loggers_it_only_saves(tmp_path):
    pytest.importorskip("lightning", reason="pip install 'cutimeline[frameworks]'")
    from cutimeline.integrations.lightning import CutimelineProfiler
    profiler = CutimelineProfiler(skip=0, steps=1)
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        _fit(2, profiler, False, tmp_path, accumulate=2)
    tl = ctl.load(tmp_path / "cutimeline-step-0-0.ctl")  # the Trainer's folder
    assert tl.step_numbers().tolist() == [0]
    # two micro-batches, one optimizer step
    assert int((tl.spans.kind == SpanKind.OPTIMIZER).sum()) == 1
    assert len([n for n in tl.decode(tl.ops.name) if n == "aten::addmm"]) == 4


def test_a_fit_that_raises_keeps_what_was_recorded_and_its_error(tmp_path):
    pytest.importorskip("lightning", reason="pip install 'cutimeline[frameworks]'")
    from cutimeline.integrations.lightning import CutimelineProfiler
    profiler = CutimelineProfiler(skip=1, steps=5)
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        with pytest.raises(ValueError, match="the user's bug"):
            _fit(6, profiler, False, tmp_path, fail_at=3)
    # steps 1 and 2 ended, step 3 raised in its forward: saved with what it holds
    assert profiler.saved == str(tmp_path / "cutimeline-step-1-3.ctl")
    assert ctl.load(profiler.saved).step_numbers().tolist()[:2] == [1, 2]
    with ctl.record(device="cpu"):  # nothing of the recording is left installed
        pass


def test_misuse_is_one_sentence_naming_what_to_pass(tmp_path):
    pytest.importorskip("lightning", reason="pip install 'cutimeline[frameworks]'")
    from cutimeline.integrations.lightning import CutimelineProfiler
    with pytest.raises(CutimelineError, match=r"CutimelineProfiler\(steps=0\) must be a "
                                              r"whole number of steps ≥ 1"):
        CutimelineProfiler(steps=0)
    with pytest.raises(CutimelineError, match=r"CutimelineProfiler\(device='tpu'\)"):
        CutimelineProfiler(device="tpu")
    # a simulated GPU with no CUDA mapped to it: the Trainer would train on the CPU
    with pytest.raises(CutimelineError, match=r"CUDA is not mapped here.*gpu.as_cuda\(\)"):
        _fit(2, CutimelineProfiler(device="sim"), False, tmp_path)


def test_without_lightning_the_error_says_what_to_install(monkeypatch):
    import cutimeline.integrations.lightning as module
    monkeypatch.delitem(module.__dict__, "CutimelineProfiler", raising=False)
    monkeypatch.setitem(sys.modules, "lightning.pytorch.profilers", None)
    with pytest.raises(CutimelineError, match=r"needs the lightning package.*"
                                              r"pip install 'cutimeline\[frameworks\]'"):
        module.CutimelineProfiler
