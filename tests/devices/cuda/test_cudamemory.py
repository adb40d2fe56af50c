"""CudaDevice's memory meter without a GPU: differences of the caching
allocator's cumulative counters, read through a fake."""

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.devices.cuda import gpu as devices
from cutimeline.devices.cuda import CudaMemory
from cutimeline.timeline.schema import OpFlag

from fakecuda import CpuAsCuda, FakeCuda


class Counters:
    """The allocator's cumulative (allocated, freed, in use) bytes."""

    def __init__(self, allocated=1000, freed=200):
        self.allocated, self.freed = allocated, freed

    def __call__(self):
        return self.allocated, self.freed, self.allocated - self.freed


def test_reads_are_differences_since_the_previous_one():
    c = Counters()
    m = CudaMemory(c)
    assert m.read(None, (), {}, None) == (0, 0, 800)
    c.allocated += 512
    assert m.read(None, (), {}, None) == (512, 0, 1312)
    c.freed += 1024
    c.allocated += 2048
    assert m.read(None, (), {}, None) == (2048, 1024, 2336)
    c.allocated, c.freed = 100, 0  # the counters were reset: nothing once
    assert m.read(None, (), {}, None) == (0, 0, 100)
    c.allocated += 8
    assert m.read(None, (), {}, None) == (8, 0, 108)
    m.close()


class MeteredCuda(FakeCuda):
    """The fake GPU, with allocator counters that grow by 1 KiB allocated
    (and 256 B freed) from one read to the next."""

    def __init__(self):
        super().__init__(lag_ns=0)
        self.read_index = []
        self.allocated = 0

    def memory_counters(self, index):
        self.read_index.append(index)
        a = self.allocated
        self.allocated += 1024
        return a, a // 4, a - a // 4


@pytest.fixture
def metered(monkeypatch):
    api = MeteredCuda()
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    monkeypatch.setattr(api, "now", __import__("time").perf_counter_ns)
    return api


def test_the_device_reads_its_api_counters_for_its_own_index(metered):
    meter = CpuAsCuda(pings=1).memory_meter()
    assert meter.read(None, (), {}, None) == (1024, 256, 768)
    assert set(metered.read_index) == {0}


def test_the_recorder_reads_memory_after_each_launch(metered):
    x = torch.ones(4)
    with ctl.record(device=CpuAsCuda(pings=1), measure=False, memory=True) as rec:
        y = x + 1
        y * 2
        y.view(2, 2)  # launches nothing: no reading
    tl = rec.timeline
    m = tl.memory
    launched = np.flatnonzero(tl.ops.flags & OpFlag.LAUNCH)
    assert list(m.op) == list(launched) and len(m) == 2
    # 1 KiB allocated and 256 B freed between two readings
    assert list(m.allocated) == [1024, 1024] and list(m.freed) == [256, 256]
    assert list(m.in_use) == [m.in_use[0], m.in_use[0] + 768]
    assert np.array_equal(m.host_ns, tl.ops.host_end_ns[m.op])
