"""SimGPU's memory meter: storages its ops made, counted once, freed when
torch frees them, with no strong reference kept."""

import gc
import weakref

import torch

import cutimeline as ctl
from cutimeline.devices.sim.memory import StorageMeter


def test_a_new_storage_counts_once_and_its_views_not_at_all():
    m = StorageMeter()
    x = torch.empty(100, device="meta")
    assert m.read(None, (), {}, x) == (400, 0, 400)
    assert m.read(None, (x,), {}, x) == (0, 0, 400)              # in place: seen
    assert m.read(None, (x,), {}, x.view(10, 10)) == (0, 0, 400)  # a view: same storage
    assert m.read(None, (x,), {}, (x[:5], x[5:])) == (0, 0, 400)
    y = torch.empty(3, dtype=torch.int64, device="meta")
    assert m.read(None, (), {}, [y, None, 2]) == (24, 0, 424)


def test_an_input_storage_is_not_a_new_allocation():
    m = StorageMeter()
    old = torch.empty(8, device="meta")
    assert m.read(None, (old, 1.0), {}, old) == (0, 0, 0)           # add_ on a tensor made before
    assert m.read(None, (old,), {"out": old}, old) == (0, 0, 0)     # out=
    assert m.read(None, ([old],), {}, old[:2]) == (0, 0, 0)         # in a list


def test_an_ops_schema_says_whether_its_result_is_an_inputs():
    m = StorageMeter()
    old = torch.empty(8, device="meta")
    add_, add = torch.ops.aten.add_.Tensor, torch.ops.aten.add.Tensor
    assert m.read(add_, (old, old), {}, old) == (0, 0, 0)  # in place, by its schema
    assert m.read(add, (old, old), {}, add(old, old)) == (32, 0, 32)
    assert m._aliasing == {add_: True, add: False}


def test_frees_go_to_the_next_read_and_growth_counts():
    m = StorageMeter()
    x = torch.empty(10, device="meta")
    m.read(None, (), {}, x)
    v = x.view(2, 5)
    del x
    assert m.read(None, (), {}, None) == (0, 0, 40)  # the view keeps the storage
    del v
    gc.collect()
    assert m.read(None, (), {}, None) == (0, 40, 0)
    z = torch.empty(4, device="meta")
    m.read(None, (), {}, z)
    z.resize_(16)
    assert m.read(None, (z,), {}, z) == (48, 0, 64)


def test_the_meter_holds_no_tensor_and_close_detaches():
    m = StorageMeter()
    x = torch.empty(10, device="meta")
    ref = weakref.ref(x)
    m.read(None, (), {}, x)
    m.close()
    del x
    gc.collect()
    assert ref() is None
    assert m.read(None, (), {}, None) == (0, 0, 40)  # after close, no free is noted
    assert not m._live


def test_simgpu_hands_out_a_new_meter_per_recording():
    gpu = ctl.SimGPU(seed=0)
    a, b = gpu.memory_meter(), gpu.memory_meter()
    assert isinstance(a, StorageMeter) and a is not b
