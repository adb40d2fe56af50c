"""paths.py: the CUDA op stream's own paths (foreach optimizers, fused attention)
explain the ops around them when ours recorded a SimGPU against the profiler's
CPU pass, and nothing else (test_comparison.py runs compare(device="sim"))."""

from __future__ import annotations

from cutimeline.comparison.opmatch import match_ops
from cutimeline.comparison.paths import per_tensor


def a(*names):
    return [f"aten::{n}" for n in names]


FORWARD = a("t", "addmm", "relu", "t", "addmm")
BACKWARD = a("t", "mm", "threshold_backward", "t", "mm")


def optimizer_step(cuda: bool):
    if cuda:
        return a("lift_fresh", "_foreach_add_", "_foreach_lerp_", "_foreach_mul_",
                 "_local_scalar_dense", "_local_scalar_dense", "_foreach_sqrt",
                 "_foreach_div_", "_foreach_add_")
    return a("add_", "lerp_", "mul_", "_local_scalar_dense", "sqrt", "div", "add_") * 2


def test_foreach_optimizer_ops_explain_the_per_tensor_ones():
    ours = FORWARD + BACKWARD + optimizer_step(True)
    theirs = FORWARD + BACKWARD + optimizer_step(False)
    assert match_ops(ours, theirs, cuda_paths=True).unexplained() == []
    plain = match_ops(ours, theirs)  # a CPU comparison: these are real differences
    assert "missing aten::lerp_" in plain.unexplained()
    assert "extra aten::_foreach_add_" in plain.unexplained()
    rows = match_ops(ours, theirs, cuda_paths=True).differences()
    assert {r["path"] for r in rows} == {"foreach optimizer"}
    assert {r["name"]: r["count"] for r in rows if r["kind"] == "missing"} == {
        "aten::add_": 4, "aten::lerp_": 2, "aten::mul_": 2, "aten::sqrt": 2, "aten::div": 2}


def test_an_op_missing_away_from_any_path_stays_unexplained():
    ours = FORWARD + BACKWARD + optimizer_step(True)
    theirs = FORWARD[:2] + a("mul") + FORWARD[2:] + BACKWARD + optimizer_step(False)
    m = match_ops(ours, theirs, cuda_paths=True)
    assert m.unexplained() == ["missing aten::mul"]
    # the same name inside the optimizer's stretch is the path's
    assert any(r["name"] == "aten::mul_" and r["path"] == "foreach optimizer"
               for r in m.differences())


def test_fused_attention_explains_the_math_path_around_it():
    fwd_ours = a("view", "view", "_scaled_dot_product_efficient_attention", "detach",
                 "permute", "clone")
    fwd_theirs = a("view", "view", "mul", "transpose", "expand", "view", "bmm",
                   "_unsafe_view", "_safe_softmax", "empty_like", "bernoulli_", "div_",
                   "bmm", "_unsafe_view", "permute", "clone")
    bwd_ours = a("permute", "_scaled_dot_product_efficient_attention_backward", "clone",
                 "_unsafe_view", "transpose", "select_backward")
    bwd_theirs = a("permute", "view", "bmm", "transpose", "bmm", "mul",
                   "_softmax_backward_data", "transpose", "select_backward")
    m = match_ops(fwd_ours + bwd_ours, fwd_theirs + bwd_theirs, cuda_paths=True)
    assert m.unexplained() == []
    paths = {(r["kind"], r["name"]): r["path"] for r in m.differences()}
    assert paths[("extra", "aten::detach")] is None   # the mode's own, explained as such
    assert paths[("missing", "aten::_safe_softmax")] == "fused attention"
    # without the fused kernel on our side, the same ops are unexplained
    m = match_ops(a("view", "permute"), a("view", "bmm", "permute"), cuda_paths=True)
    assert m.unexplained() == ["missing aten::bmm"]


def test_per_tensor_names():
    assert per_tensor("aten::_foreach_add_") == ("aten::add", "aten::add_")
    assert per_tensor("aten::_foreach_sqrt") == ("aten::sqrt", "aten::sqrt_")
    assert per_tensor("aten::_foreach_norm") == ("aten::linalg_vector_norm",)
