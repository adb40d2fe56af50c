"""record() changes nothing of the user's: global state, modes, results.

An empty recording, and recordings of a small training step on the CPU and
on a simulated GPU (meta tensors), leave torch's, NumPy's and Python's
random state, grad mode, the dispatch-mode stack, warnings filters, the
environment, SIGINT/SIGTERM handlers, the thread count, torch's default
dtype, thread count and TF32 flag as they were (the random state compared
with the same program run unrecorded, which draws its own numbers). A
dispatch or ``__torch_function__`` mode of the user's active around
``record()`` sees the user's ops and none of the recorder's own probes
(``selfcost.py``). And ops of torch's OpInfo database give bit-identical
results, and the same errors, with and without a recorder around them, on
the CPU and on a SimGPU (owning meta tensors, the CPU's host work; and
owning CPU tensors, each op launched through the simulator); so do sparse,
quantised, nested, zero-size and strided tensors (``test_layouts_identical.py``).
Where any dispatch mode changes torch's result (a mode makes
``linalg.eigvalsh`` compute eigenvectors too: ``isTensorSubclassLike``),
the recorder must give what a bare mode gives.

torch imports ``torch._dynamo`` the first time any dispatch mode is entered
(``torch._disable_dynamo``), which sets ``TORCHINDUCTOR_CACHE_DIR`` and a
SymPy warnings filter: the module's first fixture enters a bare mode, so
that what is compared in this process is the recorder's doing. The
recorder's own mode does not import it (``opstream.skip_dynamo``): a fresh
subprocess checks that a first recording, empty or of CPU ops, leaves the
environment, the warnings filters and the modules that change behaviour
(``torch._dynamo``, ``torch._inductor``, ``sympy``) as the same program run
unrecorded does.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import types
import unittest
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl


class _Seen(TorchDispatchMode):
    """A user's mode: the ops it sees."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _FunctionsSeen(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module", autouse=True)
def torch_dynamo_imported():
    with _Seen():   # torch's first-mode import (see the module doc), not the recorder's
        torch.zeros(1)


def snapshot() -> dict:
    return {"torch rng": torch.get_rng_state(), "numpy rng": np.random.get_state(),
            "python rng": random.getstate(), "grad mode": torch.is_grad_enabled(),
            "dispatch modes": torch._C._len_torch_dispatch_stack(),
            "warnings filters": list(warnings.filters), "environ": dict(os.environ),
            "signals": (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)),
            "threads": threading.active_count(), "dtype": torch.get_default_dtype(),
            "torch threads": torch.get_num_threads(),
            "tf32": torch.backends.cuda.matmul.allow_tf32}


def changed(a: dict, b: dict) -> list[str]:
    def same(x, y):
        if isinstance(x, torch.Tensor):
            return torch.equal(x, y)
        if isinstance(x, tuple) and x and isinstance(x[1], np.ndarray):  # numpy's state
            return x[0] == y[0] and np.array_equal(x[1], y[1]) and x[2:] == y[2:]
        return x == y
    return [k for k in a if not same(a[k], b[k])]


def seeded() -> None:
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)


def training_step(device: str) -> torch.Tensor:
    """A small step that draws random numbers (init, dropout) of every kind."""
    net = torch.nn.Sequential(torch.nn.Linear(8, 16, device=device), torch.nn.ReLU(),
                              torch.nn.Dropout(0.5), torch.nn.Linear(16, 1, device=device))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 8, device=device) + float(np.random.rand()) + random.random()
    loss = net(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


def test_an_empty_recording_changes_nothing():
    before = snapshot()
    with ctl.record():
        pass
    assert changed(before, snapshot()) == []


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_recording_a_training_step_changes_nothing(device):
    where = "cpu" if device == "cpu" else "meta"
    seeded()
    plain = training_step(where)
    expected = snapshot()
    seeded()
    with ctl.record(device="cpu" if device == "cpu" else ctl.SimGPU()) as rec:
        recorded = training_step(where)
    assert changed(expected, snapshot()) == []  # threads: stop joins its own, no wait
    assert len(rec.timeline.ops) > 10
    if device == "cpu":
        assert torch.equal(plain, recorded)


@pytest.mark.parametrize("work", ["empty", "cpu ops"])
def test_a_first_recording_leaves_the_process_as_it_found_it(tmp_path, work):
    # in a fresh process: the same program with and without ctl.record()
    script = textwrap.dedent("""
        import os, sys, warnings, torch
        import cutimeline as ctl
        env, filters, mods = dict(os.environ), list(warnings.filters), set(sys.modules)

        def work():
            if sys.argv[2] == "cpu ops":
                a = torch.ones(8, 8, requires_grad=True)
                (a @ a).relu().sum().backward()
                a.sum().item()

        if sys.argv[1] == "record":
            with ctl.record(device="cpu"):
                work()
        else:
            work()
        heavy = ("torch._dynamo", "torch._inductor", "sympy")
        print(sorted(k for k in set(os.environ) | set(env) if os.environ.get(k) != env.get(k)),
              sorted(repr(f) for f in warnings.filters if f not in filters),
              len(warnings.filters) - len(filters),
              sorted(m for m in set(sys.modules) - mods if m.startswith(heavy)))
    """)
    (tmp_path / "first.py").write_text(script)
    out = [subprocess.run([sys.executable, str(tmp_path / "first.py"), arg, work],
                          check=True, capture_output=True, text=True, timeout=120).stdout
           for arg in ("plain", "record")]
    assert out[0] == out[1] == "[] [] 0 []\n", out


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_users_modes_see_the_users_ops_and_no_probe(device):
    for measure in (True, False):
        with _FunctionsSeen() as calls, _Seen() as seen:
            with ctl.record(device="cpu" if device == "cpu" else ctl.SimGPU(),
                            measure=measure) as rec:
                torch.ones(2, device="cpu" if device == "cpu" else "meta").sum()
        assert seen.ops == ["aten.ones.default", "aten.sum.default"], seen.ops[:8]
        assert calls.calls == ["ones", "sum"], calls.calls[:8]
        assert len(rec.timeline.ops) == 2


# -- bit identity over torch's OpInfo database --------------------------------------
def _op_db() -> list:
    try:
        import expecttest  # noqa: F401
    except ImportError:  # torch's test helpers import it for their TestCase only
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


OPS = 60
SAMPLES = 2


@pytest.fixture(scope="module", autouse=True)
def sample_iterators_find_no_test():
    """torch's sample iterators look for a unittest TestCase on the stack
    (``extract_test_fn``: ``inspect.stack()``, ~0.1 s a call under pytest);
    there is none here, so they get the None they would find. Both names:
    opinfo.core imported the function by name, and every ``sample_inputs``
    calls it there (half the sweep's time when only common_utils' was set)."""
    _op_db()
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core
    found = [(m, m.extract_test_fn) for m in (common_utils, core)
             if hasattr(m, "extract_test_fn")]
    for m, _ in found:
        m.extract_test_fn = lambda: None
    yield
    for m, find in found:
        m.extract_test_fn = find
    # torch's test helpers freeze torch.backends' global flags as they load
    # (disable_global_flags): every later test that sets cudnn.benchmark or
    # allow_tf32 would raise
    # (the flag is a global of the module's functions, not an attribute)
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True


def _picked() -> list:
    """Every k-th OpInfo (by name) that runs on the CPU in float32 with a
    deterministic output and is no factory (whose output is all it makes)."""
    ops = sorted((op for op in _op_db()
                  if torch.float32 in op.supported_dtypes("cpu")
                  and not op.has_nondeterministic_output and not op.is_factory_function),
                 key=lambda op: (op.name, op.variant_test_name))
    return ops[::max(1, len(ops) // OPS)][:OPS]


def _samples(op, dtype, noncontiguous: bool) -> list:
    torch.manual_seed(0)  # the same inputs every call
    out = list(itertools.islice(op.sample_inputs("cpu", dtype), SAMPLES))
    return [s.noncontiguous() for s in out] if noncontiguous else out


def _run(op, samples) -> list:
    out = []
    for s in samples:
        torch.manual_seed(1)  # a random op draws the same numbers both times
        try:
            out.append(("ok", op.op(s.input, *s.args, **s.kwargs)))
        except Exception as exc:
            out.append(("raised", type(exc), str(exc)))
    return out


def _same(a, b) -> bool:
    """Bit-identical: dtype, shape, strides and every bit (NaNs by position
    and payload, -0.0 apart from 0.0); containers element by element."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.layout != b.layout or \
                a.is_nested != b.is_nested or a.is_quantized != b.is_quantized:
            return False
        if a.is_nested:  # jagged: values and offsets; strided: the components
            return _same(a.values(), b.values()) and _same(a.offsets(), b.offsets()) \
                if a.layout == torch.jagged else _same(a.unbind(), b.unbind())
        if a.is_quantized:
            return a.qscheme() == b.qscheme() and _same(_qparams(a), _qparams(b)) and \
                _same(a.int_repr(), b.int_repr())
        if a.layout != torch.strided:
            a, b = a.to_dense(), b.to_dense()
        if (a.dtype, a.shape, a.stride()) != (b.dtype, b.shape, b.stride()):
            return False
        return torch.equal(_bits(a), _bits(b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b


def _qparams(a: torch.Tensor) -> tuple:
    if a.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return a.q_scale(), a.q_zero_point()
    return a.q_per_channel_scales(), a.q_per_channel_zero_points(), a.q_per_channel_axis()


def _bits(a: torch.Tensor) -> torch.Tensor:
    """The bytes of ``a``'s values in a fresh contiguous buffer."""
    a = a.resolve_conj().resolve_neg().reshape(-1)
    flat = torch.empty(a.numel(), dtype=a.dtype).copy_(a)
    return flat.view(torch.uint8) if a.dtype != torch.bool else flat


_DEVICES = {"cpu": lambda: "cpu", "sim": lambda: ctl.SimGPU(),
            "sim owning cpu": lambda: ctl.SimGPU(owns=("cpu",))}


class _Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _identical(op, dtype=torch.float32, noncontiguous=False, device="cpu") -> str | None:
    """None, or what differs between op's results without and with a
    recorder on ``device``; where a bare dispatch mode changes the result
    (torch's doing, see the module doc), between the bare mode's and the
    recorder's."""
    samples = _samples(op, dtype, noncontiguous)
    plain, again = _run(op, samples), _run(op, _samples(op, dtype, noncontiguous))
    if not all(map(_same, plain, again)):
        return None  # not deterministic on this machine: nothing to compare
    samples = _samples(op, dtype, noncontiguous)
    with ctl.record(device=_DEVICES[device]()):
        recorded = _run(op, samples)
    if not all(map(_same, plain, recorded)):
        samples = _samples(op, dtype, noncontiguous)
        with _Bare():
            plain = _run(op, samples)
    for p, r in zip(plain, recorded):
        if not _same(p, r):
            return f"{op.name}.{op.variant_test_name} {dtype} {device}: {p!r:.120} != {r!r:.120}"
    return None


@pytest.fixture(scope="module")
def picked():
    return _picked()


@pytest.mark.slow
def test_opinfo_results_are_bit_identical_under_the_recorder(picked):
    assert len(picked) == OPS
    bad = [d for op in picked for d in [_identical(op)] if d]
    assert not bad, bad[:5]


def test_noncontiguous_and_complex_inputs_too(picked):
    bad = [d for op in picked[::3] for d in [_identical(op, noncontiguous=True)] if d]
    complex_ops = [op for op in picked if torch.complex64 in op.supported_dtypes("cpu")][:6]
    assert len(complex_ops) >= 3
    bad += [d for op in complex_ops for d in [_identical(op, torch.complex64)] if d]
    assert not bad, bad[:5]


@pytest.mark.slow
@pytest.mark.parametrize("device", ["sim", "sim owning cpu"])
def test_opinfo_results_are_bit_identical_on_a_simgpu(device):
    """Other OpInfos than the CPU's sweep (halfway between its picks), CPU
    tensors: host work beside a SimGPU, or (owning cpu) launched through it;
    a third of them on non-contiguous inputs, six in complex64 too."""
    ops = sorted((op for op in _op_db() if torch.float32 in op.supported_dtypes("cpu")
                  and not op.has_nondeterministic_output and not op.is_factory_function),
                 key=lambda op: (op.name, op.variant_test_name))
    k = max(1, len(ops) // OPS)
    picked = ops[k // 2::k][:OPS]
    complex_ops = [op for op in picked if torch.complex64 in op.supported_dtypes("cpu")][:6]
    assert len(picked) == OPS and len(complex_ops) >= 3
    bad = [d for op in picked for d in [_identical(op, device=device)] if d]
    bad += [d for op in picked[::3] for d in [_identical(op, noncontiguous=True,
                                                          device=device)] if d]
    bad += [d for op in complex_ops for d in [_identical(op, torch.complex64, device=device)]
            if d]
    assert not bad, bad[:5]


def test_where_any_mode_changes_a_result_the_recorder_changes_it_no_more():
    # under a dispatch mode torch computes eigen/singular vectors as well,
    # which moves the last bits of the values (see the module doc)
    ops = [op for op in _op_db() if op.name in ("linalg.eigvalsh", "linalg.svdvals")]
    assert len(ops) == 2
    bad = [d for op in ops for dev in _DEVICES for d in [_identical(op, device=dev)] if d]
    assert not bad, bad


def test_an_ops_error_comes_out_unchanged():
    compared = 0
    for op in _op_db():
        if op.error_inputs_func is None or compared >= 30:
            continue
        torch.manual_seed(0)
        for e in itertools.islice(op.error_inputs("cpu"), 2):
            s = e.sample_input
            outcome = []
            for recorder in (None, ctl.record(device="cpu")):
                try:
                    with recorder or contextlib.nullcontext():
                        op.op(s.input, *s.args, **s.kwargs)
                    outcome.append(None)
                except Exception as exc:
                    outcome.append((type(exc), str(exc)))
            assert outcome[0] == outcome[1], op.name
            compared += outcome[0] is not None
    assert compared >= 20
