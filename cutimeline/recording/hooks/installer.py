"""Host spans and the hooks that make them, installed only while recording.

The recorder (``recorder.py``) owns the op stream; this module owns what
it learns around the ops: the module stack (``encoder.layers.0.self_attn``),
steps, fetches, phases, threads started while recording, Inductor graph
calls (``compiled.py``), on CUDA the blocking calls and graph replays
that are not aten ops (``cuda.py``), and on a simulated host Python's
garbage collections (``gcpauses.py``). ``Hooks.install()`` at start and
``Hooks.remove()`` at stop tie every hook to one recording; every patched
attribute is restored exactly.

Spans are tuples ``(kind, name_id, thread, depth, number, begin_ns,
end_ns)`` appended to the calling thread's ``Writer`` by ``Session.span``,
which counts them against ``max_ops``. ``depth`` is the nesting among
spans of that kind on that thread (for MODULE the module depth, 0 for
the root); ``number`` is the step number of STEP spans.

Where they come from: MODULE / FORWARD from global module hooks (the
post hook with ``always_call``, so a forward that raises still pops its
module; FORWARD for a root module, entered with an empty stack);
BACKWARD from a wrapper of ``torch.autograd._engine_run_backward``, which
``backward`` and ``grad`` all call (a pass started any other way has no
grad_fn); OPTIMIZER from global optimizer hooks, whose post hook also
ends a step; DATA from wrappers of ``DataLoader.__iter__`` and
``__next__`` (``fetches.py``); USER from ``ranges.py``.

While the session is paused (``Session.calibrate``) the module and
backward hooks do nothing; while torch.compile traces (Dynamo runs the
Python of hooks it meets) every hook does nothing, so compiled regions
have no MODULE spans and their ops carry the calling module. torch's
warning about global module hooks on a compiled module is expected.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from time import perf_counter_ns as _now
from typing import Any, Callable

from ...timeline.schema import NONE, SpanKind

from . import compiled, cuda, fetches
from .gcpauses import collections_for
from .ranges import patch_nvtx
from ..opstream import skip_dynamo

try:  # torch.compile traces into global hooks; they must do nothing there
    from torch.compiler import is_compiling
except ImportError:  # torch < 2.3
    from torch._dynamo import is_compiling

__all__ = ["Hooks", "is_compiling"]

_MODULE, _FORWARD, _BACKWARD = int(SpanKind.MODULE), int(SpanKind.FORWARD), int(SpanKind.BACKWARD)
_DATA, _OPTIMIZER = int(SpanKind.DATA), int(SpanKind.OPTIMIZER)


class Hooks:
    """The global hooks and patches of one recording (see the module doc)."""

    def __init__(self, session: Any, *, modules: bool, threads: bool):
        self.s = session
        self.modules, self.threads = modules, threads
        self._handles: list[Any] = []
        self._patches: list[tuple[Any, str, Any]] = []
        self._removed = False
        self.gc = collections_for(session)  # a simulated host's collections (gcpauses.py)
        self.gc_given: dict[str, int] = {}  # what it gave back, once removed
        # id(root module) -> (root, {id(module): path string id})
        self._paths: dict[int, tuple[Any, dict[int, int]]] = {}

    # -- lifetime --------------------------------------------------------------
    def install(self) -> None:
        import torch
        import torch.nn.modules.module as nn_module
        import torch.optim.optimizer as optim
        import torch.utils.data.dataloader as dl
        try:
            if self.modules:
                self._handles.append(nn_module.register_module_forward_pre_hook(self._pre))
                self._handles.append(nn_module.register_module_forward_hook(
                    self._post, always_call=True))
            self._handles.append(optim.register_optimizer_step_pre_hook(self._opt_pre))
            self._handles.append(optim.register_optimizer_step_post_hook(self._opt_post))
            self._patch(dl._BaseDataLoaderIter, "__next__", self._data("next(DataLoader)"))
            self._patch(dl.DataLoader, "__iter__", self._data("iter(DataLoader)"))
            self._patch(torch.autograd, "_engine_run_backward", self._backward)
            if self.threads:
                self._patch(threading.Thread, "start", self._start)
            patch_nvtx(self.s, torch.cuda.nvtx, self._patch, is_compiling)
            kind = getattr(self.s.device, "kind", "")
            if kind == "cuda":
                cuda.install(torch, self.s, self._patch)
            elif kind == "sim":
                cuda.install_sim(self.s, self._patch)
            fetches.install(self.s, self._patch)  # DataLoader fetches (fetches.py)
            if self.gc is not None:
                self._patch(gc, "collect", self.gc.collect)
                self._patch(sys, "unraisablehook", self.gc.unraisable)
                self.gc.install()
            if not self._install_compiled():
                self.s.at_boundary.append(self._install_compiled)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        self._removed = True  # a late patch (_install_compiled) comes no more
        if self.gc is not None:
            self.gc_given = self.gc.remove()
        for h in reversed(self._handles):
            h.remove()
        for owner, name, original in reversed(self._patches):
            if original is _NOT_OWN:  # its class's attribute, patched on the instance
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._handles.clear()
        self._patches.clear()
        self._paths.clear()  # drop the references to root modules

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        own = isinstance(owner, type) or name in getattr(owner, "__dict__", (name,))
        setattr(owner, name, make(original))
        self._patches.append((owner, name, original if own else _NOT_OWN))

    # -- module stack ----------------------------------------------------------
    def _path(self, root: Any, module: Any, parent: int) -> int:
        """String id of ``module``'s path relative to ``root``, as
        ``root.named_modules()`` names it (the root itself: its class name).
        A module outside root's tree: its parent's path and its class name."""
        entry = self._paths.get(id(root))
        if entry is None or entry[0] is not root:
            intern = self.s.intern
            names = {id(m): intern(n or type(root).__name__)
                     for n, m in root.named_modules()}
            entry = self._paths[id(root)] = (root, names)
        sid = entry[1].get(id(module))
        if sid is None:  # not cached: a transient module's id may be reused
            s = self.s
            sid = s.intern(f"{s.strings.values[parent]}.{type(module).__name__}")
        return sid

    def _pre(self, module: Any, args: Any) -> None:
        if is_compiling() or self.s.paused:
            return
        t = _now()
        w = self.s.writer()
        st = w.stack
        sid = self._path(st[0][0], module, st[-1][1]) if st else \
            self._path(module, module, NONE)
        st.append((module, sid, t, w.ctx))
        w.ctx = self.s.context(sid, len(st) - 1)
        if self.s.lost is not None:  # a device with a host clock of its own
            self.s.lost(_now() - t + self.s.module_entry_ns)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if is_compiling() or self.s.paused:
            return
        t = _now()
        w = self.s.writer()
        st = w.stack
        for i in range(len(st) - 1, -1, -1):
            if st[i][0] is module:
                break
        else:
            return  # its forward began before the recording did
        _, sid, t0, ctx = st[i]
        del st[i:]
        w.ctx = ctx
        self.s.span(w, _MODULE, sid, i, t0, end_ns=t)
        if i == 0:
            self.s.span(w, _FORWARD, sid, 0, t0, end_ns=t)
        if self.s.lost is not None:  # the module's entry price is charged in _pre
            self.s.lost(_now() - t)

    # -- optimizer and steps -----------------------------------------------------
    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not is_compiling():
            self.s.writer().optimizers.append(_now())

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if is_compiling():
            return
        w = self.s.writer()
        if w.optimizers:
            t0 = w.optimizers.pop()
            self.s.span(w, _OPTIMIZER, self.s.intern(f"{type(opt).__name__}.step"),
                        len(w.optimizers), t0)
        self.s.boundary(w, manual=False)

    # -- wrappers ------------------------------------------------------------------
    def _data(self, name: str) -> Callable[[Any], Any]:
        """A DATA span around a DataLoader call: it only times the call and
        marks the thread as fetching (threads started meanwhile, such as
        the pin-memory thread, fetch for good)."""
        s, sid = self.s, self.s.intern(name)

        def make(original: Any) -> Any:
            def fetch(loader: Any, *args: Any, **kwargs: Any) -> Any:
                if is_compiling():
                    return original(loader, *args, **kwargs)
                w = s.writer()
                w.data += 1
                w.waited = NONE
                t0 = _now()
                try:
                    return original(loader, *args, **kwargs)
                finally:
                    w.data -= 1
                    # the wait for a worker's batch, where one was modelled
                    s.span(w, _DATA, sid, w.data, t0, number=w.waited)
                    w.waited = NONE
            return fetch
        return make

    def _backward(self, original: Any) -> Any:
        s, sid = self.s, self.s.intern("backward")

        def run_backward(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or s.paused:
                return original(*args, **kwargs)
            w = s.writer()
            t0 = _now()
            with s.lock:
                s.backward += 1
            try:
                return original(*args, **kwargs)
            finally:
                with s.lock:
                    s.backward -= 1
                s.span(w, _BACKWARD, sid, 0, t0)
        return run_backward

    def _start(self, original: Any) -> Any:
        s = self.s

        def start(thread: Any, *args: Any, **kwargs: Any) -> Any:
            if not s.off and not is_compiling():
                _record_thread(s, thread, s.writer().data > 0)
            return original(thread, *args, **kwargs)
        return start

    # -- torch.compile: calls of Inductor's compiled graphs (compiled.py) -----------
    def _install_compiled(self) -> bool:
        """Wrap ``CompiledFxGraph.__call__`` once the program has loaded
        Inductor; False while it has not (retried at every step boundary)."""
        if self.s.off or self._removed:
            return True
        skip_dynamo()   # a first torch.compile may have loaded dynamo since
        cls = compiled.graph_class()
        if cls is None:
            return False
        if cls and all(o is not cls for o, _, _ in self._patches):
            self._patch(cls, "__call__", lambda original: compiled.wrap(self.s, original))
        return True


_NOT_OWN = object()  # _patches: delete the instance attribute the patch made


def _record_thread(s: Any, thread: Any, data: bool) -> None:
    """Make ``thread`` record its ops: the dispatch-mode stack is
    thread-local, so its run() pushes a mode of its own and pops it at the
    end. The push bypasses ``TorchDispatchMode.__enter__``, whose
    process-wide flags would be restored out of order by threads."""
    import torch
    from torch.utils._python_dispatch import _pop_mode, _push_mode
    run = thread.run
    ref = weakref.ref(s)

    def run_recorded() -> Any:
        session = ref()
        if session is None or session.off:
            return run()
        w = session.writer()
        w.data += data  # a thread started by a DataLoader does its work
        mode = session.mode_for(w)
        _push_mode(mode)
        try:
            return run()
        finally:
            n = torch._C._len_torch_dispatch_stack()
            if n and torch._C._get_dispatch_stack_at(n - 1) is mode:
                _pop_mode()
    thread.run = run_recorded
