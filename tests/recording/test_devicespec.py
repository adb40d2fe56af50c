"""devicespec.py: the device spellings record(), compare() and --device share."""

import re

import pytest
import torch

import cutimeline as ctl
from cutimeline.devices.sim import SimGPU
from cutimeline.errors import CutimelineError
from cutimeline.recording.devicespec import DEVICE_FORMS, cuda_index, device_spelling, recording_device

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.mark.parametrize("given, spelling", [
    ("auto", "auto"), ("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), ("sim", "sim"),
    (" Sim ", "sim"), ("CUDA:0", "cuda:0"), (torch.device("cpu"), "cpu"),
    (torch.device("cuda", 2), "cuda:2"),
])
def test_the_spellings(given, spelling):
    assert device_spelling(given, "record(device=...)") == spelling


def test_a_device_is_taken_as_given():
    gpu = SimGPU("a100")
    assert device_spelling(gpu, "record(device=...)") is gpu
    assert recording_device(gpu, resolve=True) is gpu


# (not "gpu": a test id with that word is skipped without CUDA, see conftest.py)
@pytest.mark.parametrize("given", ["tpu", "cuda:", "cuda:-1", "meta", 0, None,
                                   torch.device("meta"), "h100"])
def test_a_bad_spelling_names_itself_and_lists_the_accepted_forms(given):
    with pytest.raises(CutimelineError) as info:
        device_spelling(given, "compare(device=...)")
    text = str(info.value)
    assert text.startswith(f"compare(device={given!r}) is not understood; give ")
    assert DEVICE_FORMS in text


def test_record_of_sim_is_a_simulated_h100():
    dev = recording_device("sim", resolve=True)
    assert isinstance(dev, SimGPU) and dev.profile.name == "h100"
    assert recording_device("sim", resolve=False) is None  # checked, not made (CUTIMELINE_DISABLE)
    with ctl.record(device="sim") as rec:
        torch.ones(8, 8, device="meta").mul(2)
    tl = rec.timeline
    assert tl.meta["device_name"] == "SimGPU h100 (simulated)"
    assert tl.meta["simulated"] and len(tl.gpu) == 2 and tl.aligned


def test_record_names_a_bad_spelling():
    with pytest.raises(CutimelineError, match=re.escape(
            "record(device='gpu') is not understood; give 'auto', 'cpu', 'cuda', "
            "'cuda:N', 'sim'")):
        ctl.record(device="gpu")


@pytest.mark.parametrize("device", ["sim", "cpu"])
def test_timing_other_than_events_needs_the_cuda_device(device):
    with pytest.raises(CutimelineError, match=f"not to device='{device}'"):
        recording_device(device, resolve=True, timing="stamps")


@NO_CUDA
@pytest.mark.parametrize("spelling", ["cuda", "cuda:1"])
def test_cuda_without_cuda_says_so_and_what_to_give(spelling):
    with pytest.raises(CutimelineError, match=re.escape(
            f"record(device={spelling!r}) needs CUDA")) as info:
        recording_device(spelling, resolve=True)
    assert "'sim'" in str(info.value)
    with pytest.raises(CutimelineError, match=re.escape(f"--device {spelling!r} needs CUDA")):
        cuda_index(spelling, "--device ...")
    assert recording_device("auto", resolve=True) is None  # auto without CUDA: host rows only


def test_auto_and_cuda_are_the_simgpu_cuda_is_mapped_to():
    # record(device="auto") inside as_cuda() made a CudaDevice, which
    # failed in torch's CUDA calls (AttributeError: _cuda_getDevice).
    gpu = ctl.SimGPU()
    with gpu.as_cuda():
        for spec in ("auto", "cuda", "cuda:0", torch.device("cuda", 0)):
            assert recording_device(spec, resolve=True) is gpu
        with pytest.raises(CutimelineError, match="mapped to a simulated GPU here"):
            recording_device("cuda:1", resolve=True)
        m = torch.nn.Linear(16, 16).cuda()
        with ctl.record(measure=False) as rec:
            m(torch.randn(4, 16, device="cuda")).sum().backward()
    assert rec.device is gpu and len(rec.timeline.gpu) > 0
    assert recording_device("auto", resolve=True) is None or not isinstance(
        recording_device("auto", resolve=True), ctl.SimGPU)  # unmapped again
