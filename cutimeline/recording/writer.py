"""The Writer: what one recording thread appends while recording.

Each thread that records has one ``Writer`` (``Session.writer``), made on
the thread's first access through ``_Local``; its lists hold plain tuples
(ops, launches, spans), appended without a lock.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Writer"]


class Writer:
    """What one thread appends while recording. Only its own thread writes
    here, except the autograd engine's device threads, which reach their
    caller's mode; every record is one atomic ``list.append``."""

    __slots__ = ("thread", "ident", "name", "ops", "launches", "spans", "ctx",
                 "stack", "data", "users", "optimizers")

    def __init__(self, thread: int):
        self.thread, self.ident = thread, threading.get_ident()
        self.name = threading.current_thread().name
        self.ops: list[tuple] = []       # (seq, t0, t1, sig, ctx, grad_fn, flags)
        self.launches: list[tuple] = []  # (seq, stream, begin_event, end_event, gpu kind)
        self.spans: list[tuple] = []     # (kind, name, thread, depth, number, begin, end)
        self.ctx = 0                     # context id of the innermost module
        self.stack: list[tuple] = []     # open modules: (module, path id, begin_ns, ctx before)
        self.data = 0                    # > 0 inside a DataLoader fetch
        self.users: list[tuple] = []     # open user spans: (session, name id, begin_ns)
        self.optimizers: list[int] = []  # begin_ns of open optimizer steps


class _Local(threading.local):
    """Each thread's Writer, made on its first access. threading.local keeps
    its __init__ arguments for every new thread: a weak reference, so that
    the session and its local do not keep each other alive."""

    def __init__(self, session: Any):
        self.w = session().new_writer()
