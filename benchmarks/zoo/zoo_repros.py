"""The minimal reproductions of ``zoo_failures.md``: torch and SimGPU only.

    python benchmarks/zoo/zoo_repros.py [NAME ...]

Each function reproduces one failure the model zoo (``bench_zoo.py``) ran
into, in a few lines on ``meta`` tensors, and returns what it saw; the
runner prints ``ok`` when SimGPU behaved as CUDA would (the failure is
fixed) and ``FAILS`` with what happened otherwise. Hangs are reproduced
with a bounded loop, never an endless one. No third-party library.
"""

from __future__ import annotations

import sys
import traceback
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import cutimeline as ctl

META = torch.device("meta")


def sim() -> ctl.SimGPU:
    return ctl.SimGPU("h100", seed=0)


def gpu_us(tl: ctl.Timeline, name: str) -> float:
    """Total GPU time (µs) of the recorded ops named ``name``."""
    ot = ctl.analyze(tl).op_table()
    return float(ot["gpu_total_ns"][ot["name"] == name].sum()) / 1e3


def host_copy_in_inference_mode() -> str | None:
    """``.tolist()`` / ``.cpu()`` / ``.to("cpu")`` of a simulated tensor
    under ``torch.inference_mode()`` (a serving loop reading its tokens)."""
    with ctl.record(device=sim()), torch.inference_mode():
        tok = torch.randn(4, 32000, device=META).argmax(-1)
        try:
            tok.tolist()
        except NotImplementedError as e:
            return f"NotImplementedError: {e}"
    return None


def item_in_inference_mode() -> str | None:
    """``.item()`` (and ``float()``, ``int()``, ``math.exp(t)``) of a
    simulated tensor under ``torch.inference_mode()`` (an evaluation loop
    summing its loss)."""
    with ctl.record(device=sim()), torch.inference_mode():
        loss = torch.randn(8, device=META).mean()
        try:
            loss.item()
        except RuntimeError as e:
            return f"RuntimeError: {e}"
    return None


def stop_test_never_true() -> str | None:
    """transformers' ``generate()`` stops when ``bool(unfinished_sequences.max()
    == 0)``; once MaxLengthCriteria marks every sequence done that reads
    True on CUDA. On SimGPU the read is always False, so decoding goes on
    (bounded here at 100 tokens)."""
    with ctl.record(device=sim()), torch.no_grad():
        unfinished = torch.ones(1, dtype=torch.long, device=META)
        for n in range(1, 101):
            done = torch.full((1,), n >= 32, dtype=torch.bool, device=META)  # max_new_tokens=32
            unfinished = unfinished & ~done
            if bool(unfinished.max() == 0):
                return None if n == 32 else f"stopped after {n} tokens, not 32"
    return "did not stop after 100 tokens (max_new_tokens=32)"


def format_spec_on_tensor() -> str | None:
    """``'{:6.2f}'.format(t)`` of a simulated 0-dim tensor
    (pytorch/examples imagenet's ``AverageMeter.__str__``)."""
    with ctl.record(device=sim()):
        acc1 = torch.randn(1, device=META).mul_(100.0)[0]
        try:
            "{:6.2f}".format(acc1)
        except TypeError as e:
            return f"TypeError: {e}"
    return None


def print_does_not_sync() -> str | None:
    """``print(loss)`` of a simulated tensor: on CUDA it copies the value
    to the host (a sync) and prints it; on SimGPU it prints
    ``tensor(..., device='meta', size=())`` and records no sync."""
    def syncs(read) -> int:
        with ctl.record(device=sim()) as rec:
            read(torch.randn(8, device=META).sum())
        return len(rec.timeline.syncs)
    base, printed = syncs(lambda t: None), syncs(lambda t: str(t))
    if printed == base:
        return f"str(tensor) recorded no sync ({printed} syncs, as with no read at all)"
    return None


def linear_in_inference_mode() -> str | None:
    """Under ``torch.inference_mode()`` composite ops (``aten::linear``,
    ``layer_norm``, ``dropout``) reach the recorder undecomposed and are
    priced without their FLOPs: a 4096² ``F.linear`` (137 GFLOP, 2.06 ms
    at 67 TFLOP/s under ``no_grad``) costs tens of µs, and an eval-mode
    ``F.dropout`` (no kernel on CUDA) is priced as a kernel."""
    out = {}
    for mode, ctx in (("no_grad", torch.no_grad), ("inference", torch.inference_mode)):
        with ctl.record(device=sim()) as rec, ctx():
            a = torch.randn(4096, 4096, device=META)
            F.linear(a, torch.randn(4096, 4096, device=META))
            F.dropout(a, 0.1, training=False)
        out[mode] = (gpu_us(rec.timeline, "aten::mm") + gpu_us(rec.timeline, "aten::linear"),
                     gpu_us(rec.timeline, "aten::dropout"))
    (mm_ng, _), (mm_inf, drop_inf) = out["no_grad"], out["inference"]
    if mm_inf < 0.5 * mm_ng or drop_inf > 0:
        return (f"linear {mm_inf:.0f} µs under inference_mode vs {mm_ng:.0f} µs under "
                f"no_grad; eval-mode dropout priced {drop_inf:.0f} µs")
    return None


def lstm_per_time_step() -> str | None:
    """``nn.LSTM`` on meta runs its per-time-step decomposition: a 2-layer
    LSTM over 35 steps dispatches ≈ 1,400 ops where CUDA dispatches one
    cuDNN RNN call (word_language_model's model)."""
    lstm = torch.nn.LSTM(200, 200, 2).to(META)
    with ctl.record(device=sim()) as rec:
        lstm(torch.randn(35, 20, 200, device=META))
    n = len(rec.timeline.ops)
    return f"{n} ops for one LSTM forward (CUDA: one _cudnn_rnn)" if n > 50 else None


def autocast_does_nothing() -> str | None:
    """``torch.autocast("cuda", dtype=torch.bfloat16)`` leaves meta tensors
    in fp32: an AMP training loop is simulated at fp32 cost. Fixed when the
    matmul runs in bf16, or when the recording says plainly that it did not
    (a warning, and ``meta["warnings"]``)."""
    with ctl.record(device=sim()) as rec, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" from autocast
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = torch.randn(64, 64, device=META) @ torch.randn(64, 64, device=META)
    said = any("autocast" in w for w in rec.timeline.meta.get("warnings", []))
    return None if y.dtype == torch.bfloat16 or said else \
        f"matmul under autocast gives {y.dtype}, and nothing says so"


def compiled_graph_is_free() -> str | None:
    """``torch.compile`` on meta: the compiled graphs are recorded as
    ``inductor::graph_N`` rows with no GPU time, and nothing says so."""
    m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).to(META)
    cm = torch.compile(m)
    with ctl.record(device=sim()) as rec, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            cm(torch.randn(4096, 1024, device=META)).sum().backward()
    ot = ctl.analyze(rec.timeline).op_table()
    graphs = np.char.startswith(ot["name"].astype(str), "inductor::")
    said = [str(w.message)[:80] for w in seen if "compile" in str(w.message).lower()
            and "simulat" in str(w.message).lower()]
    if graphs.any() and ot["gpu_total_ns"][graphs].sum() == 0 and not said:
        return (f"{int(ot['count'][graphs].sum())} compiled-graph calls, 0 µs of GPU work "
                f"(eager: ≈ 6 × 34 GFLOP of matmuls a call), no warning")
    return None


REPROS = {f.__name__: f for f in (
    host_copy_in_inference_mode, item_in_inference_mode, stop_test_never_true,
    format_spec_on_tensor, print_does_not_sync, linear_in_inference_mode,
    lstm_per_time_step, autocast_does_nothing, compiled_graph_is_free)}


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    names = argv or list(REPROS)
    bad = 0
    for name in names:
        try:
            got = REPROS[name]()
        except Exception as e:  # noqa: BLE001 -- an unexpected error is a failure too
            got = traceback.format_exception_only(type(e), e)[-1].strip()
        bad += got is not None
        print(f"{name:30s} {'ok' if got is None else 'FAILS: ' + got}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
