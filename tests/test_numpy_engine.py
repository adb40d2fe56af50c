"""The NumPy engine is pure NumPy: with every Numba kernel that a cutimeline
module holds replaced by one that fails, ``analyze(engine="numpy")`` and
``align(backend="numpy")`` still run and give the Numba engine's numbers.
(Without this, a parity test of the engines can compare a kernel that both
engines call with itself.)"""

import ast
import importlib
import pkgutil

import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher

import cutimeline as ctl
from cutimeline.alignment.aligner import align, event_host_ns
from cutimeline.timeline.schema import NONE, OpFlag

from handmade import random_timeline, timeline
from synth import trace


def _modules():
    for m in pkgutil.walk_packages(ctl.__path__, "cutimeline."):
        if m.name != "cutimeline.__main__":
            yield importlib.import_module(m.name)


def _kernels_in(value) -> list:
    """The Numba kernels ``value`` holds: itself, or those of a tuple or
    list of them (tables of kernels by engine)."""
    if isinstance(value, Dispatcher):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Dispatcher)]
    return []


def forbid_kernels(monkeypatch) -> tuple[list, list]:
    """Make every call of a Numba kernel from Python fail (the dispatcher
    type's ``__call__``; a kernel called from another kernel is compiled
    into it and is not a call from Python). Returns (the kernels bound in
    a cutimeline module's namespace or its module-level dicts, by name;
    the kernels called since, by name). The module attributes themselves
    stay: a kernel that the Numba engine compiles later still finds the
    kernels it calls by their names (replacing those with Python
    functions made a kernel compiled after this fail to type)."""
    replaced, reached = [], []
    for m in _modules():
        for attr, value in list(vars(m).items()):
            if _kernels_in(value):
                replaced.append(f"{m.__name__}.{attr}")
            elif isinstance(value, dict):
                replaced += [f"{m.__name__}.{attr}[{key!r}]" for key, item in value.items()
                             if _kernels_in(item)]

    def fail(kernel, *args, **kwargs):
        name = f"{kernel.py_func.__module__}.{kernel.py_func.__name__}"
        reached.append(name)  # kept even if a caller swallows the error
        raise AssertionError(f"the NumPy engine called the Numba kernel {name}")
    for kind in {type(k) for m in _modules() for v in vars(m).values()
                 for k in _kernels_in(v)}:
        monkeypatch.setattr(kind, "__call__", fail)
    return replaced, reached


# -- the timelines -------------------------------------------------------------------

def priced(seed=4, n=600, streams=3):
    """Priced as a recording prices itself: the replay's pricing runs too."""
    tl = random_timeline(seed, n=n, streams=streams)
    return tl.replace(meta={**tl.meta, "overhead_ns_per_op": 900,
                            "overhead_model": {"backward_ns": 40, "module_ns": 700},
                            "overhead_calibrations": [[tl.end_ns + 1, tl.end_ns + 90,
                                                       1600]]})


def two_devices():
    """Four streams on two devices, some rows without a launch time."""
    tl = priced(5, n=800, streams=4)
    g = tl.gpu
    launch = g.launch_ns.copy()
    launch[::37] = NONE
    return tl.replace(gpu=g.replace(device=g.stream % 2, launch_ns=launch))


def host_only():
    ops = [(f"op{i % 3}", 1000 * i, 1000 * i + 700, OpFlag.LAUNCH * (i % 2))
           for i in range(40)]
    return timeline(ops=ops, steps=[(0, 0, 20_000), (1, 20_000, 40_000)],
                    meta={"overhead_ns_per_op": 300})


CASES = {  # name: (Timeline, window)
    "random": (lambda: random_timeline(0, n=400, streams=2), None),
    "priced": (priced, None),
    "priced_window": (priced, (1, 3)),
    "one_stream": (lambda: priced(6, n=300, streams=1), None),
    "two_devices": (two_devices, None),
    "host_only": (host_only, None),
    "aligned_trace": (lambda: align(trace(3, devices=2, streams=3, n_ops=600)), None),
}


def numbers(rep) -> dict:
    """Everything a Report computes, the lazy parts included."""
    d = rep.to_dict()
    assert d.pop("settings")["engine"] == rep.settings["engine"]
    out = {"dict": d, "summary": rep.summary(), "lead": rep.cpu_lead(),
           "ranges": rep.ranges()}
    if rep.lanes is None:
        return out
    for name in ("streams", "devices", "steps", "gaps", "ops"):
        out[name] = rep.table(name)
    out["stream_gaps"] = rep.gap_table("stream")
    out["ops_by_shape"] = rep.op_table(shapes=True)
    out["queue"] = rep.queue_depth()
    for dev, st in rep.lanes.stream_keys:
        out[f"queue {dev}/{st}"] = rep.queue_depth(device=int(dev), stream=int(st))
    for k in rep.steps["number"]:
        out[f"offenders {k}"] = rep.offenders(int(k))
    return out


def assert_same(a, b, where="report"):
    if isinstance(a, np.ndarray) and a.dtype.names:
        assert a.dtype == b.dtype, where
        for f in a.dtype.names:
            np.testing.assert_array_equal(a[f], b[f], err_msg=f"{where}.{f}")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, where


def _defined_kernels():
    """``module.function`` of every function a cutimeline module decorates
    with ``njit`` (``@njit(...)``, ``@numba.njit(...)``), read from the source."""
    for m in _modules():
        with open(m.__file__) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                if getattr(d, "id", getattr(d, "attr", None)) == "njit":
                    yield f"{m.__name__}.{node.name}"


def test_every_kernel_is_found(monkeypatch):
    names = set(forbid_kernels(monkeypatch)[0])
    defined = set(_defined_kernels())
    # both ways of writing the decorator are read
    assert {"cutimeline.numeric.ids._dense_nb", "cutimeline.alignment.hull._chain_nb"} <= defined
    assert defined <= names, sorted(defined - names)
    assert "cutimeline.alignment.hull._KERNELS['numba']" in names  # a table by engine


@pytest.mark.parametrize("case", CASES)
def test_the_numpy_engine_calls_no_numba_kernel(case, monkeypatch):
    make, window = CASES[case]
    tl = make()
    want = numbers(ctl.analyze(tl, window=window, engine="numba"))
    _, reached = forbid_kernels(monkeypatch)
    got = numbers(ctl.analyze(tl, window=window, engine="numpy"))
    assert reached == []
    assert_same(want, got)


def test_the_numpy_alignment_calls_no_numba_kernel(monkeypatch):
    tl = trace(11, devices=2, streams=3, n_ops=800)
    a = align(tl, backend="numba")
    want = [a.clocks, a.gpu.begin_ns, a.gpu.end_ns, event_host_ns(a, backend="numba"),
            event_host_ns(tl, backend="numba")]
    _, reached = forbid_kernels(monkeypatch)
    b = align(tl, backend="numpy")
    got = [b.clocks, b.gpu.begin_ns, b.gpu.end_ns, event_host_ns(b, backend="numpy"),
           event_host_ns(tl, backend="numpy")]
    assert reached == []
    for col in want[0].columns:
        np.testing.assert_array_equal(want[0][col], got[0][col], err_msg=col)
    assert_same(want[1:], got[1:])
