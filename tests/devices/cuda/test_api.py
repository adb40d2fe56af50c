"""api.py (the torch.cuda calls) against torch, and the CPU tests' fakes against it.

``FakeCuda`` and ``FakeStampCuda`` (tests/fakecuda.py) stand in for
``TorchCuda``, the only code that calls torch.cuda for ``CudaDevice``; so
two links keep the fakes honest. The fakes have no method ``TorchCuda``
lacks, each with its parameters; and every torch call ``TorchCuda`` makes,
found in its source, names something torch has and passes arguments it
takes. A CPU build of torch has no CUDA functions in ``torch._C``, and C
functions have no signature to inspect: there the declarations torch ships
in ``torch/_C/__init__.pyi`` stand in for them.
"""

import ast
import inspect
from pathlib import Path

import pytest
import torch

from cutimeline.devices.cuda import api as cudaapi
from cutimeline.devices.cuda.api import TorchCuda
from cutimeline.devices.cuda.kernels import Stamper

from fakecuda import FakeCuda, FakeEvent, FakeStampCuda, FakeStamper

# the fakes' own controls, which the code under test never calls
HELPERS = {"advance": "moves the fake host clock", "device_ns": "the fake device clock",
           "event_ns": "the fake device clock on the event tick",
           "globaltimer": "the fake globaltimer"}
# what cudaapi's parameters of these names are, where it calls their methods
# or reads their attributes
KINDS = {"event": torch.cuda.Event, "a": torch.cuda.Event, "b": torch.cuda.Event,
         "stream": torch.cuda.Stream, "stamper": Stamper}
# the C class a Python class passes its constructor's **kwargs to
C_BASE = {"torch.cuda.Stream": "torch._C._CudaStreamBase"}


def methods(cls) -> dict:
    return {n: f for n, f in inspect.getmembers(cls, inspect.isfunction)
            if not n.startswith("_") and n not in HELPERS}


def params(f) -> list:
    """Name, kind and default of each parameter (annotations aside)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize("fake", [FakeCuda, FakeStampCuda])
def test_the_fakes_have_only_the_real_layers_methods_with_its_parameters(fake):
    real = methods(TorchCuda)
    for name, f in methods(fake).items():
        if name == "now":  # an attribute of TorchCuda, set in __init__
            assert "self.now = time.perf_counter_ns" in inspect.getsource(TorchCuda.__init__)
            assert params(f) == params(lambda self: None)  # perf_counter_ns() takes none
            continue
        assert name in real, f"{fake.__name__}.{name} is no method of TorchCuda"
        assert params(f) == params(real[name]), f"{fake.__name__}.{name}"
    # the fuller fake stands in for all of it
    if fake is FakeStampCuda:
        assert set(real) <= set(methods(fake))


@pytest.mark.parametrize("fake, real", [(FakeEvent, torch.cuda.Event), (FakeStamper, Stamper)])
def test_the_fake_events_and_stampers_have_only_real_methods(fake, real):
    for name, f in methods(fake).items():
        assert hasattr(real, name), f"{fake.__name__}.{name} is no method of {real.__name__}"
        assert [p[0] for p in params(f)] == [p[0] for p in params(getattr(real, name))], \
            f"{fake.__name__}.{name}"


# -- cudaapi's calls of torch ---------------------------------------------------------

def _stubs() -> dict:
    """Functions and classes torch/_C/__init__.pyi declares, by dotted name."""
    path = Path(torch.__file__).parent / "_C" / "__init__.pyi"
    if not path.exists():
        pytest.skip(f"this torch build ships no {path}")
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            out[f"torch._C.{node.name}"] = node
        elif isinstance(node, ast.ClassDef):
            out[f"torch._C.{node.name}"] = node
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out[f"torch._C.{node.name}.{item.name}"] = item
                elif isinstance(item, ast.AnnAssign):
                    out[f"torch._C.{node.name}.{item.target.id}"] = item
    return out


def _stub_function(node: ast.FunctionDef):
    """A function with the stub's parameters: names, kinds, which have
    defaults (annotations and default values dropped)."""
    args = node.args
    for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if a is not None:
            a.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    scope = {}
    exec(f"def {node.name}({ast.unparse(args)}): pass", scope)
    return scope[node.name]


def _uses():
    """(dotted name, positional count, keywords, line) of each torch call in
    TorchCuda, through the aliases its __init__ makes; (name, None, None,
    line) for an attribute read on an object of a known kind."""
    src = inspect.getsource(cudaapi)
    cls = next(n for n in ast.parse(src).body
               if isinstance(n, ast.ClassDef) and n.name == "TorchCuda")
    imported, alias = {}, {}

    def dotted(node):
        if isinstance(node, ast.Name):
            return imported.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            if base == "self":
                return alias.get(node.attr, f"self.{node.attr}")
            return None if base is None else f"{base}.{node.attr}"
        return None

    for node in ast.walk(cls):
        if isinstance(node, ast.Import):
            imported.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            imported.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            target, value = node.targets[0], dotted(node.value)
            if dotted(target.value) == "self" and value and value.startswith("torch"):
                alias[target.attr] = value
    uses = []
    called = {id(n.func) for n in ast.walk(cls) if isinstance(n, ast.Call)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Call):
            f = node.func
            name = dotted(f)
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                    and f.value.id in KINDS:  # a method of an event, stream or stamper
                name = f"{KINDS[f.value.id].__module__}.{KINDS[f.value.id].__qualname__}" \
                       f".{f.attr}"
                uses.append((name, len(node.args) + 1, [k.arg for k in node.keywords],
                             node.lineno))
            elif name and name.startswith("torch"):
                uses.append((name, len(node.args), [k.arg for k in node.keywords],
                             node.lineno))
        elif isinstance(node, ast.Attribute) and id(node) not in called \
                and isinstance(node.value, ast.Name) and node.value.id in KINDS:
            kind = KINDS[node.value.id]
            uses.append((f"{kind.__module__}.{kind.__qualname__}.{node.attr}", None, None,
                         node.lineno))
    return uses


def _resolve(name: str):
    """What ``name`` is in this torch; None where it has only a CPU build's
    stand-in (a dummy type of torch._utils) or nothing."""
    obj = __import__(name.split(".")[0])
    for part in name.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return None if getattr(obj, "__module__", None) == "torch._utils" else obj


def _signature(name, stubs, where=""):
    """The real function's signature where Python can give it, else the stub's."""
    real = _resolve(name)
    if real is not None:
        try:
            return inspect.signature(real)
        except (TypeError, ValueError):  # a C function or class
            pass
    node = stubs.get(name)
    if isinstance(node, ast.ClassDef):
        node = stubs.get(f"{name}.__new__")
    assert isinstance(node, ast.FunctionDef), \
        f"{where or name}: not in this torch, and not declared in torch/_C/__init__.pyi"
    sig = inspect.signature(_stub_function(node))
    if node.name == "__new__":  # the class is called without cls
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


def test_the_layer_calls_torch_as_torch_declares_it():
    stubs, uses = _stubs(), _uses()
    called = {u[0] for u in uses}
    # the calls the walk must find; a new one is checked without being listed
    assert {"torch.cuda.Event", "torch.cuda.Stream", "torch.cuda.device",
            "torch.cuda.current_device", "torch.cuda.get_device_name",
            "torch._C._cuda_synchronize", "torch._C._cuda_getDevice",
            "torch._C._cuda_getCurrentStream", "torch._C._cuda_isCurrentStreamCapturing",
            "torch._C._CudaEventBase.record", "torch._C._CudaEventBase.query",
            "torch.cuda._sleep",
            "torch.cuda.streams.Event.elapsed_time",
            "torch.cuda.streams.Stream.stream_id"} <= called, sorted(called)
    for name, n_args, keywords, line in uses:
        where = f"cudaapi.py line {line}: {name}"
        real = _resolve(name)
        if real is not None and n_args is not None:
            assert callable(real), where
        if n_args is None:  # an attribute: the class or its C base has it
            cls, attr = name.rsplit(".", 1)
            bases = [c for c in _resolve(cls).__mro__ if c.__module__ == "torch._utils"
                     or c.__module__ == "torch._C"]
            assert real is not None or any(f"torch._C.{b.__name__}.{attr}" in stubs
                                           for b in bases), where
            continue
        sig = _signature(name, stubs, where)
        try:
            bound = sig.bind(*range(n_args), **dict.fromkeys(keywords))
        except TypeError as exc:
            pytest.fail(f"{where}{sig}: {exc}")
        var = [p.name for p in sig.parameters.values() if p.kind == p.VAR_KEYWORD]
        extra = bound.arguments.get(var[0], {}) if var else {}
        if extra:  # **kwargs passed on to the C class (Stream.__new__ does so)
            assert name in C_BASE, f"{where}: where do {sorted(extra)} go?"
            assert "super().__new__(cls, priority=priority, **kwargs)" in \
                inspect.getsource(_resolve(name).__new__)
            c_params = set(_signature(C_BASE[name], stubs).parameters)
            for key in extra:
                if key == "device_type" and key not in c_params:
                    # torch's stub leaves device_type out of _CudaStreamBase;
                    # torch.cuda.current_stream passes it to Stream itself
                    assert "device_type=" in inspect.getsource(torch.cuda.current_stream)
                    continue
                assert key in c_params, f"{where}: {C_BASE[name]} takes no {key}="
