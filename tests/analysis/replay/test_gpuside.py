"""gpuside.py and gpuwork.py: the GPU-side what-if edits, each prediction set
against the same loop recorded with the fix on a SimGPU; what the roofline
reads of each gpu row; and where a Timeline cannot be priced."""

import time

import numpy as np
import pytest
import torch
from torch import nn

import cutimeline as ctl
from cutimeline.analysis.replay.gpuside import PASSES, gpu_edit
from cutimeline.analysis.replay.gpuwork import MATMUL, pricing, rows_of, signature
from cutimeline.analysis.replay.predictions import steady

META = torch.device("meta")


def mlp_loop(*, tf32=False, fused=False, steps=5, hidden=2048, batch=4096,
             python_s=0.0):
    """A meta-tensor MLP trained with AdamW on a SimGPU, fp32 matmuls on
    TF32 cores or not (``torch.set_float32_matmul_precision``)."""
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        model = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(),
                              nn.Linear(4 * hidden, hidden), nn.LayerNorm(hidden)).to(META)
        opt = torch.optim.AdamW(model.parameters(), fused=fused or None)
        x = torch.randn(batch, hidden, device=META)
        with ctl.record(device=ctl.SimGPU("h100", seed=1)) as rec:
            for _ in range(steps):
                loss = model(x).square().mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if python_s:  # the host's own work: pure Python, by CPU time
                    end = time.thread_time() + python_s
                    while time.thread_time() < end:
                        pass
    finally:
        torch.set_float32_matmul_precision("highest")
    return ctl.analyze(rec.timeline)


def step_ns(rep):
    d = rep.steps["predicted_ns"] if rep.compensation is not None else rep.steps["duration_ns"]
    return float(np.median(d[1:]))


def predicted_ns(rep, edit):
    p = next(q for q in rep.what_if() if q.edit.name == edit)
    return float(np.median(steady(p.steps)["predicted_ns"]))


@pytest.fixture(scope="module")
def fp32():
    return mlp_loop()


def test_tf32_predicts_the_loop_run_on_tf32(fp32):
    after = mlp_loop(tf32=True)
    got = predicted_ns(fp32, "tf32")
    assert got < 0.7 * step_ns(fp32)  # fp32 → TF32 tensor cores: a large gain
    assert abs(got / step_ns(after) - 1) < 0.10


def test_fused_optimizer_predicts_the_fused_loop(fp32):
    after = mlp_loop(fused=True)
    names = set(after.timeline.to_pandas("ops")["name"])
    assert any("_fused_adamw" in n for n in names)
    got = predicted_ns(fp32, "fused_optimizer")
    assert got < step_ns(fp32)
    assert abs(got / step_ns(after) - 1) < 0.05


def test_the_gpu_bound_verdict_names_the_best_gpu_side_fix(fp32):
    v = fp32.to_dict()["verdict"]
    assert v["verdict"] == "GPU-bound"
    best = max((p for p in fp32.what_if() if p.edit.cause == "gpu"), key=lambda p: p.gain)
    assert v["fix"]["edit"] == best.edit.name and v["gain"] == pytest.approx(best.gain)
    first = fp32.summary().splitlines()[0]
    assert f"{best.edit.remedy} would save a predicted" in first
    assert "matmuls are" in first and "at fp32" in first
    assert "top GPU work: aten::" in fp32.summary()
    assert "TFLOP/s" in fp32.summary()


def test_a_host_bound_loop_stays_host_bound():
    rep = mlp_loop(hidden=256, batch=64, python_s=0.02)
    v = rep.to_dict()["verdict"]
    assert v["verdict"] != "GPU-bound"
    for p in rep.what_if():
        if p.edit.cause == "gpu":  # faster GPU work: the host still takes its time
            assert p.gain < 0.05


def test_an_edit_that_has_nothing_to_change_does_not_apply():
    torch.set_float32_matmul_precision("high")
    try:
        w = torch.randn(1024, 1024, device=META)
        with ctl.record(device=ctl.SimGPU("h100")) as rec:
            for _ in range(3):
                (torch.randn(1024, 1024, device=META).bfloat16() @ w.bfloat16()).sum()
                rec.step()
    finally:
        torch.set_float32_matmul_precision("highest")
    names = {p.edit.name for p in ctl.analyze(rec.timeline).what_if()}
    assert "tf32" not in names and "bf16" not in names and "fused_optimizer" not in names


def test_compile_fuses_a_chain_of_elementwise_ops():
    x0 = torch.randn(4096, 4096, device=META)
    w = torch.randn(4096, 4096, device=META)
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        for _ in range(3):
            x = x0 @ w
            x = ((x * 2 + 1).relu() - 0.5).sigmoid()  # five kernels over 64 MiB each
            x @ w
            rec.step()
    tl = rec.timeline
    ch = gpu_edit(tl, "compile")
    ops = tl.to_pandas("ops")
    gone = set(ops["name"][ch.drop_ops])
    assert gone == {"aten::add.Tensor", "aten::relu", "aten::sub.Tensor", "aten::sigmoid"}
    assert ch.drop_ops.sum() == 4 * 3
    g = tl.to_pandas("gpu")
    first = ops["name"].values[g["op"].values] == "aten::mul.Tensor"
    # five passes of read + write become one: about a fifth of their time
    dur = (g["end_ns"] - g["begin_ns"]).values
    chain = np.isin(ops["name"].values[g["op"].values],
                    ["aten::mul.Tensor", "aten::add.Tensor", "aten::relu", "aten::sub.Tensor",
                     "aten::sigmoid"])
    fused = (dur[first] * ch.scale[first]).sum()
    assert fused == pytest.approx(dur[chain].sum() / 5, rel=0.1)
    assert len(ch.cut_b) == 12 and (ch.cut_e > ch.cut_b).all()


def test_what_each_row_is():
    assert signature("f32[512,256], bf16[10], f32[]") == (512 * 256 * 4 + 20 + 4,
                                                          512 * 256 * 4 + 4, 512 * 256 * 4,
                                                          512 * 256, "fp32")
    assert signature("c10::BFloat16[8,512]")[4] == "bf16"
    w = torch.randn(512, 256, device=META)
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        y = torch.randn(64, 512, device=META) @ w
        y.relu()
    tl = rec.timeline
    r = rows_of(tl)
    names = tl.to_pandas("ops")["name"].values[r.op]
    mm = names == "aten::mm"
    assert r.family[mm][0] == MATMUL and r.flops[mm][0] == 2 * 64 * 512 * 256
    assert r.weight[mm][0] == 512 * 256 and r.precision[mm][0] == "fp32"
    assert r.family[names == "aten::relu"][0] == 0


def test_a_gpu_the_table_does_not_know_cannot_be_priced():
    w = torch.randn(4096, 4096, device=META)
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        for _ in range(4):
            x = torch.randn(8192, 4096, device=META) @ w
            x @ w
            rec.step()
    tl = rec.timeline
    meta = {k: v for k, v in tl.meta.items() if k != "sim"}
    meta["device_name"] = "Mystery Accelerator 9000"
    odd = tl.replace(meta=meta)
    why = pricing(odd)
    assert isinstance(why, str) and "Mystery Accelerator 9000" in why
    rep = ctl.analyze(odd)
    assert not any(p.edit.cause == "gpu" for p in rep.what_if())
    text = rep.summary()
    assert text.startswith("Verdict: GPU-bound — the GPU computes")
    assert ("GPU-side fixes (tf32, bf16, fused_optimizer, compile) not predicted: the GPU "
            "'Mystery Accelerator 9000' is not in cutimeline's table") in text
    # a GPU the table knows is priced from its datasheet
    meta["device_name"] = "NVIDIA A100-SXM4-80GB"
    assert not isinstance(pricing(tl.replace(meta=meta)), str)


def test_fused_optimizer_traffic_per_optimizer():
    assert PASSES["adamw"] == PASSES["adam"] == 7 and PASSES["sgd"] == 5


@pytest.mark.parametrize("benchmark", [False, True])
def test_a_convolution_net_gets_advice_without_a_prediction(benchmark):
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = benchmark
    try:
        m = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 64, 3, padding=1)).to(META)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with ctl.record(device=ctl.SimGPU("h100")) as rec:
            for _ in range(4):
                m(torch.randn(256, 64, 56, 56, device=META)).sum().backward()
                opt.step()
    finally:
        torch.backends.cudnn.benchmark = saved
    text = ctl.analyze(rec.timeline).summary()
    assert rec.timeline.meta["cudnn_benchmark"] is benchmark
    assert "convolutions are" in text and "channels_last" in text
    assert ("cudnn.benchmark = True" in text) is (not benchmark)
    assert text.count("advice: no prediction") == (1 if benchmark else 2)
