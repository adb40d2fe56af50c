"""Bit identity beyond dense tensors: sparse (COO, CSR, CSC, BSR), quantised
(per tensor and per channel, a quantised linear and add), nested (strided
and jagged), as_strided and strided views, zero-size tensors give the same
results, bit for bit, and the same errors, with and without a recorder, on
the CPU and on a SimGPU (owning meta tensors; owning CPU tensors, every op
launched through the simulator). Comparison as in ``test_isolation.py``.
"""

from __future__ import annotations

import pytest
import torch
from test_isolation import _DEVICES, _same

import cutimeline as ctl


def _layout_cases(family: str) -> dict:
    """Name -> a call on fresh inputs of one layout family (the same
    numbers every time), errors included."""
    torch.manual_seed(0)
    d, w, base = torch.randn(6, 4), torch.randn(4, 3), torch.randn(8, 8)
    d[d < 0.3] = 0
    if family == "sparse":
        coo, csr, csc, bsr = (d.to_sparse(), d.to_sparse_csr(), d.to_sparse_csc(),
                              d.to_sparse_bsr((2, 2)))
        return {"coo mm": lambda: torch.sparse.mm(coo, w), "coo sum": lambda: torch.sparse.sum(
                    coo, dim=0), "coo * 2": lambda: (coo * 2).coalesce(), "csr @": lambda: csr @ w,
                "csr + 1": lambda: csr.to_dense() + 1, "csc @": lambda: csc @ w,
                "csc * 2": lambda: csc * 2, "csc.t()": lambda: csc.t(),
                "csc @ bad shape": lambda: csc @ torch.randn(5, 3), "bsr @": lambda: bsr @ w,
                "addmm bsr": lambda: torch.addmm(torch.randn(6, 3), bsr, w),
                "bsr dense": lambda: bsr.to_dense(), "bad block": lambda: d.to_sparse_bsr((4, 4))}
    if family == "quantised":
        import torch.ao.nn.quantized as nnq
        q, q2 = (torch.quantize_per_tensor(torch.randn(3, 4), s, z, torch.quint8)
                 for s, z in ((0.05, 3), (0.07, 1)))
        lin = nnq.Linear(4, 5)
        lin.set_weight_bias(torch.quantize_per_tensor(torch.randn(5, 4), 0.02, 0, torch.qint8),
                            torch.randn(5))
        add = nnq.QFunctional()
        add.scale, add.zero_point = 0.1, 2
        bad = torch.quantize_per_tensor(torch.randn(2, 2), 0.1, 0, torch.quint8)
        return {"quantize": lambda: torch.quantize_per_tensor(
                    torch.linspace(-1, 1, 12), 0.01, 5, torch.qint8),
                "per channel": lambda: torch.quantize_per_channel(
                    base, torch.rand(8) / 10 + 0.01, torch.zeros(8, dtype=torch.long), 0,
                    torch.qint8), "dequantize": lambda: q.dequantize(),
                "linear": lambda: lin(q), "add": lambda: add.add(q, q2),
                "relu": lambda: torch.relu(q), "bad add": lambda: torch.ops.quantized.add(
                    q, bad, 0.1, 0)}
    if family == "nested":
        nt = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)])
        return {"+ 1": lambda: nt + 1, "relu": lambda: torch.relu(nt),
                "bmm": lambda: torch.bmm(nt, nt.transpose(-1, -2)),
                "padded": lambda: nt.to_padded_tensor(0.0), "unbind": lambda: nt.unbind(),
                "sum(0) raises": lambda: nt.sum(0)}
    if family == "jagged":
        nj = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)],
                                        layout=torch.jagged)
        return {"+ 1": lambda: nj + 1, "sin": lambda: nj.sin(), "sum": lambda: nj.sum(-1)}
    empty = torch.empty(0, 4)
    return {"as_strided": lambda: base.as_strided((3, 3), (9, 1), 2) * 2,
            "overlapping": lambda: base.as_strided((4, 4), (1, 1)).exp(),
            "out of bounds": lambda: base.as_strided((9, 9), (8, 1)),
            "view add_": lambda: base[::2, 1::3].add_(1),
            "t() slices": lambda: base.t()[1:, ::2].contiguous(),
            "stride 0": lambda: torch.randn(1, 4).expand(5, 4) + 1,
            "unfold": lambda: base.unfold(0, 3, 2).sum(-1),
            "scatter": lambda: torch.as_strided_scatter(base, torch.ones(2, 2), (2, 2), (8, 1)),
            "empty @": lambda: empty @ w, "empty sum": lambda: empty.sum(0),
            "empty cat": lambda: torch.cat([empty, empty]), "empty exp_": lambda: empty.exp_(),
            "empty softmax": lambda: torch.nn.functional.softmax(empty, -1)}


def _outcome(f) -> tuple:
    torch.manual_seed(1)
    try:
        return ("ok", f())
    except Exception as exc:
        return ("raised", type(exc), str(exc))


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")
@pytest.mark.parametrize("family, device", [
    (f, d) for f in ("sparse", "quantised", "nested", "jagged", "strided and zero-size")
    for d in _DEVICES])
def test_every_layout_is_bit_identical_and_raises_alike(family, device):
    plain = {k: _outcome(f) for k, f in _layout_cases(family).items()}
    assert any(o[0] == "raised" for o in plain.values()) or family == "jagged"
    fns = _layout_cases(family)
    with ctl.record(device=_DEVICES[device]()):
        recorded = {k: _outcome(f) for k, f in fns.items()}
    bad = [k for k, p in plain.items() if not (p[0] == recorded[k][0] and (
        p == recorded[k] if p[0] == "raised" else _same(p[1], recorded[k][1])))]
    assert not bad, [(k, plain[k], recorded[k]) for k in bad][:3]
