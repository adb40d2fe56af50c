"""The user's named ranges as USER spans: ``ctl.span``, torch's
``record_function`` and NVTX ranges, nested on their thread as torch.profiler
nests them.

``torch.profiler.record_function`` (and ``torch.autograd.profiler``'s, the
same class) calls two ops, ``profiler::_record_function_enter_new(name)``,
which returns a handle, and ``profiler::_record_function_exit(handle)``;
the op stream sees both as ops (they stay ops rows, flagged VIEW). The
session gives their signatures a callable that opens and closes a USER
span around the op (``range_call``), worked out once per op kind when its
signature is made: ops of every other kind run exactly as before, so an
unused ``record_function`` costs nothing per op. The ranges torch writes
itself are left to the hooks that already make their spans (DataLoader
fetches, optimizer steps) or to no one (torch.profiler's ``ProfilerStep#N``).

NVTX ranges (``torch.cuda.nvtx.range_push``/``range_pop``, and
``torch.cuda.nvtx.range``, which calls them) are user spans too: the two
functions are wrapped while recording (``patch_nvtx``), a cost per range,
none per op. A push that raises (no NVTX in the build) opens nothing.

Open ranges live on the thread's ``Writer.users`` stack as ``(session,
name id, begin_ns, key)``: ``key`` None for ``ctl.span``, the handle's
hash for ``record_function`` (``_key``), ``NVTX`` for NVTX. A span's ``depth`` is the
number of ranges of any of the three open around it on its thread. A
range closes the innermost open one of its key, so ranges of one kind
closed out of order (an async ``record_function``) still pair up.
"""

from __future__ import annotations

from time import perf_counter_ns as _now
from typing import Any, Callable

from ...timeline.schema import NONE, SpanKind

__all__ = ["ENTER_OPS", "EXIT_OPS", "TORCH_RANGES", "NVTX", "open_range", "close_range",
           "range_call", "patch_nvtx"]

_USER = int(SpanKind.USER)
ENTER_OPS = frozenset({"profiler::_record_function_enter_new",
                       "profiler::_record_function_enter"})
EXIT_OPS = frozenset({"profiler::_record_function_exit"})
# record_function ranges torch writes itself: recorded by the hooks, or not a span
TORCH_RANGES = ("enumerate(DataLoader)", "Optimizer.", "ProfilerStep#")
NVTX = "nvtx"


def open_range(s: Any, w: Any, name: Any, key: Any) -> None:
    """Open a range named ``name`` on writer ``w``'s thread (nothing after
    max_ops cut the recording: no new name is interned then)."""
    w.users.append((s, NONE if s.off else s.intern(str(name)), _now(), key))


def close_range(s: Any, w: Any, key: Any) -> None:
    """Close the innermost open range of ``key`` on ``w``'s thread as a
    USER span at its depth; nothing when none is open (it began before
    the recording)."""
    users = w.users
    for i in range(len(users) - 1, -1, -1):
        if users[i][3] == key:
            owner, name, t0, _ = users.pop(i)
            if owner is s and name != NONE:
                s.span(w, _USER, name, i, t0)
            return


def _key(handle: Any) -> Any:
    """A record_function handle's key: its hash, which for the
    ``_RecordFunction`` script object is its C++ pointer (the Python object
    that reaches the exit op is another one than enter returned)."""
    try:
        return hash(handle)
    except TypeError:
        return "record_function"


def range_call(s: Any, name: str, call: Callable) -> Callable:
    """What runs op ``name`` (overload stripped) for the op stream:
    ``call`` itself, or for record_function's enter and exit ops ``call``
    with the range opened after it or closed before it."""
    if name in ENTER_OPS:
        def enter(*args: Any, **kwargs: Any) -> Any:
            handle = call(*args, **kwargs)
            label = args[0] if args else kwargs.get("name")
            if isinstance(label, str) and not label.startswith(TORCH_RANGES):
                open_range(s, s.writer(), label, _key(handle))
            return handle
        return enter
    if name in EXIT_OPS:
        def exit_(*args: Any, **kwargs: Any) -> Any:
            handle = args[0] if args else kwargs.get("handle")
            close_range(s, s.writer(), _key(handle))
            return call(*args, **kwargs)
        return exit_
    return call


def patch_nvtx(s: Any, nvtx: Any, patch: Callable, compiling: Callable[[], bool]) -> None:
    """Wrap ``nvtx.range_push``/``range_pop`` (module ``torch.cuda.nvtx``)
    with ``patch`` (``Hooks._patch``, which restores them at stop)."""
    if not (hasattr(nvtx, "range_push") and hasattr(nvtx, "range_pop")):
        return

    def push(original: Callable) -> Callable:
        def range_push(msg: Any) -> Any:
            out = original(msg)
            if not compiling():
                open_range(s, s.writer(), msg, NVTX)
            return out
        return range_push

    def pop(original: Callable) -> Callable:
        def range_pop() -> Any:
            out = original()
            if not compiling():
                close_range(s, s.writer(), NVTX)
            return out
        return range_pop
    patch(nvtx, "range_push", push)
    patch(nvtx, "range_pop", pop)
