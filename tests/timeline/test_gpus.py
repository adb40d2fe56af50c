"""timeline/gpus.py: device names as torch spells them find their datasheet
peaks; the table agrees with the simulated GPU's profiles."""

import pytest

from cutimeline.timeline.gpus import GPUS, PRECISIONS, gpu_named


@pytest.mark.parametrize("name, label, bf16", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5e12),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5e12),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5e12),
    ("NVIDIA H200", "H200 SXM", 989.5e12),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5e12),
    ("NVIDIA A100-SXM4-80GB", "A100", 312e12),
    ("NVIDIA A100 80GB PCIe", "A100", 312e12),
    ("NVIDIA A10", "A10", 125e12),
    ("NVIDIA L4", "L4", 121e12),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2e12),
    ("NVIDIA B200", "B200", 2250e12),
    ("NVIDIA GB200", "GB200", 2500e12),
])
def test_device_names_find_their_peaks(name, label, bf16):
    g = gpu_named(name)
    assert g.label == label and g.peak_flops["bf16"] == bf16


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA L40S", "NVIDIA A40",
                                  "", None, "cpu"])
def test_unknown_devices_are_none(name):
    assert gpu_named(name) is None


def test_volta_has_no_bf16_and_every_peak_is_a_known_positive_precision():
    assert set(gpu_named("Tesla V100-SXM2-32GB").peak_flops) == {"fp64", "fp32", "fp16"}
    assert gpu_named("Tesla V100-PCIE-16GB").label == "V100 PCIe"
    for _, g in GPUS:
        assert set(g.peak_flops) <= set(PRECISIONS)
        assert all(v > 0 for v in g.peak_flops.values()) and g.source


def test_the_simulated_profiles_hold_the_same_datasheet_figures():
    from cutimeline.devices.sim.roofline import PROFILES
    for profile, name in (("h100", "NVIDIA H100 80GB HBM3"), ("a100", "NVIDIA A100-SXM4-80GB"),
                          ("h200", "NVIDIA H200")):
        table = gpu_named(name).peak_flops
        sim = PROFILES[profile].peak_flops
        assert {k: sim[k] for k in table} == table, profile
