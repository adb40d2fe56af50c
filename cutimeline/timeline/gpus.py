"""Known GPUs' peak dense FLOP/s per precision, looked up by device name.

The analysis divides achieved FLOP/s by these peaks for MFU; the simulated
GPU's profiles (``devices/sim/roofline.py``) hold the same datasheet figures.
It lives beside the Timeline because both stages read it and the stages
import one way: ``devices`` and ``analysis`` may both import ``timeline``.

Precisions: "fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8". Every
figure is *dense*: NVIDIA's datasheets print tensor-core rates "with
sparsity" (marked *), twice the dense rate; the table holds the halves.
"fp64" is the FP64 tensor-core rate where the GPU has one (cuBLAS runs fp64
matmuls on it), "fp32" the plain (non-tensor) FP32 rate, "tf32" the TF32
tensor-core rate. A precision the GPU has no units for is left out (a V100
has no bf16 or tf32 tensor cores), so its MFU is unknown rather than wrong.
The A10G is left out: NVIDIA publishes no datasheet for it (it is not an A10).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GpuPeaks", "GPUS", "PRECISIONS", "gpu_named", "LAUNCH_QUEUE", "EVENT_TICK_NS"]

# -- CUDA's behaviour, one definition (the replay, SimGPU and the CUDA device
# all model it, and ``devices`` and ``analysis`` may both import this module)
#: pending launches per stream at which a launch blocks the host: CUDA's
#: launch queue holds about 1,024 (the replay's default for a recording
#: whose device wrote no ``meta["launch_queue"]``; SimGPU's default)
LAUNCH_QUEUE = 1024
#: the tick of CUDA's event clock: cudaEventElapsedTime has "a resolution
#: of around 0.5 microseconds" (CUDA runtime API reference); SimGPU's
#: clock has the same quantum by default
EVENT_TICK_NS = 500

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
T = 1e12


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU's datasheet peaks: ``label`` (as a report names it),
    ``peak_flops`` (precision → dense FLOP/s), ``source`` (the datasheet),
    ``bandwidth`` (its memory bandwidth, bytes/s, from the same datasheet;
    what the GPU-side what-if edits price memory-bound kernels by)."""
    label: str
    peak_flops: dict[str, float]
    source: str
    bandwidth: float = 0.0


def _peaks(fp64, fp32, tf32, bf16, fp16, fp8, int8) -> dict[str, float]:
    """Dense TFLOP/s per precision → FLOP/s (None: no units for it)."""
    got = dict(zip(PRECISIONS, (fp64, fp32, tf32, bf16, fp16, fp8, int8)))
    return {k: v * T for k, v in got.items() if v is not None}


# (pattern on torch.cuda.get_device_name(), peaks); the first match wins, so
# the specific variants (PCIe, NVL) come before the family. Memory bandwidth
# from the same datasheets: H100 PCIe 2.0, NVL 3.9, SXM 3.35 TB/s; H200 4.8;
# GB200 and B200 8 per GPU; A100 80GB SXM 2,039 GB/s (the 40GB's 1,555 is
# not told apart); A10 600; L4 300; V100 900 (V100S 1,134); RTX 4090 1,008.
GPUS: tuple[tuple[str, GpuPeaks], ...] = (
    # NVIDIA H100 datasheet, PCIe column: FP64 TC 51, FP32 51, TF32 756*,
    # BF16/FP16 1,513*, FP8/INT8 3,026* TF.
    (r"H100.*PCIe", GpuPeaks("H100 PCIe", _peaks(51, 51, 378, 756.5, 756.5, 1513, 1513),
                             "NVIDIA H100 Tensor Core GPU datasheet (PCIe)", 2e12)),
    # NVIDIA H100 datasheet, NVL column: FP64 TC 60, FP32 60, TF32 835*,
    # BF16/FP16 1,671*, FP8/INT8 3,341* TF.
    (r"H100.*NVL", GpuPeaks("H100 NVL", _peaks(60, 60, 417.5, 835.5, 835.5, 1670.5, 1670.5),
                            "NVIDIA H100 Tensor Core GPU datasheet (NVL)", 3.9e12)),
    # NVIDIA H100 datasheet, SXM column: FP64 TC 67, FP32 67, TF32 989*,
    # BF16/FP16 1,979*, FP8/INT8 3,958* TF ("NVIDIA H100 80GB HBM3").
    (r"H100", GpuPeaks("H100 SXM", _peaks(67, 67, 494.5, 989.5, 989.5, 1979, 1979),
                       "NVIDIA H100 Tensor Core GPU datasheet (SXM)", 3.35e12)),
    # NVIDIA H200 datasheet, NVL column: as H100 NVL.
    (r"H200.*NVL", GpuPeaks("H200 NVL", _peaks(60, 60, 417.5, 835.5, 835.5, 1670.5, 1670.5),
                            "NVIDIA H200 Tensor Core GPU datasheet (NVL)", 4.8e12)),
    # NVIDIA H200 datasheet, SXM column: compute as H100 SXM.
    (r"H200", GpuPeaks("H200 SXM", _peaks(67, 67, 494.5, 989.5, 989.5, 1979, 1979),
                       "NVIDIA H200 Tensor Core GPU datasheet (SXM)", 4.8e12)),
    # NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: FP64/FP64 TC 40, FP32
    # 80, TF32 2.5 P*, BF16/FP16 5 P*, FP8/INT8 10 P* (FLOP/s).
    (r"GB200", GpuPeaks("GB200", _peaks(40, 80, 1250, 2500, 2500, 5000, 5000),
                        "NVIDIA GB200 NVL72 datasheet (per GPU)", 8e12)),
    # NVIDIA HGX B200 datasheet, per GPU: FP64/FP64 TC 37, FP32 75, TF32
    # 2.2 P*, BF16/FP16 4.5 P*, FP8/INT8 9 P* (FLOP/s).
    (r"B200", GpuPeaks("B200", _peaks(37, 75, 1100, 2250, 2250, 4500, 4500),
                       "NVIDIA HGX B200 datasheet (per GPU)", 8e12)),
    # NVIDIA A100 datasheet (SXM4 and PCIe alike): FP64 TC 19.5, FP32 19.5,
    # TF32 312*, BF16/FP16 624*, INT8 1,248* TOPS; no FP8 units.
    (r"A100", GpuPeaks("A100", _peaks(19.5, 19.5, 156, 312, 312, None, 624),
                       "NVIDIA A100 Tensor Core GPU datasheet", 2.039e12)),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 125*, BF16/FP16 250*, INT8 500*
    # (FP64 at 1/64 rate is not on the datasheet). "\bA10\b": not A100, A10G.
    (r"\bA10\b", GpuPeaks("A10", _peaks(None, 31.2, 62.5, 125, 125, None, 250),
                          "NVIDIA A10 Tensor Core GPU datasheet", 600e9)),
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8/INT8 485*.
    (r"\bL4\b", GpuPeaks("L4", _peaks(None, 30.3, 60, 121, 121, 242.5, 242.5),
                         "NVIDIA L4 Tensor Core GPU datasheet", 300e9)),
    # NVIDIA V100 datasheet: SXM2 FP64 7.8, FP32 15.7, tensor (FP16) 125;
    # PCIe 7, 14, 112; V100S PCIe 8.2, 16.4, 130. Volta has no sparsity.
    (r"V100S", GpuPeaks("V100S PCIe", _peaks(8.2, 16.4, None, None, 130, None, None),
                        "NVIDIA V100S datasheet", 1.134e12)),
    (r"V100.*PCI", GpuPeaks("V100 PCIe", _peaks(7, 14, None, None, 112, None, None),
                            "NVIDIA V100 Tensor Core GPU datasheet (PCIe)", 900e9)),
    (r"V100", GpuPeaks("V100 SXM2", _peaks(7.8, 15.7, None, None, 125, None, None),
                       "NVIDIA V100 Tensor Core GPU datasheet (SXM2)", 900e9)),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090 (rates with
    # FP32 accumulate, which PyTorch uses): FP32 82.6, TF32 82.6, BF16/FP16
    # 165.2, FP8 330.3, INT8 660.6 dense.
    (r"RTX 4090", GpuPeaks("RTX 4090", _peaks(None, 82.6, 82.6, 165.2, 165.2, 330.3, 660.6),
                           "NVIDIA Ada GPU architecture whitepaper (RTX 4090)", 1.008e12)),
)


def gpu_named(name: str) -> GpuPeaks | None:
    """The known GPU whose pattern the device name matches (as
    ``torch.cuda.get_device_name`` spells it: "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"), or None."""
    if not isinstance(name, str):
        return None
    for pattern, peaks in GPUS:
        if re.search(pattern, name, re.IGNORECASE):
            return peaks
    return None
