"""Device memory per op (record(memory=True)): bytes allocated, freed since
the previous reading and in use, exact on SimGPU against known truth."""

import gc
import weakref

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline import CutimelineError

MIB4 = 4 << 20  # bytes of torch.empty(1 << 20) in float32


def rows(tl):
    names = tl.decode(tl.ops["name"])
    m = tl.memory
    return [(names[o], int(a), int(f), int(u))
            for o, a, f, u in zip(m.op, m.allocated, m.freed, m.in_use)]


def test_allocations_and_frees_are_exact_and_the_peak_is_known():
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False, memory=True) as rec:
        keep = []
        for i in range(10):
            keep.append(torch.empty(1 << 20, device="meta"))
            if i % 3 == 2:
                del keep[0]  # freed now; the next reading says so
    tl = rec.timeline
    got = rows(tl)
    assert [n for n, *_ in got] == ["aten::empty.memory_format"] * 10
    assert [a for _, a, _, _ in got] == [MIB4] * 10
    assert [f for _, _, f, _ in got] == [0, 0, 0, MIB4, 0, 0, MIB4, 0, 0, MIB4]
    assert [u // MIB4 for _, _, _, u in got] == [1, 2, 3, 3, 4, 5, 5, 6, 7, 7]
    assert tl.memory.in_use.max() == 7 * MIB4  # the peak
    assert (tl.memory.device == 0).all()
    assert np.array_equal(tl.memory.host_ns, tl.ops.host_end_ns[tl.memory.op])
    assert (np.diff(tl.memory.host_ns) >= 0).all()


def test_launching_ops_count_new_storages_only():
    before = torch.zeros(256, device="meta")  # made before: not counted
    out = torch.empty(256, device="meta")
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False, memory=True) as rec:
        y = before * 2                        # 1 KiB
        y.mul_(2)                             # in place: nothing
        before.add_(1)                        # in place on an old tensor: nothing
        v = y.view(16, 16)                    # a view: nothing
        torch.add(before, 1, out=out)         # into an old tensor: nothing
        s = torch.sort(before)                # values f32 + indices i64: 3 KiB
        del y, v                              # 1 KiB freed
        z = before.sum()                      # 4 B, and the free above
    tl = rec.timeline
    assert rows(tl) == [("aten::mul.Tensor", 1024, 0, 1024),
                        ("aten::sort", 3072, 0, 4096), ("aten::sum", 4, 1024, 3076)]
    # alive to the end (their storages were counted, not freed)
    assert (s.values.dtype, s.indices.dtype, z.shape) == (torch.float32, torch.int64, ())


def test_the_meter_keeps_no_tensor_alive_and_changes_no_result():
    gpu = ctl.SimGPU(seed=0, owns=("cpu",))  # CPU tensors stand for the device: real values
    x = torch.arange(8.0)
    expected = (x * 2 + 1).sum()
    with ctl.record(device=gpu, measure=False, memory=True) as rec:
        y = x * 2
        ref = weakref.ref(y)
        got = (y + 1).sum()
        del y
        gc.collect()
        assert ref() is None
    assert torch.equal(got, expected)
    assert len(rec.timeline.memory) == 3


def test_memory_off_is_an_empty_table_and_on_without_a_device_an_error():
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False) as rec:
        torch.empty(16, device="meta") * 2
    assert len(rec.timeline.memory) == 0
    with pytest.raises(CutimelineError, match="memory=True.*no device"):
        with ctl.record(device="cpu", measure=False, memory=True):
            pass


def test_a_device_without_a_meter_says_so():
    class NoMeter(ctl.SimGPU):
        def memory_meter(self):
            return None
    with pytest.raises(CutimelineError, match="cannot be read"):
        ctl.record(device=NoMeter(seed=0), measure=False, memory=True).start()


def test_memory_survives_save_load_and_slicing(tmp_path):
    with ctl.record(device=ctl.SimGPU(seed=0), measure=False, memory=True,
                    steps="manual") as rec:
        keep = []
        for i in range(3):
            keep.append(torch.empty(1 << 10, device="meta"))
            rec.step()
    tl = rec.timeline
    tl.save(tmp_path / "run.ctl")
    assert rows(ctl.load(tmp_path / "run.ctl")) == rows(tl)
    assert rows(tl.slice_steps(1, 1)) == rows(tl)[1:2]
