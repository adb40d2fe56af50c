"""What a Kineto trace holds beyond ops and device work: FLOPs, memory and
call stacks, as the Timeline tables ``flops``, ``memory`` and ``sources``.

- **FLOPs** (``with_flops=True``): ``args.flops`` of a ``cpu_op`` → a
  ``flops`` row of that op (events with none, zero or no number: no row).
- **Memory** (``profile_memory=True``): ``[memory]`` instant events
  (args "Bytes": + allocated, − freed; "Total Allocated": bytes in use
  after it; "Device Type" 1 and "Device Id": a GPU) → one ``memory`` row
  each, in time order, on the innermost ``cpu_op`` of its thread that
  holds it (NONE when none). CPU allocations (Device Type 0) are not read.
- **Call stacks** (``with_stack=True``): for the ops that wait for the GPU
  (flagged SYNC by the trace's ``cuda_sync`` events, or named in
  ``SYNC_OP_NAMES``), the innermost user frame — the first outside torch
  and cutimeline — from the op's "Call stack" arg (older torch: "file(line):
  function;..." innermost first) or else from the ``python_function``
  events that hold the op on its thread. Note: a ``python_function`` event
  names the line its frame was at when the profiler first saw it (for a
  function called under the profiler: its ``def`` line), not the line
  running at the op; a "Call stack" names that line. No source text is in
  a trace, so ``code`` is NONE.

export_chrome's own files carry these explicitly (args "source",
"function", "code"; "External id" and "cutimeline freed" on ``[memory]``
events), and are read back exactly.
"""

from __future__ import annotations

import re

import numpy as np

from ...timeline.schema import NONE, OpFlag
from ...timeline.table import Strings
from .host import nest
from .schema import DEVICES, FREED_ARG, GPU_DEVICE_TYPE, INT64, SYNC_OP_NAMES, int_arg
from .tracefile import floats

__all__ = ["read_flops", "read_memory", "read_sources", "user_frame"]

FRAME = re.compile(r"(.*)\((\d{1,9})\): (.*)$", re.S)   # "train.py(57): main"
LIBRARY = re.compile(r"(^|[/\\])(torch|cutimeline)[/\\]")
LIMIT = 2.0**62   # FLOPs beyond this are damage, not work


def read_flops(op_ev: dict, rank: np.ndarray) -> dict:
    """The ``flops`` table: ``args.flops`` of each op event (``rank``: its
    op row) that has a positive, finite number there."""
    values = floats([a.get("flops") for a in op_ev["args"]])
    ok = np.flatnonzero(np.isfinite(values) & (values > 0) & (values < LIMIT))
    op = rank[ok]
    order = np.argsort(op, kind="stable")
    return {"op": op[order], "flops": values[ok][order]}


def read_memory(mem_ev: dict, ops: dict, threads: list[dict], by_ext: dict | None,
                warnings: list[str], name: str) -> dict:
    """The ``memory`` table from ``[memory]`` instant events (``mem_ev``,
    columns as ``tracefile.columns`` gives them). ``by_ext``: export_chrome's
    External id → op row (None for a Kineto trace: ops are found by
    nesting)."""
    args = mem_ev["args"]
    gpu = np.array([int_arg(a.get("Device Type"), NONE) == GPU_DEVICE_TYPE for a in args],
                   bool)
    device = np.array([int_arg(a.get("Device Id"), NONE, DEVICES) for a in args], np.int64)
    size = np.array([int_arg(a.get("Bytes"), INT64[0]) for a in args], np.int64)
    in_use = np.array([int_arg(a.get("Total Allocated"), NONE, (0, INT64[1])) for a in args],
                      np.int64)
    bad = gpu & ((device == NONE) | (size == INT64[0]) | (in_use == NONE))
    if bad.any():
        warnings.append(f"{int(bad.sum())} GPU [memory] events in {name} lack a whole "
                        f"'Device Id', 'Bytes' or 'Total Allocated'; they are left out.")
    keep = np.flatnonzero(gpu & ~bad)
    size, device, in_use = size[keep], device[keep], in_use[keep]
    host_ns = mem_ev["begin"][keep]
    freed = np.where(size < 0, -size, 0)
    if by_ext is not None:
        given = [int_arg(args[i].get(FREED_ARG), NONE, (0, INT64[1])) for i in keep.tolist()]
        given = np.array(given, np.int64).reshape(-1)
        freed = np.where(given != NONE, given, freed)
        op = np.array([by_ext.get(args[i].get("External id"), NONE) for i in keep.tolist()],
                      np.int64).reshape(-1)
    else:
        op = _holders(ops, _event_threads(mem_ev, keep, threads), host_ns)
    allocated = size + freed
    order = np.argsort(host_ns, kind="stable")
    return {"op": op[order], "device": device[order], "host_ns": host_ns[order],
            "allocated": allocated[order], "freed": freed[order], "in_use": in_use[order]}


def read_sources(ops: dict, op_ev: dict, rank: np.ndarray, span_ev: dict,
                 span_rank: np.ndarray, py_ev: dict, threads: list[dict],
                 strings: Strings, ours: bool) -> dict:
    """The ``sources`` table: export_chrome's explicit args on ops and
    spans (``ours``), else the innermost user frame of each op that waits
    for the GPU (see the module doc). ``rank``/``span_rank``: each event's
    row in ops/spans."""
    if ours:
        op_rows = _explicit(op_ev["args"], rank, strings)
        span_rows = _explicit(span_ev["args"], span_rank, strings)
        op_rows["span"] = np.full(len(op_rows["op"]), NONE, np.int64)
        span_rows["span"] = span_rows["op"]
        span_rows["op"] = np.full(len(span_rows["span"]), NONE, np.int64)
        return {k: np.concatenate([op_rows[k], span_rows[k]]) for k in op_rows}
    sync_ids = [strings.ids[s] for s in SYNC_OP_NAMES if s in strings.ids]
    wait = (ops["flags"] & OpFlag.SYNC).astype(bool) | np.isin(ops["name"], sync_ids)
    event = np.empty(len(rank), np.int64)
    event[rank] = np.arange(len(rank))   # op row → its event
    frames: list[str | None] = [None] * len(ops["name"])
    for row in np.flatnonzero(wait).tolist():
        stack = op_ev["args"][event[row]].get("Call stack")
        if type(stack) is str:
            frames[row] = next((f for f in stack.split(";") if user_frame(f)), None)
    rest = np.array([row for row in np.flatnonzero(wait).tolist() if frames[row] is None],
                    np.int64)
    if len(rest) and len(py_ev["name"]):
        for row, frame in zip(rest.tolist(), _python_frames(ops, rest, py_ev, threads)):
            frames[row] = frame
    rows = [(row, user_frame(f)) for row, f in enumerate(frames) if f is not None]
    return {"op": np.array([r for r, _ in rows], np.int64),
            "span": np.full(len(rows), NONE, np.int64),
            "file": np.array([strings.intern(p[0]) for _, p in rows], np.int32),
            "line": np.array([p[1] for _, p in rows], np.int32),
            "function": np.array([strings.intern(p[2]) for _, p in rows], np.int32),
            "code": np.full(len(rows), NONE, np.int32)}


def user_frame(frame: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a "file(line): function" frame outside
    torch and cutimeline; None for theirs, built-ins ("<built-in method
    item ...>") and text of another shape."""
    m = FRAME.match(frame.strip())
    if m is None or m.group(1).startswith("<") or LIBRARY.search(m.group(1)):
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def _explicit(args: list[dict], rank: np.ndarray, strings: Strings) -> dict:
    """export_chrome's "source": "file:line", "function" and "code" args."""
    rows = []
    for i, a in enumerate(args):
        source = a.get("source")
        if type(source) is not str:
            continue
        file, _, line = source.rpartition(":")
        texts = [a.get(k) if type(a.get(k)) is str else None for k in ("function", "code")]
        rows.append((int(rank[i]), file, int_arg(line, NONE, (-2**31, 2**31 - 1)), *texts))
    rows.sort(key=lambda r: r[0])

    def ids(k: int) -> np.ndarray:
        return np.array([NONE if r[k] is None else strings.intern(r[k]) for r in rows],
                        np.int32)
    return {"op": np.array([r[0] for r in rows], np.int64), "file": ids(1),
            "line": np.array([r[2] for r in rows], np.int32), "function": ids(3),
            "code": ids(4)}


def _event_threads(ev: dict, rows: np.ndarray, threads: list[dict]) -> np.ndarray:
    """The thread index of events ``rows`` of ``ev`` (by pid and tid); a
    thread that has no ops or spans gets a number of its own below NONE."""
    known = {(t["pid"], t["tid"]): i for i, t in enumerate(threads)}
    other: dict = {}
    return np.array([known.get(k, other.setdefault(k, NONE - 1 - len(other)))
                     for k in zip([ev["pid"][i] for i in rows.tolist()],
                                  [ev["tid"][i] for i in rows.tolist()])],
                    np.int64).reshape(-1)


def _holders(ops: dict, thread: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The innermost op of its thread holding each instant (NONE: none)."""
    mine = np.flatnonzero(np.isin(ops["thread"], thread))   # only threads that matter
    if len(at) == 0 or len(mine) == 0:
        return np.full(len(at), NONE, np.int64)
    _, _, owner = nest(np.concatenate([ops["thread"][mine], thread]),
                        np.concatenate([ops["host_begin_ns"][mine], at]),
                        np.concatenate([ops["host_end_ns"][mine], at]), len(mine),
                        np.full(len(mine), NONE, np.int64))
    return np.where(owner != NONE, mine[np.maximum(owner, 0)], NONE)


def _python_frames(ops: dict, rows: np.ndarray, py_ev: dict,
                   threads: list[dict]) -> list[str | None]:
    """The innermost user ``python_function`` frame holding the begin of
    each op of ``rows``, on the op's thread."""
    n = len(py_ev["name"])
    # with_stack repeats a few thousand frame names over up to millions of
    # events: each distinct name is parsed once
    is_user = {s: user_frame(s) is not None for s in dict.fromkeys(py_ev["name"])}
    user = np.array([is_user[s] for s in py_ev["name"]], bool)
    thread = _event_threads(py_ev, np.arange(n), threads)
    at = ops["host_begin_ns"][rows]
    # a frame's own index where it is a user frame, inherited by the frames
    # it holds (torch's, built-ins) that have none of their own
    _, frame, owner = nest(np.concatenate([thread, ops["thread"][rows]]),
                            np.concatenate([py_ev["begin"], at]),
                            np.concatenate([py_ev["end"], at]), n,
                            np.where(user, np.arange(n), NONE))
    return [py_ev["name"][frame[o]] if o != NONE and frame[o] != NONE else None
            for o in owner.tolist()]
