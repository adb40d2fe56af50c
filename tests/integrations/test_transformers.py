"""cutimeline/integrations/transformers.py: ``CutimelineCallback`` in a Hugging
Face ``Trainer`` run on the simulated GPU records the steps asked for,
writes the .ctl and logs it to the ``report_to`` targets it knows, W&B
(offline) and TensorBoard; and the misuse errors."""

import os
import sys

import pytest
import torch
from torch.utils.data import Dataset

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import SpanKind
from readback import tensorboard_events, tensorboard_scalars, wandb_run


class Tokens(Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 256, (n, 32))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(steps, callback, out, report_to, accumulate=1):
    """transformers.Trainer on a 1-layer GPT-2 made from its config (no
    download) over random tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    config = GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4,
                             max_steps=steps, report_to=report_to, save_strategy="no",
                             disable_tqdm=True, logging_steps=1,
                             gradient_accumulation_steps=accumulate)
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args,
                      train_dataset=Tokens(4 * steps * accumulate),
                      callbacks=callback if isinstance(callback, list) else [callback])
    trainer.train()
    return trainer


def _need():
    pytest.importorskip("transformers", reason="pip install 'cutimeline[frameworks]'")
    pytest.importorskip("accelerate", reason="the HF Trainer needs it: "
                                             "pip install 'cutimeline[frameworks]'")


def test_a_trainer_on_the_simulated_gpu_logs_its_steps_to_wandb_and_tensorboard(
        offline_wandb, fresh_accelerate, tmp_path, capsys, monkeypatch):
    _need()
    wandb = pytest.importorskip("wandb", reason="pip install 'cutimeline[wandb]'")
    pytest.importorskip("tensorboard", reason="pip install 'cutimeline[tensorboard]'")
    from cutimeline.integrations.transformers import CutimelineCallback
    monkeypatch.setenv("WANDB_PROJECT", "ctl-test")
    callback = CutimelineCallback(skip=1, steps=2)
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():  # the user's CUDA Trainer, unmodified, on the simulated GPU
        trainer = _train(4, callback, tmp_path, ["wandb", "tensorboard"])
    run_id = wandb.run.id
    wandb.finish()

    path = os.path.join(tmp_path, "cutimeline-step-1-2.ctl")  # args.output_dir
    assert callback.saved == path
    tl = ctl.load(path)
    assert tl.meta["steps"] == [1, 2] and tl.step_numbers().tolist() == [1, 2]
    assert "simulated" in tl.meta["device_name"] and len(tl.gpu) > 20
    assert int((tl.spans.kind == SpanKind.OPTIMIZER).sum()) == 2
    assert trainer.state.global_step == 4
    verdict = callback.report.judgement.verdict.value
    assert f"Verdict: {verdict}" in capsys.readouterr().out

    got = wandb_run(offline_wandb, run_id)  # the run the Trainer's WandbCallback began
    assert got["summary"]["cutimeline/verdict"] == verdict
    assert "train/loss" in got["summary"]  # the Trainer's own logs, beside ours
    assert got["artifacts"][f"cutimeline-{run_id}"][0] == "cutimeline"
    acc = tensorboard_events(tmp_path / "runs" / "cutimeline")
    step_ms = tensorboard_scalars(acc, "cutimeline/step_ms")
    assert sorted(step_ms) == [1, 2]  # at the recorded steps' global steps
    assert [step_ms[1], step_ms[2]] == pytest.approx(callback.report.steps["duration_ns"] / 1e6)


def test_accumulated_micro_batches_are_one_step(fresh_accelerate, tmp_path, monkeypatch):
    _need()
    pytest.importorskip("tensorboard", reason="pip install 'cutimeline[tensorboard]'")
    from cutimeline.integrations.transformers import CutimelineCallback
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    callback = CutimelineCallback(skip=0, steps=1, out_dir=tmp_path / "ctl")
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        _train(2, callback, tmp_path / "out", "tensorboard", accumulate=2)
    tl = ctl.load(tmp_path / "ctl" / "cutimeline-step-0-0.ctl")
    assert tl.step_numbers().tolist() == [0]
    assert int((tl.spans.kind == SpanKind.OPTIMIZER).sum()) == 1
    # into the folder the Trainer's TensorBoardCallback writes to
    acc = tensorboard_events(tmp_path / "tb")
    assert sorted(tensorboard_scalars(acc, "cutimeline/step_ms")) == [0]
    assert "train/loss" in acc.Tags()["scalars"]


def test_a_train_that_raises_is_ended_by_hand(fresh_accelerate, tmp_path):
    _need()
    from transformers import TrainerCallback

    from cutimeline.integrations.transformers import CutimelineCallback

    class Bug(TrainerCallback):  # the user's code failing in step 2
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise ValueError("the user's bug")

    callback = CutimelineCallback(skip=1, steps=5)
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        with pytest.raises(ValueError, match="the user's bug"):
            try:
                _train(6, [callback, Bug()], tmp_path, [])
            except ValueError as error:
                assert callback.end(error) == callback.saved
                raise
    assert ctl.load(callback.saved).step_numbers().tolist()[:1] == [1]
    with ctl.record(device="cpu"):  # nothing of the recording is left installed
        pass


def test_misuse_is_one_sentence_naming_what_to_pass(fresh_accelerate, tmp_path):
    _need()
    from cutimeline.integrations.transformers import CutimelineCallback
    with pytest.raises(CutimelineError, match=r"CutimelineCallback\(skip=-1\) must be a "
                                              r"whole number of steps ≥ 0"):
        CutimelineCallback(skip=-1)
    with pytest.raises(CutimelineError, match=r"CutimelineCallback\(out_dir=3\) must be "
                                              r"a folder"):
        CutimelineCallback(out_dir=3)
    with pytest.raises(CutimelineError, match=r"CUDA is not mapped here.*gpu.as_cuda\(\)"):
        _train(1, CutimelineCallback(device=ctl.SimGPU()), tmp_path, [])


def test_without_transformers_the_error_says_what_to_install(monkeypatch):
    import cutimeline.integrations.transformers as module
    monkeypatch.delitem(module.__dict__, "CutimelineCallback", raising=False)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(CutimelineError, match=r"needs the transformers package.*"
                                              r"pip install 'cutimeline\[frameworks\]'"):
        module.CutimelineCallback
