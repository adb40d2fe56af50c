"""compare() on a real GPU: each op's event span against the profiler's
kernels of the same op, and the overhead table for a tiny-op and a
realistic workload (printed; run with ``-s`` to see it).

Why the agreement workload looks as it does: our GPU time of an op is the
span between the events recorded before and after its launch. When the
stream is busy, the BEGIN event runs right as the previous work ends and
the span is the kernel's own time plus the events' few hundred ns; when the
GPU is idle, the span also holds the launch latency. So each step first
queues a long ``torch.cuda._sleep`` (not an aten op: neither side sees it)
and then large ops that each take ≥ 0.1 ms, so every op is queued behind
busy work and 5 % is a fair bound.
"""

import numpy as np
import pytest
import torch

from cutimeline.comparison.runner import compare

pytestmark = pytest.mark.gpu


def big_ops():
    dev = torch.device("cuda")
    a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
    x = torch.randn(64 << 20, device=dev)   # 256 MB: ~0.1 ms per elementwise pass

    def step():
        torch.cuda._sleep(50_000_000)   # ~25 ms of spinning: the host runs ahead
        c = a @ b
        y = torch.relu(x)
        z = y * 2.0
        return c, z + x
    return step


def tiny_ops():
    x = torch.zeros(1, device="cuda")

    def step():
        for _ in range(200):
            x.add_(1)
    return step


def realistic():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             batch_first=True)
    net = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randn(32, 128, 512, device="cuda")

    def step():
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
    return step


def test_gpu_time_agrees_within_5_percent_on_ops_with_one_kernel():
    cmp = compare(big_ops(), steps=5, warmup=2, device="cuda")
    print("\n" + cmp.table())
    g = cmp.gpu
    assert g is not None
    one = (g.kernels == 1) & (g.ours_ns > 0)
    # mm, relu, mul, add: one kernel each, every step
    assert one.sum() >= 4 * 5
    err = np.abs(g.error[one])
    s = g.summary()
    assert s["median_abs_error"] <= 0.05
    assert s["within_tolerance"] >= 0.95, sorted(zip(err.round(3), np.array(g.names)[one]))
    assert cmp.match.fraction >= 0.99


@pytest.mark.parametrize("workload", [tiny_ops, realistic], ids=["tiny", "realistic"])
def test_overhead_table(workload):
    cmp = compare(workload(), steps=10, warmup=3, device="cuda")
    print(f"\n### {workload.__name__} on {cmp.meta['device_name']}\n\n{cmp.table()}")
    assert all(np.isfinite(v) and v > 0 for v in cmp.overhead.values())
    assert cmp.gpu is not None and cmp.gpu.summary()["ops"] > 0
    assert cmp.sizes["ctl_bytes_per_op"] < cmp.sizes["kineto_json_bytes_per_op"]


@pytest.mark.parametrize("workload", [tiny_ops, realistic], ids=["tiny", "realistic"])
def test_op_stream_matches_on_cuda(workload):
    cmp = compare(workload(), steps=3, warmup=2, device="cuda")
    assert cmp.match.fraction >= 0.99, cmp.table()
    assert cmp.match.unexplained() == [], cmp.table()
