"""record(memory=True) and FLOPs on a real GPU: the allocator's counters
per op against known allocations, and an mm's FLOPs on the device."""

import pytest
import torch

import cutimeline as ctl
from cutimeline.timeline.schema import OpFlag

pytestmark = pytest.mark.gpu

MIB4 = 4 << 20  # torch.empty(1 << 20) in float32, a multiple of the allocator's rounding


def test_memory_rows_are_the_allocators_per_op():
    torch.cuda.synchronize()
    with ctl.record(device="cuda", measure=False, memory=True) as rec:
        x = torch.empty(1 << 20, device="cuda")
        y = x * 2
        del x
        z = y + 1
        in_use = torch.cuda.memory_allocated()
    tl = rec.timeline
    names = tl.decode(tl.ops["name"])
    m = tl.memory
    got = [(names[o], int(a), int(f)) for o, a, f in zip(m.op, m.allocated, m.freed)]
    assert got == [("aten::empty.memory_format", MIB4, 0), ("aten::mul.Tensor", MIB4, 0),
                   ("aten::add.Tensor", MIB4, MIB4)]
    assert int(m.in_use[-1]) == in_use
    assert z.shape == y.shape


def test_flops_of_a_matmul_on_the_gpu():
    a, b = torch.randn(64, 128, device="cuda"), torch.randn(128, 32, device="cuda")
    with ctl.record(device="cuda", measure=False) as rec:
        torch.mm(a, b)
    tl = rec.timeline
    assert list(tl.flops.flops) == [2 * 64 * 32 * 128]
    assert tl.ops.flags[tl.flops.op[0]] & OpFlag.LAUNCH
