"""torch.compile on a real CUDA GPU: Inductor's graphs as ops, their Triton
kernels bracketed as COMPILED rows between the rows of the ops inside.
Skipped without CUDA (tests/conftest.py)."""

import warnings

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.analysis.tables.nesting import parents
from cutimeline.timeline.schema import GpuKind, OpFlag

pytestmark = pytest.mark.gpu


def test_a_compiled_step_is_unchanged_and_its_graphs_fill_their_brackets():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                              torch.nn.LayerNorm(256), torch.nn.Linear(256, 64)).cuda()
    x = torch.randn(128, 256, device="cuda")
    compiled = torch.compile(net)

    def step():
        net.zero_grad(set_to_none=True)
        loss = compiled(x).square().mean()
        loss.backward()
        return loss.detach().cpu(), [p.grad.cpu() for p in net.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: global module hooks
        step()
        ref_loss, ref_grads = step()
        with ctl.record(device="cuda", measure=False) as rec:
            loss, grads = step()
    assert torch.equal(loss, ref_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    tl = rec.timeline
    assert tl.aligned
    names = np.array(tl.decode(tl.ops["name"]), dtype=object)
    graph = np.flatnonzero([n.startswith("inductor::graph_") for n in names])
    assert len(graph) == 2 and np.all(tl.ops.flags[graph] & OpFlag.LAUNCH)
    par, g = parents(tl), tl.gpu
    for r in graph:
        pieces = np.flatnonzero(g.op == r)
        inner = np.flatnonzero(np.isin(g.op, np.flatnonzero(par == r)) &
                               (g.stream == g.stream[pieces[0]]))
        assert (g.kind[pieces] == GpuKind.COMPILED).all() and len(pieces) == len(inner) + 1
        both = np.sort(np.r_[pieces, inner])
        # one stream, in order: the pieces and the inner ops' rows tile the bracket
        assert np.all(g.end_ns[both][:-1] <= g.begin_ns[both][1:] + 1)
        assert (g.end_ns[pieces] - g.begin_ns[pieces]).sum() > 0
