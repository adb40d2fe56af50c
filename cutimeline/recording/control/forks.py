"""A process forked while recording: the recorder steps aside in it.

``os.fork`` copies the recording process whole: the dispatch mode on the
forking thread's stack, the global hooks and patches, the session and its
buffers. A DataLoader worker (``num_workers > 0`` with the fork start
method, Linux's default) is such a child, as is any ``multiprocessing``
process started with fork. None of them is recorded: nothing the child
appends could reach the parent's Timeline (its session is a copy), and
recording there made a worker's epoch 2–3× slower and its memory grow.

``recorder.py`` registers ``os.register_at_fork(after_in_child=...)`` once,
at import, which calls ``step_aside`` in the child: the parent pays nothing
per op (no process-id check on the hot path). In the child the session is
off, so a mode of the recording that stays on a dispatch stack passes every
op straight through; the hooks and patches are removed (the originals are
back, as after ``stop()``); and the recording's mode is popped from the
forking thread's stack when it is on top (the usual case: a DataLoader
iterated inside the ``with`` block), so the child's ops do not pass through
Python at all. A mode of the user's entered above it keeps it on the stack,
passing through. The child's copy of the buffers is left as it is: freeing
it would write to every page the parent filled and so copy them all.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._python_dispatch import _pop_mode

from ..opstream import Mode

__all__ = ["step_aside"]


def step_aside(session: Any, hooks: Any, mode: Mode | None) -> None:
    """In a forked child: make the recording of ``session`` (its global
    ``hooks``, ``mode`` the one ``start()`` entered) inert. Never raises:
    the child's program goes on whatever happens here."""
    session.off = True  # before anything that could fail
    try:
        if hooks is not None:
            hooks.remove()
        n = torch._C._len_torch_dispatch_stack()
        top = torch._C._get_dispatch_stack_at(n - 1) if n else None
        if not isinstance(top, Mode) or top.s is not session:
            return  # none of ours on top: ours, if below, passes through
        if top is mode:
            mode.__exit__(None, None, None)  # restores torch's mode flags too
        else:
            _pop_mode()  # a recorded thread's, pushed bare (hooks._record_thread)
    except Exception as exc:
        warnings.warn(f"cutimeline could not fully step aside in a process forked "
                      f"while recording ({type(exc).__name__}: {exc}); it records "
                      f"nothing there, but some of its hooks may still run.",
                      RuntimeWarning, stacklevel=2)
