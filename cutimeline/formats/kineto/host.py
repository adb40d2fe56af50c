"""The host side of a Kineto import: threads, ops (nested, each linked to
the launch calls inside it) and spans, as Timeline columns.

Device work names its launch call by ``args.correlation``; the launch call
lies inside the aten op that made it, on the same thread, so the innermost
enclosing ``cpu_op`` is the launching op (``nest``). Traces whose launch
calls are missing fall back on ``ac2g`` flow starts, which sit at the
launch (``launch_probes``).
"""

from __future__ import annotations

import numpy as np

from ...timeline.schema import NONE, OpFlag, SpanKind
from ...timeline.table import Strings
from .schema import BACKWARD_PREFIX, KIND_ARG, STEP_RE, TIME_LIMIT_NS, arg_keys, int_arg
from .tracefile import to_ns, usable_id

__all__ = ["thread_index", "launch_probes", "nest", "read_ops", "span_kind", "read_spans",
           "link_explicitly"]


def thread_index(threads: list[dict], probes: dict, names: dict):
    """Thread index of each op/span event (one array per part of
    ``threads``) and of each probe, numbering the (pid, tid) pairs of ops
    and spans in order of first activity; and those threads' pid, tid and
    name. A probe on another track gets an index past them, holding none."""
    raw: dict[tuple, int] = {}
    ids = [np.array([raw.setdefault(k, len(raw)) for k in zip(p["pid"], p["tid"])],
                    np.int64) for p in threads]
    first = np.full(len(raw), np.iinfo(np.int64).max)
    for i, p in zip(ids, threads):
        np.minimum.at(first, i, p["begin"])
    keys = list(raw)
    order = sorted(range(len(keys)), key=lambda j: (int(first[j]), str(keys[j])))
    renum = {keys[j]: k for k, j in enumerate(order)}
    info = [{"pid": keys[j][0], "tid": keys[j][1], "name": names.get(keys[j], "")}
            for j in order]
    probe = np.array([renum.setdefault(k, len(renum)) for k in zip(probes["pid"],
                                                                    probes["tid"])], np.int32)
    table = np.array([renum[k] for k in keys], np.int32)
    return [table[i] for i in ids], probe, info


def launch_probes(launch_ev: dict, gpu_ev: dict, sync_ev: dict, flows: dict,
            shift: int) -> dict:
    """The launch calls that device work or a sync refers to, and flow starts
    standing in for launch calls the trace lacks (their launch time NONE)."""
    wanted = set(gpu_ev["corr"])
    wanted.update(sync_ev["corr"])
    wanted.discard(None)
    rt = [i for i, c in enumerate(launch_ev["corr"]) if c in wanted]
    corr = [launch_ev["corr"][i] for i in rt]
    fl = [(c, f) for c in wanted.difference(corr) if c in flows and
          usable_id((f := flows[c]).get("pid")) and usable_id(f.get("tid"))]
    fl = [(c, f, ns) for c, f in fl if (ns := _flow_ns(f, shift)) != NONE]
    begin = np.concatenate([launch_ev["begin"][rt], np.array([x[2] for x in fl], np.int64)])
    return {"corr": corr + [x[0] for x in fl],
            "pid": [launch_ev["pid"][i] for i in rt] + [x[1].get("pid") for x in fl],
            "tid": [launch_ev["tid"][i] for i in rt] + [x[1].get("tid") for x in fl],
            "begin": begin,
            "launch": np.concatenate([begin[:len(rt)], np.full(len(fl), NONE, np.int64)])}


def nest(thread: np.ndarray, begin: np.ndarray, end: np.ndarray, n_items: int,
          own: np.ndarray):
    """Nesting of intervals per thread, and the innermost interval holding
    each probe (a launch call or flow start).

    The first ``n_items`` rows are intervals, the rest probes (their end is
    unused). ``own`` holds a value per interval that its descendants inherit
    unless they have their own (NONE: inherit). Returns the depth and the
    inherited value of each interval, and each probe's owner row (NONE:
    none)."""
    probe = np.arange(len(begin)) >= n_items
    order = np.lexsort((-(end - begin), probe, begin, thread)).tolist()
    th, b, e, mine = thread.tolist(), begin.tolist(), end.tolist(), own.tolist()
    depth, value = [0] * n_items, [NONE] * n_items
    owner = [NONE] * (len(b) - n_items)
    stack_end: list[int] = []
    stack_row: list[int] = []
    current = None
    for k in order:
        if th[k] != current:
            current, stack_end, stack_row = th[k], [], []
        t = b[k]
        if k < n_items:
            # An interval that ended at t does not hold one that begins at t.
            while stack_end and stack_end[-1] <= t:
                stack_end.pop(), stack_row.pop()
            depth[k] = len(stack_row)
            v = mine[k]
            value[k] = v if v != NONE else (value[stack_row[-1]] if stack_row else NONE)
            stack_end.append(e[k])
            stack_row.append(k)
        else:
            # A probe at an interval's last instant still belongs to it.
            while stack_end and stack_end[-1] < t:
                stack_end.pop(), stack_row.pop()
            owner[k - n_items] = stack_row[-1] if stack_row else NONE
    return (np.array(depth, np.int64), np.array(value, np.int64),
            np.array(owner, np.int64))


def _signature(args: dict) -> str:
    """A shape/dtype signature from Kineto's ``Input Dims``/``Input type``,
    one ``dtype[dims]`` per input: "float[32,3,224,224], float[64], Scalar"."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if dims is None and types is None:
        shapes = args.get("Shapes")   # written by export_chrome
        return shapes if isinstance(shapes, str) else ""
    dims = dims if type(dims) is list else []
    types = types if type(types) is list else []
    parts = []
    for i in range(max(len(dims), len(types))):
        t = types[i] if i < len(types) else ""
        d = dims[i] if i < len(dims) else []
        try:
            parts.append((t if type(t) is str else str(t)) +
                         (str(d).replace(" ", "") if d != [] else ""))
        except RecursionError:   # lists nested hundreds deep: no shape
            parts.append("?")
    return ", ".join(parts)


def read_ops(op_ev: dict, thread: np.ndarray, probes: dict, probe_thread: np.ndarray,
         strings: Strings, ours: bool) -> tuple[dict, dict, np.ndarray]:
    """The ops table (time order; export_chrome's files keep theirs), the
    links: correlation id → (op row, launch ns), and each event's op row."""
    n = len(op_ev["name"])
    intern = strings.intern
    name_id = np.array([intern(s) for s in op_ev["name"]], np.int32)
    grad_own = {strings.ids[s]: intern(s[len(BACKWARD_PREFIX):])
                for s in dict.fromkeys(op_ev["name"]) if s.startswith(BACKWARD_PREFIX)}
    own = np.array([grad_own.get(i, NONE) for i in name_id.tolist()], np.int64)
    depth, grad, owner = nest(np.concatenate([thread, probe_thread]),
                               np.concatenate([op_ev["begin"], probes["begin"]]),
                               np.concatenate([op_ev["end"], probes["begin"]]), n, own)
    # Time order; at equal begin the enclosing (longer) op first.
    order = np.arange(n) if ours else np.lexsort(
        (-(op_ev["end"] - op_ev["begin"]), thread, op_ev["begin"]))
    rank = np.empty(n + 1, np.int64)
    rank[order], rank[n] = np.arange(n), NONE  # rank[NONE] is NONE

    shapes = np.array([intern(_signature(a)) for a in op_ev["args"]], np.int32)
    flags = np.array([_named_flags(a) for a in op_ev["args"]], np.uint8)
    seq = [int_arg(a.get("External id"), i) for i, a in enumerate(op_ev["args"])] if ours \
        else np.arange(n)
    ops = {"seq": np.asarray(seq, np.int64), "thread": thread[order], "name": name_id[order],
           "shapes": shapes[order], "module": np.full(n, NONE), "grad_fn": grad[order],
           "device": np.full(n, NONE), "stream": np.full(n, NONE),
           "flags": flags[order],
           "depth": depth[order], "host_begin_ns": op_ev["begin"][order],
           "host_end_ns": op_ev["end"][order]}
    links = dict(zip(probes["corr"], zip(rank[owner].tolist(), probes["launch"].tolist())))
    return ops, links, rank[:n]


def _named_flags(args: dict) -> int:
    """COLLECTIVE for c10d ops, and the flags export_chrome wrote by name."""
    flags = int(OpFlag.COLLECTIVE) if "Collective name" in args else 0
    named = args.get("flags")
    if isinstance(named, str):
        for part in named.split("|"):
            flags |= int(OpFlag.__members__.get(part, 0))
    return flags


def link_explicitly(cols: dict, links: dict, by_ext: dict) -> None:
    """In export_chrome's files each GPU row and sync names its op's
    External id, which beats nesting where ops begin at one instant."""
    for corr, ext in zip(cols["corr"], arg_keys(cols["args"], "External id")):
        if corr is not None:
            links[corr] = (by_ext.get(ext, NONE), links.get(corr, (NONE, NONE))[1])


def _flow_ns(f: dict, shift: int) -> int:
    """A flow start's time in ns (shift added), NONE where it has none in
    range."""
    try:
        us = float(f.get("ts"))
    except (TypeError, ValueError, OverflowError):
        return NONE
    if not (abs(us) < TIME_LIMIT_NS / 1000 and abs(us * 1000 + shift) < TIME_LIMIT_NS):
        return NONE   # nan and inf fail too
    return int(to_ns(np.array([us]))[0]) + shift


def span_kind(name: str, args: dict) -> tuple[int, int]:
    """(SpanKind, step number or NONE) of a record_function range by its
    name: ``ProfilerStep#N`` a step, torch's DataLoader and optimizer
    ranges data and optimizer, any other a user span (export_chrome's
    files name the kind)."""
    m = STEP_RE.match(name)
    if m:
        return SpanKind.STEP, int(m.group(1))
    given = args.get(KIND_ARG, "")
    given = given.upper() if type(given) is str else ""
    if given in SpanKind.__members__:
        return SpanKind[given], NONE
    if name.startswith("enumerate(DataLoader)"):
        return SpanKind.DATA, NONE
    if name.startswith("Optimizer."):   # Optimizer.step#SGD.step, .zero_grad
        return SpanKind.OPTIMIZER, NONE
    return SpanKind.USER, NONE


def read_spans(span_ev: dict, thread: np.ndarray, strings: Strings, ours: bool,
               kind_number: list[tuple[int, int]]) -> dict:
    """The spans table (time order; export_chrome's files keep theirs):
    ``kind_number`` is each event's (SpanKind, step number)."""
    n = len(span_ev["name"])
    # export_chrome keeps a span's own name beside its Kineto one.
    names = [a.get("name") if isinstance(a.get("name"), str) and KIND_ARG in a else s
             for s, a in zip(span_ev["name"], span_ev["args"])]
    depth, _, _ = nest(thread, span_ev["begin"], span_ev["end"], n,
                        np.full(n, NONE, np.int64))
    rows = {"kind": np.array([k for k, _ in kind_number], np.uint8),
            "number": np.array([x for _, x in kind_number], np.int64),
            "name": np.array([strings.intern(s) for s in names], np.int32),
            "thread": thread, "depth": depth,
            "begin_ns": span_ev["begin"], "end_ns": span_ev["end"]}
    order = np.arange(n) if ours else np.lexsort(
        (-(rows["end_ns"] - rows["begin_ns"]), rows["begin_ns"]))
    return {k: v[order] for k, v in rows.items()}
