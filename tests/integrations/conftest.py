"""Fixtures of the integrations' tests: a small recording on the simulated
GPU, and W&B in offline mode writing only under the test's folder."""

import sys

import pytest
import torch
from torch import nn

import cutimeline as ctl


@pytest.fixture(scope="session")
def recorded():
    """Three steps of a small model trained on a simulated H100 (``.cuda()``
    code mapped to it): (Timeline, Report)."""
    gpu = ctl.SimGPU("h100")
    with gpu.as_cuda():
        model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with ctl.record(device=gpu) as rec:
            for _ in range(3):
                x = torch.randn(32, 128, device="cuda")
                y = torch.randint(0, 10, (32,), device="cuda")
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
    return rec.timeline, ctl.analyze(rec.timeline)


@pytest.fixture(scope="session")
def wandb_home(tmp_path_factory):
    """W&B offline for the session, its run folders, cache and settings under
    one folder (wandb reads them once per process: at its first run)."""
    home = tmp_path_factory.mktemp("wandb-home")
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in (("WANDB_DIR", ""), ("WANDB_CACHE_DIR", "cache"),
                         ("WANDB_DATA_DIR", "data"), ("WANDB_CONFIG_DIR", "config")):
            mp.setenv(var, str(home / sub))
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("WANDB_CONSOLE", "off")
        yield home


@pytest.fixture
def offline_wandb(wandb_home):
    """The offline W&B folder (``readback.wandb_run(folder, run_id)`` reads a
    run there); a run still active at the test's end is finished."""
    yield wandb_home
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()


@pytest.fixture
def fresh_accelerate():
    """accelerate keeps its state for the process, as the HF Trainer's runs
    do through it: each run starts afresh."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()
