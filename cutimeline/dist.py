"""Many ranks: per-rank recording under torch.distributed, and ``merge``.

Recording. ``ctl.record(out_dir=DIR)`` on every rank records that rank and
writes ``DIR/rank-<r>.ctl`` at stop (atomically), also when the recorded
block raises (``meta["error"]`` then says what; the file holds what was
recorded up to there). Each file's meta names ``rank``, ``world_size``,
``local_rank``, ``backend``, ``host``, ``pid`` and the clock pair
``start_epoch_ns`` (``time.time_ns()``) / ``start_host_ns`` (host clock),
read together at start. Without an initialised process group the rank is
taken from the ``RANK``/``WORLD_SIZE`` environment (torchrun's), else 0 of 1.

Collectives are the ops of the ``c10d`` and ``_c10d_functional``
namespaces in ``OPS`` (what ``dist.all_reduce``, ``broadcast``,
``all_gather``, ``reduce_scatter``, ``barrier``, ``send``/``recv`` and the
functional collectives dispatch); their ops rows get flag COLLECTIVE, and
``meta["collectives"]`` holds one entry per collective as equal-length
lists, keyed by the op's ``seq`` (which slicing keeps):

* ``seq`` — the op's ``ops.seq``; ``group`` — index into ``meta["groups"]``
  (``{"name", "ranks" (global), "backend"}``); ``kind`` — ``KINDS``;
* ``number`` — the collective's count on its group (p2p: on its
  (group, sender, receiver) pair), from 0 at the start of the recording:
  the k-th collective of a group is the same on every rank, so every rank
  must start recording at the same collective (the same code point);
* ``peer`` — global rank of the root (rooted kinds) or of the other side
  (p2p), NONE otherwise or when unknown (``recv`` from any source);
* ``done_ns`` — host time by which the collective had completed, NONE when
  unknown. Measured only for collectives on host tensors (gloo, or any
  backend on CPU): a callback on the ``Work``'s future notes when it
  completes (a Work without a future, as gloo's list ``reduce_scatter``,
  leaves it unknown). On CUDA tensors the future completes at enqueue,
  which bounds nothing, so device collectives have arrivals only; their
  gpu row brackets the enqueue on the current stream, not the NCCL kernel
  on NCCL's own stream. Functional collectives complete at their
  ``wait_tensor`` when the recorder sees it (compiled code); eager ones
  wait inside ``AsyncCollectiveTensor``, out of sight.

Test hook: ``CUTIMELINE_TEST_CLOCK_SKEW_NS=N`` in a rank's environment
moves every host time of its file, and its ``start_epoch_ns``, by N ns, as
if its machine's clocks were all N ns ahead; ``meta["test_clock_skew_ns"]``
says so. Tests use it to check that ``merge`` re-aligns such a rank.

Merging: see ``merge``. Cross-rank analysis lives in ``straggler.py``.
"""

from __future__ import annotations

import glob
import os
import re
import threading
import warnings
import weakref
from functools import partial
from time import perf_counter_ns as _now
from typing import Any, Iterable

import numpy as np

from .errors import CutimelineError
from .timeline import NONE, REFERENCES, SCHEMA, STRING_COLUMNS, Strings, Timeline

__all__ = ["merge", "KINDS", "OPS", "rank_meta", "write_rank", "shift_host",
           "rank_of_thread", "rank_of_device", "RANK_FILE"]

#: What completing a collective proves (see ``straggler.roles``).
KINDS = ("all", "from_root", "to_root", "send", "recv", "wait")
ALL, FROM_ROOT, TO_ROOT, SEND, RECV, WAIT = range(6)
RANK_FILE = "rank-{rank}.ctl"
SKEW_ENV = "CUTIMELINE_TEST_CLOCK_SKEW_NS"

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
_COLUMNS = ("seq", "group", "kind", "number", "peer", "done_ns")


# -- recording -----------------------------------------------------------------------

def rank_meta(at_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """This process's rank, world size, local rank, backend, host and pid;
    at stop (``at_start`` given) a process group that is gone keeps what
    start saw."""
    import socket
    import torch.distributed as dist
    meta: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    if dist.is_available() and dist.is_initialized():
        meta.update(rank=dist.get_rank(), world_size=dist.get_world_size(),
                    backend=str(dist.get_backend()))
    elif at_start and at_start.get("backend"):
        meta.update({k: at_start[k] for k in ("rank", "world_size", "backend")})
    else:
        meta.update(rank=_int_env("RANK", 0), world_size=_int_env("WORLD_SIZE", 1),
                    backend=None)
    meta["local_rank"] = _int_env("LOCAL_RANK", meta["rank"])
    return meta


def _int_env(name: str, default: int) -> int:
    v = os.environ.get(name, "").strip()
    return int(v) if re.fullmatch(r"\d+", v) else default


class CollectiveLog:
    """The collectives one recording saw (made by the recorder's session at
    its first collective; ``note`` runs after each collective op)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[str, int] = {}
        self.group_list: list[dict[str, Any]] = []
        self.counts: dict[tuple, int] = {}
        self.rows: list[list[int]] = []           # _COLUMNS
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
        """``meta["collectives"]`` and ``meta["groups"]`` of the recording."""
        with self.lock:
            rows = [list(r) for r in self.rows]
        cols = {c: [r[i] for r in rows] for i, c in enumerate(_COLUMNS)}
        return {"collectives": cols, "groups": [dict(g) for g in self.group_list]}


def _completed(row: list[int], fut: Any) -> None:
    """Future callback: the collective is done now (it runs on the backend's
    thread). A failed collective proves nothing about the other ranks, so it
    gets no time; the failure itself reaches the user through wait()."""
    t = _now()
    try:
        fut.value()
    except Exception:
        return
    row[5] = t


def write_rank(tl: Timeline, out_dir: str, error: BaseException | None = None) -> Timeline:
    """Write a rank's Timeline to ``out_dir/rank-<r>.ctl`` (atomically) and
    return it as written: with ``meta["error"]`` when the recorded block
    raised, and the test clock skew applied when ``CUTIMELINE_TEST_CLOCK_SKEW_NS``
    is set (see the module doc)."""
    meta = dict(tl.meta)
    if error is not None:
        meta["error"] = f"{type(error).__name__}: {error}"
    skew = os.environ.get(SKEW_ENV, "").strip()
    if skew:
        if not re.fullmatch(r"[+-]?\d+", skew):
            raise CutimelineError(f"{SKEW_ENV}={skew!r} must be a whole number of "
                                  f"nanoseconds.")
        tl = shift_host(tl, int(skew), epoch=True)
        meta = {**tl.meta, **{k: v for k, v in meta.items() if k == "error"},
                "test_clock_skew_ns": int(skew)}
    tl = tl.replace(meta=meta)
    rank = meta.get("rank", 0)
    tl.save(os.path.join(out_dir, RANK_FILE.format(rank=rank)))
    return tl


def shift_host(tl: Timeline, ns: int, *, epoch: bool = False) -> Timeline:
    """``tl`` with every host time moved by ``ns`` (NONE stays NONE), and
    ``start_epoch_ns`` too with ``epoch=True``."""
    def f(t):
        return t + ns
    tables = {name: tl.table(name).replace(**{c: _apply(f, tl.table(name)[c]) for c in cols})
              for name, cols in _HOST_COLUMNS.items()}
    tables["clocks"] = tables["clocks"].replace(
        ping_offset_ns=_apply(f, tl.clocks.ping_offset_ns))  # host − raw
    meta = dict(tl.meta)
    for key in ("start_host_ns",) + (("start_epoch_ns",) if epoch else ()):
        if isinstance(meta.get(key), int):
            meta[key] += ns
    if meta.get("collectives"):
        c = meta["collectives"]
        done = _apply(f, np.asarray(c["done_ns"], np.int64))
        meta["collectives"] = {**c, "done_ns": done.tolist()}
    return tl.replace(meta=meta, **tables)


_HOST_COLUMNS = {"ops": ("host_begin_ns", "host_end_ns"), "spans": ("begin_ns", "end_ns"),
                 "syncs": ("host_begin_ns", "host_end_ns"),
                 "gpu": ("launch_ns", "begin_ns", "end_ns"),
                 "events": ("host_record_ns",), "clocks": ("offset_ns",),
                 "truth": ("host_ns",)}


def _apply(f: Any, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.int64)
    out = f(a)
    return np.where(a == NONE, NONE, out) if len(a) and (a == NONE).any() else out


# -- rows of a merged Timeline ---------------------------------------------------

def rank_of_thread(tl: Timeline) -> np.ndarray:
    """The rank of each thread id (index) of ``tl``: from ``meta["thread_rank"]``
    in a merged Timeline, else every thread is ``meta["rank"]`` (0)."""
    lut = tl.meta.get("thread_rank")
    if lut is not None:
        return np.asarray(lut, np.int64)
    n = int(tl.ops.thread.max()) + 1 if len(tl.ops) else 0
    n = max(n, int(tl.spans.thread.max()) + 1 if len(tl.spans) else 0)
    return np.full(n, int(tl.meta.get("rank", 0)), np.int64)


def rank_of_device(tl: Timeline) -> np.ndarray:
    """The rank of each device index of ``tl`` (see ``rank_of_thread``)."""
    lut = tl.meta.get("device_rank")
    if lut is not None:
        return np.asarray(lut, np.int64)
    n = max([int(tl.table(t).device.max()) + 1 for t in ("gpu", "events", "clocks")
             if len(tl.table(t))] + [int(tl.ops.device.max()) + 1 if len(tl.ops) else 0])
    return np.full(max(n, 0), int(tl.meta.get("rank", 0)), np.int64)


# -- merge ---------------------------------------------------------------------------

def merge(dir_or_paths: str | os.PathLike | Iterable[Any]) -> Timeline:
    """One Timeline of all ranks, on the host clock of the lowest rank.

    ``dir_or_paths``: a folder of ``rank-<r>.ctl`` files (what
    ``record(out_dir=...)`` writes), or a list of ``.ctl`` paths or
    Timelines (a Timeline without ``meta["rank"]`` takes its list position).

    Clocks: each rank's host clock is first related to the reference
    rank's through the wall-clock epochs its file stores, then refined by
    the collectives both saw (``straggler.fit_rank_clocks``): the k-th
    collective of a group cannot complete on any rank before the last rank
    joined it. Those bounds, fitted with the aligner's convex-hull method
    (``align.fit_clock``), give a band of feasible clock lines; the epoch
    line is kept when it satisfies every bound ("epoch+collectives"), else
    the band's middle ("collectives"); slope 1 is preferred where the
    bounds allow it. A rank with no two-sided bounds is related by its
    epoch alone ("epoch"). ``meta["ranks"][i]["clock"]`` gives the line
    (``t_merged = offset_ns + slope·(t_rank − ref_ns)``; ``shift_ns`` =
    t_merged − t_rank at ref_ns), ``bound_ns`` (no point of the band lies
    farther from the line over the span of its collectives; None for
    "epoch") and ``method``.

    Layout: tables are concatenated rank by rank (rank-major, each rank's
    rows in their order). Threads and devices are renumbered so each rank
    has its own: ``meta["thread_rank"]``/``meta["device_rank"]`` give the
    rank of each thread id/device index, ``meta["threads"]`` names them
    "rank r · name" and ``meta["devices"]`` lists each with its rank and
    local index. ``ops.seq`` is made unique by adding a per-rank base
    (``meta["ranks"][i]["seq_base"]``); ``meta["collectives"]`` is keyed by
    the merged seq and has a ``rank`` column. Host times are mapped onto
    the reference clock (the rank files keep the raw ones); gpu times
    follow their rank's host clock. ``meta["ranks"]`` lists per rank its
    file, host, error (a rank whose code raised), thread and device ids.
    """
    from .straggler import fit_rank_clocks
    parts = _inputs(dir_or_paths)
    clocks = fit_rank_clocks([(r, tl) for r, tl, _ in parts])
    return _concat(parts, clocks)


def _inputs(src: Any) -> list[tuple[int, Timeline, str | None]]:
    from .aligner import align
    from .timeline import load
    if isinstance(src, (str, os.PathLike)):
        folder = os.fspath(src)
        if not os.path.isdir(folder):
            raise CutimelineError(f"merge({folder!r}): there is no such folder; give "
                                  f"the out_dir of ctl.record(out_dir=...) or a list "
                                  f"of .ctl files.")
        items: list[Any] = sorted(glob.glob(os.path.join(folder, "rank-*.ctl")),
                                  key=_rank_in_name)
        if not items:
            raise CutimelineError(f"merge({folder!r}): the folder holds no rank-<r>.ctl "
                                  f"files; record with ctl.record(out_dir={folder!r}) "
                                  f"on every rank first.")
    else:
        try:
            items = list(src)
        except TypeError:
            raise CutimelineError(f"merge needs a folder or a list of .ctl paths or "
                                  f"Timelines, not {type(src).__name__}.") from None
        if not items:
            raise CutimelineError("merge was given an empty list; give at least one "
                                  ".ctl path or Timeline.")
    parts, seen = [], {}
    for i, item in enumerate(items):
        if isinstance(item, Timeline):
            tl, label = item, None
        elif isinstance(item, (str, os.PathLike)):
            tl, label = load(item), os.fspath(item)
        else:
            raise CutimelineError(f"merge's item {i} is a {type(item).__name__}; give "
                                  f".ctl paths or Timelines.")
        rank = tl.meta.get("rank", i)
        if not isinstance(rank, int) or rank < 0:
            raise CutimelineError(f"{label or f'Timeline {i}'} names rank {rank!r}; a "
                                  f"rank is a whole number ≥ 0.")
        if rank in seen:
            raise CutimelineError(f"Rank {rank} appears twice ({seen[rank]} and "
                                  f"{label or f'Timeline {i}'}); give each rank once.")
        seen[rank] = label or f"Timeline {i}"
        if len(tl.gpu) and not tl.aligned:
            try:
                tl = align(tl)
            except CutimelineError as exc:
                raise CutimelineError(f"Rank {rank} ({seen[rank]}) has gpu rows whose "
                                      f"clock cannot be aligned ({exc}); merge needs "
                                      f"every rank on its host clock.") from None
        parts.append((rank, tl, label))
    return sorted(parts, key=lambda p: p[0])


def _rank_in_name(path: str) -> int:
    m = re.search(r"rank-(\d+)\.ctl$", path)
    return int(m.group(1)) if m else -1


def _concat(parts: list[tuple[int, Timeline, str | None]], clocks: dict[int, dict]) -> Timeline:
    """The merged Timeline (see ``merge``). Each rank's tables are released
    once copied into the preallocated columns."""
    strings = Strings()
    out = {name: {c: np.empty(sum(len(tl.table(name)) for _, tl, _ in parts), dt)
                  for c, dt in SCHEMA[name]} for name in SCHEMA}
    at = dict.fromkeys(SCHEMA, 0)
    thread_rank, thread_names, device_rank, devices, ranks = [], [], [], [], []
    coll: dict[str, list] = {c: [] for c in ("rank",) + _COLUMNS}
    groups: dict[tuple, int] = {}
    seq_base = 0
    for i, (rank, tl, label) in enumerate(parts):
        meta, clock = tl.meta, clocks[rank]
        lut = np.array([strings.intern(s) for s in tl.strings] + [NONE], np.int32)
        t_base, names = len(thread_rank), meta.get("threads") or []
        for t in range(max([len(names)] + [int(tl.table(n).thread.max()) + 1
                                           for n in ("ops", "spans") if len(tl.table(n))])):
            n = names[t] if t < len(names) else f"thread {t}"
            thread_names.append(f"rank {rank} · {n.get('name', '') if isinstance(n, dict) else n}")
            thread_rank.append(rank)
        local = _local_devices(tl)
        dev_lut = np.full(int(local.max(initial=-1)) + 2, NONE, np.int16)  # [-1] is NONE
        described = {d.get("index"): d for d in meta.get("devices") or [] if isinstance(d, dict)}
        for d in local:
            dev_lut[d] = len(device_rank)
            devices.append({**described.get(int(d), {}), "index": len(device_rank),
                            "rank": rank, "local_index": int(d)})
            device_rank.append(rank)
        f, shift, slope = _clock_map(clock)
        bases = dict(at)
        for name in SCHEMA:
            t = tl.table(name)
            for col, _ in SCHEMA[name]:
                v = t[col]
                if (name, col) in STRING_COLUMNS:
                    v = lut[v]
                elif (name, col) in REFERENCES:
                    v = np.where(v == NONE, NONE, v + bases[REFERENCES[name, col]])
                elif col in ("thread", "device", "seq"):
                    v = v + t_base if col == "thread" else dev_lut[v] if col == "device" \
                        else v + seq_base
                elif col in _HOST_COLUMNS.get(name, ()):
                    v = _apply(f, v)
                elif name == "clocks":  # host = offset + slope·raw composes with f
                    v = v * slope if col != "ping_offset_ns" else _apply(lambda x: x + shift, v)
                out[name][col][at[name]:at[name] + len(t)] = v
            at[name] += len(t)
        c = meta.get("collectives") or {}
        g_lut = [groups.setdefault((g["name"], tuple(g["ranks"])), len(groups))
                 for g in meta.get("groups") or []]
        if len(c.get("seq", ())):
            coll["rank"] += [rank] * len(c["seq"])
            coll["seq"] += (np.asarray(c["seq"], np.int64) + seq_base).tolist()
            coll["group"] += [g_lut[g] if 0 <= g < len(g_lut) else NONE for g in c["group"]]
            coll["done_ns"] += _apply(f, np.asarray(c["done_ns"], np.int64)).tolist()
            for col in ("kind", "number", "peer"):
                coll[col] += list(c[col])
        ranks.append({
            "rank": rank, "file": label, "host": meta.get("host"), "pid": meta.get("pid"),
            "world_size": meta.get("world_size"), "error": meta.get("error"),
            "truncated": bool(meta.get("truncated", False)),
            "threads": list(range(t_base, len(thread_rank))),
            "devices": [int(x) for x in dev_lut[local]], "seq_base": seq_base,
            "ops": len(tl.ops), "clock": clock,
            **{k: meta.get(k) for k in ("overhead_ns_per_op", "overhead_ns_per_launch",
                                        "simulated", "device_name", "test_clock_skew_ns")}})
        seq_base += int(tl.ops.seq.max()) + 1 if len(tl.ops) else 0
        parts[i] = (rank, None, label)  # release this rank's tables
    meta = _merged_meta(ranks, clocks, devices, groups, coll)
    meta.update(threads=thread_names, thread_rank=thread_rank, device_rank=device_rank)
    return Timeline(out, strings, meta)


def _local_devices(tl: Timeline) -> np.ndarray:
    """Device indices a rank's Timeline uses (ops on other GPUs included)."""
    found = [np.unique(tl.table(t).device) for t in ("ops", "gpu", "syncs", "events", "clocks")]
    found.append(np.array([d["index"] for d in tl.meta.get("devices") or []
                           if isinstance(d, dict) and isinstance(d.get("index"), int)], np.int64))
    allv = np.unique(np.concatenate(found).astype(np.int64))
    return allv[allv >= 0]


def _clock_map(clock: dict) -> tuple[Any, int, float]:
    """(f, f(t) − t at the line's reference time, slope) of a rank's clock."""
    off, ref, slope = int(clock["offset_ns"]), int(clock["ref_ns"]), float(clock["slope"])
    if slope == 1.0:
        return (lambda t: t + (off - ref)), off - ref, 1.0
    return (lambda t: off + np.rint((t - ref) * slope).astype(np.int64)), off - ref, slope


def _merged_meta(ranks: list[dict], clocks: dict[int, dict], devices: list[dict],
                 groups: dict[tuple, int], coll: dict[str, list]) -> dict[str, Any]:
    """Meta of the merged Timeline; the reference rank's clock pair relates
    it to the wall clock."""
    ref = ranks[0]
    world = max([r["world_size"] or 0 for r in ranks] + [len(ranks)])
    present = {r["rank"] for r in ranks}
    meta: dict[str, Any] = {
        "source": "merge", "aligned": True, "reference_rank": ref["rank"],
        "world_size": world, "ranks": ranks, "devices": devices,
        "groups": [{"name": n, "ranks": list(rs)} for n, rs in groups],
        "collectives": coll, "truncated": any(r["truncated"] for r in ranks),
        "start_epoch_ns": clocks[ref["rank"]].get("epoch_ns"),
        "start_host_ns": clocks[ref["rank"]].get("host_ns"),
        "host": ref["host"], "hosts": sorted({str(r["host"]) for r in ranks}),
        "missing_ranks": [r for r in range(world) if r not in present],
        "simulated": any(r["simulated"] for r in ranks), "device_name": ref["device_name"]}
    # overhead replay (compensation.py) models one host's op stream; the
    # ranks' own costs stay in meta["ranks"]
    meta["overhead_ns_per_op"] = meta["overhead_ns_per_launch"] = None
    if any(r["error"] for r in ranks):
        meta["errors"] = [r["rank"] for r in ranks if r["error"]]
    return meta
