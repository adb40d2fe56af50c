"""Collectives: which torch.distributed ops they are, and ``CollectiveLog``,
what a recording saw of them.

Collectives are the ops of the ``c10d`` and ``_c10d_functional``
namespaces in ``OPS``; their ops rows get flag COLLECTIVE, and the
Timeline's ``collectives`` table (``timeline/collectives.py``, which
names its columns) one row each, kept by the op's ``seq`` while
recording (``ROW``) and turned into the op's row at stop
(``recording/assembly.py``). The rank's own file: ``ranks.py``.

What is not obvious from the columns:

* ``number`` counts from 0 at the start of the recording, per group
  (p2p: per (group, sender, receiver) pair): the k-th collective of a
  group is the same on every rank only if every rank starts recording at
  the same collective (the same code point).
* ``done_ns`` is measured only for collectives on host tensors (gloo, or
  any backend on CPU), by a callback on the ``Work``'s future (a Work
  without one, as gloo's list ``reduce_scatter``, leaves it NONE). On
  CUDA tensors the future completes at enqueue, which bounds nothing, so
  device collectives have arrivals only; their gpu row brackets the
  enqueue on the current stream, not the NCCL kernel (but on SimGPU,
  whose ``collective_stream`` runs it: kind COLLECTIVE). Functional
  collectives complete at their ``wait_tensor`` when the recorder sees
  it (compiled code); eager ones wait inside ``AsyncCollectiveTensor``,
  out of sight.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from functools import partial
from time import perf_counter_ns as _now
from typing import Any

import numpy as np

# the kinds and columns are the Timeline's (dist/ reads them too)
from ...timeline.collectives import (ALL, COLUMNS, FROM_ROOT, KINDS, RECV, SEND, TO_ROOT,
                                     WAIT)
from ...timeline.schema import NONE

__all__ = ["KINDS", "OPS", "COLUMNS", "ROW", "CollectiveLog"]

#: a row of the log: the op's ``ops.seq`` (its row is known at stop), then
#: the table's columns after ``op``
ROW = ("seq", *COLUMNS[1:])

# op name -> (kind, index of the root/peer argument or None, peer is global)
OPS: dict[str, tuple[int, int | None, bool]] = {
    **{f"c10d::{n}": (ALL, None, False) for n in (
        "allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_",
        "allgather_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_",
        "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "alltoall_",
        "alltoall_base_", "barrier", "monitored_barrier_")},
    "c10d::broadcast_": (FROM_ROOT, 2, False), "c10d::scatter_": (FROM_ROOT, 3, False),
    "c10d::reduce_": (TO_ROOT, 3, False), "c10d::gather_": (TO_ROOT, 3, False),
    "c10d::send": (SEND, 2, False), "c10d::recv_": (RECV, 2, False),
    "c10d::recv_any_source_": (RECV, None, False),
    **{f"_c10d_functional::{n}": (ALL, None, False) for n in (
        "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
        "all_gather_into_tensor", "all_gather_into_tensor_out",
        "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
        "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced",
        "all_to_all_single")},
    "_c10d_functional::broadcast": (FROM_ROOT, 1, False),
    "_c10d_functional::broadcast_": (FROM_ROOT, 1, False),
    "_c10d_functional::isend": (SEND, 1, True), "_c10d_functional::irecv": (RECV, 1, True),
    "_c10d_functional::wait_tensor": (WAIT, None, False),
}


class CollectiveLog:
    """The collectives one recording saw (made by the recorder's session at
    its first collective; ``note`` runs after each collective op)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[str, int] = {}
        self.group_list: list[dict[str, Any]] = []
        self.counts: dict[tuple, int] = {}
        self.rows: list[list[int]] = []           # ROW
        self.pending: dict[int, tuple] = {}       # id(output) -> (weakref, row)
        self.ops: dict[int, tuple] = {}           # id(func) -> what _op read
        self.funcs: list[Any] = []
        self.me = NONE                            # this process's global rank
        self.warned = False

    def note(self, func: Any, args: tuple, kwargs: dict, out: Any, seq: int,
             dev: Any) -> None:
        """Note one collective op (or the wait of a functional one). Never
        raises into the user's program: a failure is one warning."""
        try:
            self._note(func, args, kwargs, out, seq, dev)
        except Exception as exc:  # an op layout this torch version changed
            if not self.warned:
                self.warned = True
                warnings.warn(f"cutimeline could not read the process group of "
                              f"{func.name()} ({type(exc).__name__}: {exc}); such "
                              f"collectives keep their COLLECTIVE flag but are not "
                              f"matched across ranks.", RuntimeWarning, 4)

    def _note(self, func: Any, args: tuple, kwargs: dict, out: Any, seq: int,
              dev: Any) -> None:
        op = self.ops.get(id(func)) or self._op(func)
        kind, peer_arg, peer_global, pg_arg, work_at = op
        if kind == WAIT:
            entry = self.pending.pop(id(args[0]), None) if args else None
            if entry is not None and entry[0]() is args[0] and entry[1][5] == NONE:
                entry[1][5] = _now()
            return
        if pg_arg is None or pg_arg >= len(args):
            obj = kwargs["group_name"]
        else:
            obj = args[pg_arg]
        g, ranks, me = self._group(obj)
        peer = NONE
        if peer_arg is not None and len(args) > peer_arg:
            p = int(args[peer_arg])
            peer = p if peer_global else (ranks[p] if 0 <= p < len(ranks) else NONE)
        p2p = kind == SEND or kind == RECV
        key = ((g, me, peer) if kind == SEND else (g, peer, me)) if p2p else g
        with self.lock:
            number = self.counts.get(key, 0)
            self.counts[key] = number + 1
            row = [seq, g, kind, NONE if p2p and peer == NONE else number, peer, NONE]
            self.rows.append(row)
        if dev is not None and getattr(dev, "type", "cpu") != "cpu":
            return  # see the module doc: a device collective's future bounds nothing
        if work_at is None:  # functional: done at its wait_tensor, if seen
            for t in (out if isinstance(out, (list, tuple)) else (out,)):
                if t is not None:
                    self.pending[id(t)] = (weakref.ref(t), row)
            while len(self.pending) > 4096:  # waits out of sight (eager): forget the oldest
                self.pending.pop(next(iter(self.pending)))
        elif work_at == NONE:  # the op itself blocked until done (monitored_barrier_)
            row[5] = _now()
        else:
            import torch
            work = out if work_at == -2 else out[work_at]
            try:
                fut = torch._C._distributed_c10d.Work.unbox(work).get_future()
            except RuntimeError:  # this backend's work has no future: done unknown
                return
            fut.add_done_callback(partial(_completed, row))

    def _op(self, func: Any) -> tuple:
        """(kind, peer arg, peer global, process-group arg, where the Work is
        in the output: an index, -2 the output itself, NONE none, None for
        functional ops), read from the op's schema once."""
        kind, peer_arg, peer_global = OPS[func.name().split(".")[0]]
        sch = func._schema
        pg_arg = next((i for i, a in enumerate(sch.arguments)
                       if "ProcessGroup" in str(a.type) or a.name == "group_name"), None)
        work_at = None
        if func.namespace == "c10d":
            rets = [str(r.type) for r in sch.returns]
            works = [i for i, t in enumerate(rets) if t.endswith("Work")]
            work_at = NONE if not works else -2 if len(rets) == 1 else works[0]
        op = self.ops[id(func)] = (kind, peer_arg, peer_global, pg_arg, work_at)
        self.funcs.append(func)  # keeps id(func) unique
        return op

    def _group(self, obj: Any) -> tuple[int, list[int], int]:
        """(group index, its global ranks, this process's global rank) of a
        ProcessGroup argument (TorchBind object) or group name."""
        import torch
        if isinstance(obj, torch.ScriptObject):
            obj = torch._C._distributed_c10d.ProcessGroup.unbox(obj)
        name = obj if isinstance(obj, str) else obj.group_name
        g = self.groups.get(name)
        if g is None:
            import torch.distributed as dist
            from torch.distributed import distributed_c10d as c10d
            pg = c10d._resolve_process_group(name) if isinstance(obj, str) else obj
            entry = {"name": name, "ranks": [int(r) for r in c10d.get_process_group_ranks(pg)],
                     "backend": str(pg.name())}
            with self.lock:
                g = self.groups.setdefault(name, len(self.group_list))
                if g == len(self.group_list):
                    self.group_list.append(entry)
                    self.me = dist.get_rank()
        return g, self.group_list[g]["ranks"], self.me

    def meta(self) -> dict[str, Any]:
        """``meta["groups"]`` of the recording (what ``group`` indexes)."""
        with self.lock:
            return {"groups": [dict(g) for g in self.group_list]}

    def snapshot(self) -> np.ndarray:
        """The rows noted so far (``ROW``), one per collective, int64."""
        with self.lock:
            rows = [list(r) for r in self.rows]
        return np.array(rows, np.int64).reshape(-1, len(ROW))


def _completed(row: list[int], fut: Any) -> None:
    """Future callback: the collective is done now (it runs on the backend's
    thread). A failed collective proves nothing about the other ranks, so it
    gets no time; the failure itself reaches the user through wait()."""
    t = _now()
    try:
        fut.value()
    except RuntimeError:
        # the backend failed it: c10's errors and torch.distributed's
        # DistError reach Python as RuntimeError. Another error type is no
        # failure we know of; it leaves the callback, and torch logs it.
        return
    row[5] = t
