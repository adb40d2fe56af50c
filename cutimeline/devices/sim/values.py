"""SimGPU's values: what a host read of a simulated tensor returns.

Meta tensors have no values, yet programs read them and let what they
read steer them: a loss logged each step, a token compared with the
end-of-sequence id, a stopping flag, a NaN guard. SimGPU does the read's
sync (the recorder's rules) and answers with a value of one of two
kinds, so that loops written for real data run, and end, as they would:

* **Exact, where the host decided.** A small tensor (storage at most
  ``VALUE_ELEMENTS`` elements) made from host data (a fill, a copy of a
  CPU tensor, any op whose inputs all carry values) carries real values
  in a CPU buffer beside its storage, shared by views and in-place
  writes. So a flag the host put on the device (a length limit's
  ``torch.full(..., is_done)``, ``generate()``'s
  ``unfinished_sequences``, a step counter) reads as on CUDA.
* **Modelled, where the data decides.** A value computed from tensors
  without values is drawn as healthy data would give: indices
  (``argmax``, ``topk``, ``sort``, ``multinomial``, ...) uniform over
  the dimension, so a sampled token is end-of-sequence with probability
  1/vocabulary; rare-event predicates (``isnan``, ``any``, ``isin``)
  false, rule predicates (``isfinite``, ``all``) true, GradScaler's
  non-finite flag 0; random ops from the simulator's generator; any
  other float uniform in [0, 1) (finite: overflow guards never fire),
  booleans False, integers 1. Small inputs without values mixed with
  ones with values are drawn and the op computed (``cat`` of a prompt and
  a sampled token). ``SimGPU(values=fn)``, ``fn(site, shape, dtype)``
  returning a number, an array or None, answers modelled reads first.

**Never hang.** Modelled values can steer a loop real data would end
(``while residual.item() > 1e-8``). Each read site (the user's source
line) may answer ``read_limit`` modelled reads between two step
boundaries; past that SimGPU warns once for the site and answers with
ending values: a boolean the opposite of the one it gave most, numbers 0.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["SimValues", "VALUE_ELEMENTS", "user_site"]

#: storages of up to this many elements carry values; larger ones are not
#: what a loop reads back, and would cost host memory and time. A count of
#: elements, not bytes: a comparison's bool output is then small exactly
#: when its operands are, so a predicate over data is computed, or ruled,
#: alike all along its chain
VALUE_ELEMENTS = 1 << 16

_Tensor = torch.Tensor
_U8 = torch.uint8
_META = "meta"
# op base names whose output indexes a dimension of the input: (dim argument
# position, its keyword), the output (or its second) uniform over that size
_INDEX = {"argmax": 1, "argmin": 1, "max": 1, "min": 1, "topk": 2, "sort": 1,
          "kthvalue": 2, "mode": 1, "median": 1, "nanmedian": 1, "cummax": 1,
          "cummin": 1, "multinomial": None}
_FALSE = frozenset({"isnan", "isinf", "isposinf", "isneginf", "any", "isin"})
_TRUE = frozenset({"isfinite", "all"})
# ops that report non-finite values into a flag they write (argument 1):
# healthy data has none, so the flag reads 0 (GradScaler then steps)
_FINITE = frozenset({"_amp_foreach_non_finite_check_and_unscale_"})
# in-place ops that overwrite their target without reading it
_OVERWRITE = frozenset({"fill_", "zero_", "copy_", "normal_", "uniform_", "random_",
                        "bernoulli_", "exponential_", "geometric_", "log_normal_",
                        "cauchy_", "_to_copy"})
# ops that draw random numbers (the overloads without a generator argument too)
_RANDOM = frozenset({"rand", "randn", "randint", "randperm", "normal", "bernoulli",
                     "rand_like", "randn_like", "randint_like", "poisson", "binomial",
                     "native_dropout", "_standard_gamma", "_sample_dirichlet",
                     "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                     "geometric_", "log_normal_", "cauchy_"})
_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


@dataclass(frozen=True)
class _Kind:
    """What the value model needs to know of one op, worked out once."""
    base: str
    #: "index", "false", "true", "random" or ""
    rule: str
    #: positions of arguments the op writes (in-place, out=)
    writes: tuple[int, ...]
    out_kw: bool
    overwrite: bool
    #: its schema has no tensor argument: a factory
    factory: bool


@contextlib.contextmanager
def _own_work():
    """The value model's own CPU work, unseen by the program's dispatch and
    function modes (a mode of the user's below the recorder's would see
    it), and outside inference mode (its buffers are written in place
    later, whatever mode the program is in)."""
    with _disable_current_modes(), torch._C.DisableTorchFunction(), \
            torch.inference_mode(False):
        yield


def _kind(func: Any) -> _Kind:
    schema = getattr(func, "_schema", None)
    name = schema.name.split("::")[-1] if schema is not None else str(func)
    base = name.split(".")[0]
    writes, out_kw, tensors, random = [], False, 0, False
    for i, a in enumerate(schema.arguments if schema is not None else ()):
        t = str(a.type)
        if "Tensor" in t:
            tensors += 1
        if "Generator" in t:
            random = True
        if a.alias_info is not None and a.alias_info.is_write:
            if a.kwarg_only:
                out_kw = True
            else:
                writes.append(i)
    rule = "index" if base in _INDEX else "false" if base in _FALSE else \
        "true" if base in _TRUE else "finite" if base in _FINITE else \
        "random" if random or base in _RANDOM else ""
    return _Kind(base, rule, tuple(writes), out_kw, base in _OVERWRITE, tensors == 0)


def _flat(obj: Any, into: list) -> list:
    if isinstance(obj, _Tensor):
        into.append(obj)
    elif type(obj) is list or type(obj) is tuple:
        for o in obj:
            if isinstance(o, _Tensor):
                into.append(o)
    return into


def _key(t: _Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested...
        return None


@dataclass(eq=False)
class SimValues:
    """The value part of ``SimGPU`` (see the module doc): buffers of
    values beside small simulated storages, the rules that make them, the
    reads, and the bound on reads that steer loops."""

    seed: int = 0
    read_limit: int = 1000
    hook: Callable | None = None
    limit: int = VALUE_ELEMENTS
    #: storage id -> [uint8 CPU buffer, exact, weakref to the storage]
    store: dict[int, list] = field(default_factory=dict, init=False)
    #: id(func) -> _Kind (the entry keeps func alive)
    kinds: dict[int, tuple] = field(default_factory=dict, init=False)
    #: read site -> [modelled reads since the last step, Trues, Falses, warned]
    sites: dict[str, list] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.gen = torch.Generator().manual_seed(self.seed + 1)
        self.rng = np.random.default_rng(self.seed + 2)

    def reset(self) -> None:
        """A new recording: no values, no counts (the generators go on)."""
        self.store.clear()
        self.sites.clear()

    def step(self) -> None:
        """A step boundary: the read bound counts from here."""
        for s in self.sites.values():
            s[0] = 0

    # -- the store ---------------------------------------------------------------
    def value(self, t: _Tensor) -> tuple[_Tensor, bool] | None:
        """(t's values as a CPU tensor of its shape and strides, exact) or
        None when it has none."""
        if t.device.type != _META:
            return t, True
        k = _key(t)
        e = self.store.get(k) if k is not None else None
        if e is None:
            return None
        try:
            return e[0].view(t.dtype).as_strided(t.size(), t.stride(), t.storage_offset()), e[1]
        except RuntimeError:  # resized, or reinterpreted past its end
            self.store.pop(k, None)
            return None

    def _buffer(self, t: _Tensor, exact: bool, fill: Callable | None = None) -> _Tensor | None:
        """A fresh buffer for ``t``'s storage (zeros, or ``fill(n, dtype)``
        over the whole storage), its view for ``t`` returned."""
        st = t.untyped_storage()
        n = st.nbytes()
        size = t.element_size()
        if n > self.limit * size:
            return None
        k = st._cdata
        if fill is None or n % size:
            buf = torch.zeros(n, dtype=_U8)
        else:
            buf = fill(n // size, t.dtype).view(_U8)
        store = self.store
        store[k] = [buf, exact, weakref.ref(st, lambda _, k=k: store.pop(k, None))]
        return buf.view(t.dtype).as_strided(t.size(), t.stride(), t.storage_offset())

    def _small(self, t: _Tensor) -> bool:
        try:
            return t.untyped_storage().nbytes() <= self.limit * t.element_size()
        except (RuntimeError, NotImplementedError, TypeError):
            return False

    def drop(self, t: _Tensor) -> None:
        k = _key(t)
        if k is not None:
            self.store.pop(k, None)

    # -- drawing -------------------------------------------------------------------
    def draw(self, n: int, dtype: torch.dtype) -> _Tensor:
        """``n`` modelled values of ``dtype`` (see the module doc)."""
        if dtype == torch.bool:
            return torch.zeros(n, dtype=dtype)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.rand(n, generator=self.gen).to(dtype)
        return torch.ones(n, dtype=dtype)

    def _index_values(self, x: _Tensor, out: _Tensor, dim: Any) -> _Tensor:
        n = x.numel() if dim is None or x.dim() == 0 else x.size(dim)
        return torch.randint(0, max(int(n), 1), tuple(out.shape), generator=self.gen,
                             dtype=out.dtype)

    # -- after each op ---------------------------------------------------------------
    def kind(self, func: Any) -> _Kind:
        k = self.kinds.get(id(func))
        if k is None:
            k = _kind(func)
            self.kinds[id(func)] = (k, func)
            return k
        return k[0]

    def after(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Give the small outputs (and in-place targets) of op ``func`` their
        values: computed, drawn, or none (see the module doc)."""
        k = self.kind(func)
        if k.rule == "finite":
            return self._finite(args)
        outs = [o for o in _flat(out, []) if o.device.type == _META]
        targets = [o for o in outs if o.numel() <= self.limit]
        written: list = []
        for i in k.writes:
            if i < len(args):
                _flat(args[i], written)
        if k.out_kw:
            _flat(kwargs.get("out"), written)
        written = [w for w in written if w.device.type == _META]
        if not targets and not written:
            return
        targets = [o for o in targets if self._small(o)]
        for w in written:
            if all(w is not o for o in targets) and self._small(w):
                targets.append(w)
        if not targets:
            return
        try:
            with _own_work():
                self._give(k, func, args, kwargs, out, targets, written)
        except Exception:  # no CPU kernel, odd arguments: no values, as before
            for t in targets:
                self.drop(t)

    def _give(self, k: _Kind, func: Any, args: tuple, kwargs: dict, out: Any,
              targets: list, written: list) -> None:
        inputs = _flat(list(args) + list(kwargs.values()), [])
        inputs = [t for t in inputs if not (k.overwrite and any(t is w for w in written))
                  and not (k.out_kw and t is kwargs.get("out"))]
        exact, missing, big = True, [], False
        for t in inputs:
            if t.device.type != _META:
                continue
            v = self.value(t)
            if v is None:
                if self._small(t):
                    missing.append(t)
                else:
                    big = True
            elif not v[1]:
                exact = False
        if k.rule in ("index", "false", "true") and (missing or big):
            return self._rule(k, args, kwargs, out, targets)
        if big:  # computed from large data without values: none
            for t in targets:
                self.drop(t)
            return
        for t in missing:  # small inputs without values: drawn, and kept
            self._buffer(t, False, self.draw)
            exact = False
        if k.rule == "random":
            exact = False
        self._compute(k, func, args, kwargs, out, targets, exact, written)

    def _compute(self, k: _Kind, func: Any, args: tuple, kwargs: dict, out: Any,
                 targets: list, exact: bool, written: list) -> None:
        """Run ``func`` on the CPU over its inputs' values; the targets'
        buffers take the results."""
        for w in written:  # a target the op writes: its buffer, to write into
            if self.value(w) is None:
                whole = w.numel() * w.element_size() == w.untyped_storage().nbytes()
                if self._buffer(w, exact and whole and k.overwrite) is None:
                    return
        cpu = torch.device("cpu")

        def host(a: Any) -> Any:
            if isinstance(a, _Tensor):
                return self.value(a)[0] if a.device.type == _META else a
            if type(a) is list or type(a) is tuple:
                return type(a)(host(b) for b in a)
            if isinstance(a, torch.device) and a.type == _META:
                return cpu
            return a
        cargs = tuple(host(a) for a in args)
        ckw = {n: (cpu if n == "device" and v is not None else host(v))
               for n, v in kwargs.items()}
        if "pin_memory" in ckw:  # nothing to pin for on a CPU-only build
            ckw["pin_memory"] = None
        if k.rule == "random":  # from the simulator's generator, not the program's
            saved = torch.default_generator.get_state()
            torch.default_generator.set_state(self.gen.get_state())
            try:
                r = func(*cargs, **ckw)
            finally:
                self.gen.set_state(torch.default_generator.get_state())
                torch.default_generator.set_state(saved)
        else:
            r = func(*cargs, **ckw)
        results = _flat(r, [])
        outs = _flat(out, [])
        for o, v in zip(outs, results):
            if o.device.type != _META or not any(o is t for t in targets):
                continue
            if any(o is w for w in written):  # written in place through its view
                self._mark(o, exact)
                continue
            view = self._buffer(o, exact)
            if view is not None:
                view.copy_(v)
        for w in written:
            if not any(w is o for o in outs):
                self._mark(w, exact)

    def _finite(self, args: tuple) -> None:
        """A non-finite check found nothing: its flag (argument 1) reads 0,
        modelled, as for healthy data."""
        flag = args[1] if len(args) > 1 else None
        if isinstance(flag, _Tensor) and flag.device.type == _META and self._small(flag):
            with _own_work():
                self._buffer(flag, False)  # zeros

    def _mark(self, t: _Tensor, exact: bool) -> None:
        e = self.store.get(_key(t))
        if e is not None and not exact:
            e[1] = False

    def _rule(self, k: _Kind, args: tuple, kwargs: dict, out: Any, targets: list) -> None:
        """Outputs of an op whose rule gives them (module doc), modelled."""
        outs = _flat(out, [])
        for i, o in enumerate(outs):
            if not any(o is t for t in targets) or o.device.type != _META:
                continue
            if k.rule == "index" and o.dtype == torch.long and (
                    i == 1 or k.base in ("argmax", "argmin", "multinomial")):
                pos = _INDEX[k.base]
                dim = None if pos is None else (
                    args[pos] if len(args) > pos else kwargs.get("dim"))
                if dim is None and k.base not in ("argmax", "argmin"):
                    dim = -1  # categories, sort, topk: the last dimension by default
                vals = self._index_values(args[0], o, dim)
                view = self._buffer(o, False)
            elif k.rule in ("false", "true") and o.dtype == torch.bool:
                view = self._buffer(o, False)
                vals = k.rule == "true"
            else:
                view = self._buffer(o, False, self.draw)
                continue
            if view is not None:
                view.copy_(vals) if isinstance(vals, _Tensor) else view.fill_(vals)

    # -- reads -----------------------------------------------------------------------
    def host(self, t: _Tensor) -> _Tensor:
        """``t``'s values as a CPU tensor (a copy): a read (``.cpu()``,
        ``.tolist()``, ``.item()``)."""
        with _own_work():
            return self._host(t)

    def _host(self, t: _Tensor) -> _Tensor:
        v = self.value(t)
        if v is not None and v[1]:
            return v[0].clone()
        small = t.numel() <= self.limit
        site = user_site()
        got = self._hooked(site, t)
        if got is not None:
            return got
        if v is None and small and self._small(t):  # drawn once, and kept
            self._buffer(t, False, self.draw)
            v = self.value(t)
        if v is None:  # a large copy: zeros, as a read of garbage would be
            return torch.zeros(t.shape, dtype=t.dtype)
        return self._bounded(site, v[0].clone())

    def scalar(self, t: _Tensor) -> Any:
        """``t.item()``: its one value as a Python number."""
        return self.host(t).reshape(-1)[0].item()

    def _hooked(self, site: str, t: _Tensor) -> _Tensor | None:
        if self.hook is None:
            return None
        got = self.hook(site, tuple(t.shape), t.dtype)
        if got is None:
            return None
        return torch.as_tensor(np.asarray(got)).to(t.dtype).expand(t.shape).clone()

    def _bounded(self, site: str, vals: _Tensor) -> _Tensor:
        """A modelled read at ``site``, counted; past ``read_limit`` since
        the last step, ending values (module doc)."""
        s = self.sites.get(site)
        if s is None:
            s = self.sites[site] = [0, 0, 0, False]
        s[0] += 1
        if vals.dtype == torch.bool and vals.numel() == 1:
            s[1 if bool(vals.reshape(-1)[0]) else 2] += 1
        if s[0] <= self.read_limit:
            return vals
        if not s[3]:
            s[3] = True
            warnings.warn(
                f"SimGPU: the read at {site} was answered with modelled values "
                f"{self.read_limit:,} times since the last step; a loop it steers may "
                f"not end on simulated values, so from here that read gives ending "
                f"values (a boolean the opposite of its usual answer, numbers 0). "
                f"Pass SimGPU(values=...) to answer it, or read_limit= to allow more.",
                RuntimeWarning, stacklevel=2)
        if vals.dtype == torch.bool:
            return torch.full_like(vals, s[2] >= s[1])
        return torch.zeros_like(vals)


def user_site() -> str:
    """'file:line' of the innermost frame outside torch and cutimeline."""
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not (path.startswith(_TORCH) or path.startswith(_HERE) or path.startswith("<")):
            return f"{path}:{f.f_lineno}"
        f = f.f_back
    return "?"
