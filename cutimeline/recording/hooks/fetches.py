"""DataLoader fetches as the program has them without the recorder.

**Single-process fetches** (``num_workers=0``): the dataset's
``__getitem__`` and the collate run in the recording thread, and each of
their small CPU-tensor ops through the dispatch mode costs several times
what the op does (a tokenized batch of 32, about 330 ops: 0.55 ms bare,
2.4 ms with any Python dispatch mode on, 3.5 ms recorded: torch's
dispatch into Python ≈ 6 µs an op, the recorder ≈ 3 µs). A fetch's ops
are the dataset's host work, unrecorded in a worker process too. So an
iterator's first fetch is recorded whole and, when it launched nothing on
the device, its later fetches run with the mode stepped off the dispatch
stack: one DATA span each, without op rows. A dataset that launches in
its first fetch keeps every op recorded.

**Worker processes on a simulated host clock** (``SimGPU``,
``devices/sim/host.py``): the main loop runs as fast as beside a real GPU
while the workers run in real time, so a wall-clock wait for a batch says
nothing (a loop whose one worker needs 11 ms a batch reads as if batches
were always ready). The wait is modelled on the virtual clock instead:
each worker writes the CPU time it spends on each batch to a shared ring
(``timed_worker_loop``), batches are requested and made as
``_MultiProcessingDataLoaderIter`` does (``_Clock``), and the fetch ends
at ``max(its start, ready)`` plus the main thread's own CPU time in it.
The DATA span keeps the wait in its ``number``
(``analysis/replay/compensation.fetch_waits``). So ``num_workers``
matters as it does beside a GPU. Iterators made before the recording
began, and threads other than the loader's, keep the real clock.
"""

from __future__ import annotations

import functools
import multiprocessing
import time
from time import perf_counter_ns as _now
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

__all__ = ["install", "timed_worker_loop"]

_CLOCKED = ("fetched", "host_now")

_cpu = time.thread_time_ns
_LOOP: Any = None  # torch's worker loop, saved by install: a forked worker finds it here


def install(session: Any, patch: Callable) -> None:
    """Patch torch's DataLoader iterators for ``session``: single-process
    fetches without the mode once seen to launch nothing (a recording with
    a device), and when its device keeps a virtual host clock, the
    multiprocess iterator's worker clock."""
    dev = session.device
    if dev is None:
        return
    import torch.utils.data._utils.worker as worker
    import torch.utils.data.dataloader as dl
    patch(dl._SingleProcessDataLoaderIter, "_next_data", lambda f: _quiet(f, session))
    if not all(callable(getattr(dev, m, None)) for m in _CLOCKED):
        return
    global _LOOP
    if _LOOP is None:
        _LOOP = worker._worker_loop
    it = dl._MultiProcessingDataLoaderIter
    patch(it, "__init__", lambda f: _init(f, worker))
    patch(it, "_try_put_index", lambda f: _put(f, dev))
    patch(it, "_process_data", lambda f: _take(f, dev))
    patch(it, "_next_data", lambda f: _next(f, dev, session))


def _quiet(original: Callable, s: Any) -> Callable:
    """``_SingleProcessDataLoaderIter._next_data`` off the dispatch stack
    once its first fetch launched nothing (module doc)."""
    depth, at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at

    def _next_data(self: Any) -> Any:
        quiet = getattr(self, "_cutimeline_quiet", None)
        if quiet is None:  # the first fetch: recorded, to see what it does
            w = s.writer()
            n = len(w.launches)
            out = original(self)
            self._cutimeline_quiet = len(w.launches) == n
            return out
        n = depth()
        mode = at(n - 1) if quiet and n else None
        if getattr(mode, "s", None) is not s or s.off:  # ours is not on top
            return original(self)
        _pop_mode()
        try:
            return original(self)
        finally:
            _push_mode(mode)
    return _next_data


class _Clock:
    """One iterator's modelled workers (virtual host ns).

    As in ``_MultiProcessingDataLoaderIter``, batch k is requested from
    its worker when the iterator is made (the first ``prefetch_factor ×
    num_workers``) or when the main loop takes batch k − prefetch_factor
    × num_workers (``_put``); each worker makes its batches one at a time,
    in order, so batch k is ready at ``max(requested, the worker's
    previous batch ready) + its cost`` (``_take``), its cost the CPU time
    the worker spent from taking the indices to handing the batch over
    (``time.thread_time_ns``). The fetch (``_next``) ends at
    ``max(its start, ready)`` plus the main thread's CPU time in it
    (unpickling, its share of ``__next__``), not the time it really
    waited on the queue or for a CPU the workers held."""

    __slots__ = ("ring", "size", "asked", "free", "call_real", "call_v", "call_cpu",
                 "taken_v", "ready")

    def __init__(self, ring: Any, size: int, workers: int):
        self.ring, self.size = ring, size
        self.asked: dict[int, tuple[int, int]] = {}  # batch -> (requested at, worker)
        self.free = [0] * workers                     # each worker busy until
        # the fetch in progress began: real, virtual, this thread's CPU time
        self.call_real = self.call_v = self.call_cpu = None
        self.taken_v = None   # when the batch being taken was taken (a request then)
        self.ready = 0        # the taken batch's ready time


def timed_worker_loop(ring: Any, size: int, *args: Any, **kwargs: Any) -> Any:
    """A DataLoader worker's loop (torch's) that writes the CPU time of
    each batch it makes to ``ring[batch % size]``: from taking the batch's
    indices off its queue to putting the batch on the data queue. In a
    forked worker torch's loop is the one ``install`` saved (the module's
    may still be this one); in a spawned one, the module's."""
    loop = _LOOP
    if loop is None:
        from torch.utils.data._utils import worker
        loop = worker._worker_loop
    args = list(args)
    got = [0]

    class Indices:
        def __init__(self, q: Any):
            self._q = q

        def get(self, *a: Any, **kw: Any) -> Any:
            r = self._q.get(*a, **kw)
            got[0] = _cpu()
            return r

        def __getattr__(self, name: str) -> Any:
            return getattr(self._q, name)

    class Batches:
        def __init__(self, q: Any):
            self._q = q

        def put(self, item: Any, *a: Any, **kw: Any) -> Any:
            idx = item[0] if type(item) is tuple and item else None
            if type(idx) is int:
                ring[idx % size] = _cpu() - got[0]
            return self._q.put(item, *a, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._q, name)

    args[2], args[3] = Indices(args[2]), Batches(args[3])
    return loop(*args, **kwargs)


def _init(original: Callable, worker: Any) -> Callable:
    def __init__(self: Any, loader: Any, *a: Any, **kw: Any) -> None:
        n = max(int(loader.num_workers), 1)
        size = max(64, 4 * int(loader.prefetch_factor or 2) * n)
        ctx = loader.multiprocessing_context or multiprocessing
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        ring = ctx.RawArray("q", size)
        loop = worker._worker_loop
        # the Process is made with the module's loop: ours, for this iterator only
        worker._worker_loop = functools.partial(timed_worker_loop, ring, size)
        try:
            self._cutimeline_clock = _Clock(ring, size, n)
            original(self, loader, *a, **kw)
        finally:
            worker._worker_loop = loop
    return __init__


def _put(original: Callable, dev: Any) -> Callable:
    def _try_put_index(self: Any) -> None:
        before = self._send_idx
        original(self)
        c = getattr(self, "_cutimeline_clock", None)
        if c is None or self._send_idx == before:
            return
        at = c.taken_v if c.taken_v is not None else dev.host_now()
        c.asked[before] = (at, self._task_info[before][0])
    return _try_put_index


def _take(original: Callable, dev: Any) -> Callable:
    def _process_data(self: Any, data: Any, worker_idx: int) -> Any:
        c = getattr(self, "_cutimeline_clock", None)
        if c is None or c.call_v is None:
            return original(self, data, worker_idx)
        idx = self._rcvd_idx - 1  # both in-order paths count it before this call
        asked = c.asked.pop(idx, None)
        if asked is None:
            return original(self, data, worker_idx)
        at, w = asked
        start = max(at, c.free[w])
        c.ready = c.free[w] = start + int(c.ring[idx % c.size])
        c.taken_v = max(c.call_v, c.ready)  # the next request goes out then
        try:
            return original(self, data, worker_idx)
        finally:
            c.taken_v = None
    return _process_data


def _next(original: Callable, dev: Any, session: Any) -> Callable:
    def _next_data(self: Any) -> Any:
        c = getattr(self, "_cutimeline_clock", None)
        if c is None or c.call_v is not None:
            return original(self)
        c.call_real, c.call_v, c.call_cpu, c.ready = _now(), dev.host_now(), _cpu(), 0
        try:
            return original(self)
        finally:
            own = _cpu() - c.call_cpu
            dev.fetched(c.call_real, max(c.call_v, c.ready) + own)
            # the fetch's span holds the wait: the replay keeps the batch's ready time
            session.writer().waited = max(c.ready - c.call_v, 0)
            c.call_real = c.call_v = c.call_cpu = None
    return _next_data
