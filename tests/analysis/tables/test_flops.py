"""flops.py: FLOPs per op and step, achieved TFLOP/s and MFU against a given
or looked-up peak, on a hand-built matmul loop with known FLOPs and step
times."""

import math

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables.flops import _precision_of, op_precision
from cutimeline.errors import CutimelineError
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

MM = 2 * 1024 ** 3          # FLOPs of a 1024³ matmul
SMALL = 1_000_000           # FLOPs of the fp32 addmm, which ran no kernel
STEP_NS = 1_000_000
PER_STEP = MM + SMALL       # every step's FLOPs; steps 1-3 last 1 ms each
RATE = PER_STEP / 1e-3      # FLOP/s


def matmul_loop(meta=None, mm_sig="bf16[1024,1024], bf16[1024,1024]", steps=4,
                mm_name="aten::mm", addmm_device=0):
    """Per step (1 ms): aten::mm (500 µs on the GPU, ``MM`` FLOPs), an
    elementwise aten::add (10 µs, no FLOPs) ending the step's GPU work 540
    µs in, and an fp32 aten::addmm of ``SMALL`` FLOPs with no gpu row, on
    device ``addmm_device`` (NONE: the host)."""
    st = Strings()
    ops, gpu, spans, flops = [], [], [], []
    for k in range(steps):
        t0 = STEP_NS * (k + 1)
        spans.append((t0, t0 + STEP_NS, k))
        for name, sig, at, g, f in ((mm_name, mm_sig, 10_000, (20_000, 520_000), MM),
                                    ("aten::add", "f32[1024,1024], f32[1024,1024]", 13_000,
                                     (530_000, 540_000), 0),
                                    ("aten::addmm", "f32[16], f32[16,16], f32[16,16]", 16_000,
                                     None, SMALL)):
            ops.append((name, sig, t0 + at, t0 + at + 2_000))
            if g is not None:
                gpu.append((len(ops) - 1, t0 + at, t0 + g[0], t0 + g[1]))
            if f:
                flops.append((len(ops) - 1, f))
    n = len(ops)
    tables = {
        "ops": {"seq": np.arange(n), "thread": np.zeros(n), "name": [st.intern(r[0]) for r in ops],
                "shapes": [st.intern(r[1]) for r in ops], "host_begin_ns": [r[2] for r in ops],
                "host_end_ns": [r[3] for r in ops], "flags": np.full(n, int(OpFlag.LAUNCH)),
                "device": [addmm_device if r[0] == "aten::addmm" else 0 for r in ops],
                "stream": np.zeros(n)},
        "gpu": {"op": [r[0] for r in gpu], "device": np.zeros(len(gpu)),
                "stream": np.zeros(len(gpu)), "name": [st.intern("k")] * len(gpu),
                "kind": [GpuKind.KERNEL] * len(gpu), "launch_ns": [r[1] for r in gpu],
                "begin_ns": [r[2] for r in gpu], "end_ns": [r[3] for r in gpu]},
        "spans": {"kind": [int(SpanKind.STEP)] * steps, "name": [st.intern("step")] * steps,
                  "begin_ns": [r[0] for r in spans], "end_ns": [r[1] for r in spans],
                  "number": [r[2] for r in spans], "thread": np.zeros(steps),
                  "depth": np.zeros(steps)},
        "flops": {"op": [r[0] for r in flops], "flops": [float(r[1]) for r in flops]}}
    return Timeline(tables, st, {"aligned": True, "source": "handmade", **(meta or {})})


def test_steps_get_flops_achieved_rate_and_mfu_for_a_given_peak():
    rep = ctl.analyze(matmul_loop(), peak_flops=100e12)
    s = rep.steps
    assert s["flops"].tolist() == [PER_STEP] * 4
    assert s["duration_ns"][1:].tolist() == [STEP_NS] * 3
    assert s["tflop_per_s"][1:] == pytest.approx([RATE / 1e12] * 3, rel=1e-12)
    assert s["mfu"][1:] == pytest.approx([RATE / 100e12] * 3, rel=1e-12)
    assert rep.overall["flops"] == 4 * PER_STEP
    c = rep.compute()
    assert c["steps"] == "steps 1–3, all but the first"
    assert c["flops"] == 3 * PER_STEP and c["duration_ns"] == 3 * STEP_NS
    assert c["flop_per_s"] == pytest.approx(RATE, rel=1e-12)
    assert c["mfu"] == pytest.approx(RATE / 100e12, rel=1e-12)
    assert c["precision"] == "bf16" and c["by_precision"] == {"bf16": 4 * MM,
                                                              "fp32": 4 * SMALL}
    line = [x for x in rep.summary().splitlines() if x.startswith("Compute")]
    assert line == ["Compute (steps 1–3, all but the first): 2.15 TFLOP/s achieved, MFU "
                    "2.1% of the given peak 100 TFLOP/s; most FLOPs in aten::mm (100%, "
                    "4.29 TFLOP/s on its GPU time)"]
    assert rep.to_dict()["compute"]["mfu"] == pytest.approx(RATE / 100e12)


def test_host_ops_flops_are_not_the_gpus():
    rep = ctl.analyze(matmul_loop(addmm_device=NONE), peak_flops=100e12)
    assert rep.steps["flops"].tolist() == [MM] * 4
    assert rep.compute()["by_precision"] == {"bf16": 4 * MM}
    assert {r["name"]: r["flops"] for r in rep.op_table()}["aten::addmm"] == 4 * SMALL
    # an imported trace says of no op where it ran: all count
    tl = matmul_loop()
    every = tl.replace(ops=tl.ops.replace(device=np.full(len(tl.ops), NONE)))
    assert ctl.analyze(every).steps["flops"].tolist() == [PER_STEP] * 4


def test_the_op_table_gets_flops_and_the_rate_on_its_gpu_time():
    ops = ctl.analyze(matmul_loop()).op_table()
    row = {r["name"]: r for r in ops}
    assert row["aten::mm"]["flops"] == 4 * MM
    # 4 × 500 µs of GPU time
    assert row["aten::mm"]["tflop_per_s"] == pytest.approx(4 * MM / 2e-3 / 1e12, rel=1e-12)
    assert row["aten::add"]["flops"] == 0 and row["aten::add"]["tflop_per_s"] == 0
    assert row["aten::addmm"]["flops"] == 4 * SMALL
    assert math.isnan(row["aten::addmm"]["tflop_per_s"])  # no GPU time to divide by


@pytest.mark.parametrize("meta, label, peak", [
    ({"device_name": "NVIDIA H100 80GB HBM3"}, "H100 SXM bf16 dense 989.5 TFLOP/s", 989.5e12),
    ({"device_name": "NVIDIA A100-SXM4-80GB"}, "A100 bf16 dense 312 TFLOP/s", 312e12),
    ({"device_name": "NVIDIA H100 PCIe"}, "H100 PCIe bf16 dense 756.5 TFLOP/s", 756.5e12),
    ({"simulated": True, "device_name": "SimGPU h100 (simulated)",
      "sim": {"profile": "h100", "peak_flops": {"bf16": 989.5e12, "fp32": 67e12}}},
     "SimGPU h100 (simulated) bf16 dense 989.5 TFLOP/s", 989.5e12),
])
def test_the_peak_is_looked_up_from_the_device(meta, label, peak):
    c = ctl.analyze(matmul_loop(meta)).compute()
    assert c["label"] == label and c["peak_flop_per_s"] == peak
    assert c["mfu"] == pytest.approx(RATE / peak, rel=1e-12)
    assert c["why"] == ""


@pytest.mark.parametrize("meta, peak, why", [
    ({"device_name": "NVIDIA A10G"}, None,
     "no MFU: the device 'NVIDIA A10G' is not in cutimeline's table of GPU peaks"),
    ({}, None, "no MFU: the Timeline names no device and no peak was given"),
    ({"device_name": "NVIDIA H100 80GB HBM3"}, {"fp32": 67e12},
     "no MFU: the given peak_flops has no bf16 peak"),
    ({"device_name": "Tesla V100-SXM2-32GB"}, None, "no MFU: V100 SXM2 has no bf16 peak"),
])
def test_without_a_peak_the_rate_comes_without_mfu_and_says_why(meta, peak, why):
    rep = ctl.analyze(matmul_loop(meta), peak_flops=peak)
    c = rep.compute()
    assert c["mfu"] is None and c["why"].startswith(why)
    assert "peak_flops=..." in c["why"]
    assert np.isnan(rep.steps["mfu"]).all()
    line = [x for x in rep.summary().splitlines() if x.startswith("Compute")][0]
    assert line.startswith("Compute (steps 1–3, all but the first): 2.15 TFLOP/s achieved; "
                           + why)


def test_fp32_matmuls_use_the_fp32_peak_unless_tf32_is_allowed():
    f32 = "f32[1024,1024], f32[1024,1024]"
    h100 = {"device_name": "NVIDIA H100 80GB HBM3"}
    c = ctl.analyze(matmul_loop(h100, mm_sig=f32)).compute()
    assert c["precision"] == "fp32" and c["peak_flop_per_s"] == 67e12
    c = ctl.analyze(matmul_loop({**h100, "float32_matmul_precision": "high"},
                                mm_sig=f32)).compute()
    assert c["precision"] == "tf32" and c["peak_flop_per_s"] == 494.5e12
    # cuDNN convolutions may use TF32 by default
    c = ctl.analyze(matmul_loop(h100, mm_sig=f32, mm_name="aten::convolution")).compute()
    assert c["precision"] == "tf32"


@pytest.mark.parametrize("sig, precision", [
    ("bf16[8,512], bf16[512,512]", "bf16"), ("c10::BFloat16[8,512], c10::BFloat16[512]", "bf16"),
    ("float[32,3,224,224], float[64,3,7,7]", "fp32"), ("Scalar, c10::Half[4,4]", "fp16"),
    ("f64[2,2], f64[2,2]", "fp64"), ("float8_e4m3fn[16,16], float8_e4m3fn[16,16]", "fp8"),
    ("i64[4], f16[4,4]", "fp16"), ("long int[4]", ""), ("", ""),
])
def test_the_precision_is_the_first_floating_dtype_of_the_signature(sig, precision):
    assert _precision_of(sig) == precision


def test_op_precision_reads_each_signature_once_per_op():
    tl = matmul_loop()
    assert op_precision(tl, np.arange(3)).tolist() == ["bf16", "fp32", "fp32"]


def test_a_window_of_steps_counts_their_flops():
    rep = ctl.analyze(matmul_loop(), window=2, peak_flops={"bf16": 100e12})
    assert rep.steps["number"].tolist() == [2] and rep.steps["flops"].tolist() == [PER_STEP]
    assert rep.overall["flops"] == PER_STEP
    c = rep.compute()
    assert c["steps"] == "step 2" and c["mfu"] == pytest.approx(RATE / 100e12, rel=1e-12)
    assert c["label"] == "the given peak_flops bf16 dense 100 TFLOP/s"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "989e12", True, {"bf17": 1e12},
                                 {"bf16": 0}])
def test_a_bad_peak_is_a_sentence(bad):
    with pytest.raises(CutimelineError, match="peak_flops"):
        ctl.analyze(matmul_loop(), peak_flops=bad)
