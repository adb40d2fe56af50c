"""Assembly: the Timeline a finished recording makes, aligned.

At stop the session holds rows per thread (ops in compact chunks and the
tuples appended since, ``opstream.OpRows``; launches and spans as tuples) and
the device hands back a ``Harvest``; ``assemble`` gathers them into the Timeline's tables
(ops sorted by ``seq``; events, syncs and gpu rows mapped from sequence
numbers to ops rows; every thread's spans; the sources, memory readings,
FLOPs and collectives the session measured, mapped to ops and spans rows by
``_measured``)
under the meta ``meta_at_stop`` makes, and ``aligned`` aligns its clocks
when it has device work.
"""

from __future__ import annotations

import itertools
import platform
import socket
import warnings
from typing import Any

import numpy as np
import torch

from .._version import __version__
from ..devices.device import Harvest
from ..errors import CutimelineError
from ..timeline.collectives import COLUMNS as COLLECTIVE_COLUMNS
from ..timeline.ranks import warp_host
from ..timeline.schema import NONE, GpuKind, OpFlag
from ..timeline.timeline import Timeline
from .hooks.compiled import cut
from .ranks import rank_meta
from .selfcost import priced
from .session import Session

__all__ = ["aligned", "assemble", "meta_at_stop", "ops_columns"]


def aligned(tl: Timeline) -> Timeline:
    """``tl`` with its clocks aligned when it has device work; unaligned,
    with ``meta["align_error"]`` and a warning, when they cannot be."""
    if not len(tl.gpu):
        return tl.replace(meta={**tl.meta, "aligned": True})
    # here, not at the top: the aligner loads Numba (0.3 s), which a recording
    # with no device work, or one in progress, does not need
    from ..alignment.aligner import align
    try:
        return align(tl)
    except CutimelineError as exc:
        warnings.warn(f"cutimeline could not align the recorded clocks ({exc}); "
                      f"the Timeline is kept unaligned, meta['align_error'] says why.",
                      RuntimeWarning, 3)
        return tl.replace(meta={**tl.meta, "align_error": str(exc)})


def meta_at_stop(s: Session, harvest: Harvest | None, meta: dict[str, Any],
                 dev: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The Timeline's meta: what ``start()`` noted (``meta``), the device's
    harvest, versions, host, ``record()``'s options, threads, calibrations,
    torch's fp32 matmul precision at stop, whether ``max_ops`` cut it,
    the process groups of its collectives, rank, and ``warnings``:
    sentences on what the recording could not show (``Session.warnings``)."""
    started, meta = meta, dict(meta)
    if harvest is not None:
        meta.update(harvest.meta)
    o = dict(options)
    o["device"] = "cpu" if dev is None else repr(dev)
    meta.update({
        "versions": {"cutimeline": __version__, "torch": torch.__version__,
                     "python": platform.python_version()},
        "host": socket.gethostname(), "options": o, "aligned": False,
        "devices": [] if dev is None else [{
            "index": dev.index, "kind": dev.kind,
            "name": meta.get("device_name", getattr(dev, "name", repr(dev)))}],
        "threads": [w.name for w in s.writers],
        # may fp32 matmuls run on TF32 tensor cores (MFU's peak: analysis/tables/flops.py)
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        # and convolutions (cuDNN's own switch), and whether cuDNN benchmarked
        # its algorithms (the GPU-side what-if edits read both)
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "overhead_calibrations": [list(c) for c in s.calibrations],
        "truncated": s.cut_ns is not None,
        # what moving op rows into chunks took while recording (opstream.OpRows)
        "op_rows_converted": s.rows.stats()})
    if s.collectives is not None:
        meta.update(s.collectives.meta())
    if s.warnings:  # what the recording could not show, in sentences (the device's too)
        meta["warnings"] = [*meta.get("warnings", []), *s.warnings]
    if options.get("out_dir"):
        meta.update(rank_meta(started))
    return meta


def _rows(lists: list[list[tuple]], width: int) -> np.ndarray:
    return np.array(list(itertools.chain.from_iterable(lists)),
                    np.int64).reshape(-1, width)


def _row_of(seq: np.ndarray, wanted: Any) -> np.ndarray:
    """Rows of ``seq`` (sorted) holding the sequence numbers ``wanted``;
    NONE where none does (pings, anchors, ops past max_ops)."""
    wanted = np.asarray(wanted, np.int64)
    i = np.minimum(np.searchsorted(seq, wanted), max(len(seq) - 1, 0))
    hit = (wanted >= 0) & (len(seq) > 0)
    hit[hit] = seq[i[hit]] == wanted[hit]
    return np.where(hit, i, NONE)


def _sync_threads(ident: Any, op: np.ndarray, op_thread: np.ndarray,
                  writers: list) -> np.ndarray:
    """The thread of each sync: its op's, else the writer of the thread
    that waited (``ident``, from the device; a thread id reused by a later
    thread goes to the later writer), else NONE."""
    out = np.full(len(op), NONE, np.int32)
    if ident is not None and len(op):
        of = {w.ident: w.thread for w in writers}
        out[:] = [of.get(int(i), NONE) for i in np.asarray(ident).tolist()]
    has = op >= 0
    out[has] = op_thread[op[has]]
    return out


def _launch_ns(launches: np.ndarray, row: np.ndarray, record_ns: np.ndarray,
               ops: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """When each gpu row's work was enqueued: an op's launch call returns
    at the end of its dispatch, so its op's host end (the BEGIN event was
    recorded at the start of the dispatch); the BEGIN's record time for
    host-blocking ops (whose end is after the wait), compiled regions and
    rows of no op."""
    out = record_ns[launches[:, 2]].copy()
    has = (row >= 0) & (launches[:, 4] == int(GpuKind.OP))
    has[has] = (flags[row[has]] & (OpFlag.SYNC | OpFlag.COLLECTIVE)) == 0
    out[has] = np.maximum(ops[row[has], 2], out[has])
    return out


def _span_rows(counts: list[int], order: np.ndarray, thread: np.ndarray,
               index: np.ndarray) -> np.ndarray:
    """Rows in the spans table (sorted by ``order``) of the ``index``-th
    span of each writer ``thread`` (``counts``: spans per writer); NONE
    for one not in it."""
    n = np.asarray(counts, np.int64)
    ok = (thread >= 0) & (thread < len(n)) & (index >= 0)
    ok[ok] = index[ok] < n[thread[ok]]
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    out = np.full(len(thread), NONE, np.int64)
    out[ok] = rank[np.concatenate([[0], np.cumsum(n)])[thread[ok]] + index[ok]]
    return out


def _measured(s: Session, seq: np.ndarray, counts: list[int],
              order: np.ndarray) -> dict[str, Any]:
    """The tables sources (by op row, then by span row), memory (in host
    time order), flops and collectives (by op row) from the session's rows,
    keyed by sequence number or by (thread, span index); rows of no op or
    span kept (past max_ops) are dropped."""
    out: dict[str, Any] = {}
    src = np.array(s.sourced, np.int64).reshape(-1, 7)
    op = _row_of(seq, src[:, 0])
    span = _span_rows(counts, order, src[:, 1], src[:, 2])
    span[src[:, 0] >= 0] = NONE
    keep = np.lexsort((span, op, op < 0))  # ops rows first, by op; then spans
    keep = keep[(op[keep] >= 0) | (span[keep] >= 0)]
    out["sources"] = {"op": op[keep], "span": span[keep], "file": src[keep, 3],
                      "line": src[keep, 4], "function": src[keep, 5], "code": src[keep, 6]}
    rows = np.array(s.flopper.rows, np.float64).reshape(-1, 2)
    op = _row_of(seq, rows[:, 0].astype(np.int64))
    keep = np.argsort(op, kind="stable")
    keep = keep[op[keep] >= 0]
    out["flops"] = {"op": op[keep], "flops": rows[keep, 1]}
    if s.collectives is not None:  # ROW: seq, then the table's columns after op
        rows = s.collectives.snapshot()
        op = _row_of(seq, rows[:, 0])
        keep = np.argsort(op, kind="stable")
        keep = keep[op[keep] >= 0]
        out["collectives"] = {"op": op[keep], **{
            c: rows[keep, i] for i, c in enumerate(COLLECTIVE_COLUMNS[1:], 1)}}
    if s.memlog is not None:
        s.memlog.close()  # the recording is over: its finalizers go
        mem = np.array(s.memlog.rows, np.int64).reshape(-1, 5)
        mem = mem[np.argsort(mem[:, 1], kind="stable")]
        out["memory"] = {"op": _row_of(seq, mem[:, 0]),
                         "device": np.full(len(mem), s.memlog.index, np.int16),
                         "host_ns": mem[:, 1], "allocated": mem[:, 2],
                         "freed": mem[:, 3], "in_use": mem[:, 4]}
    return out


def ops_columns(ops: np.ndarray, thread: np.ndarray, sig: np.ndarray, ctx: np.ndarray,
                index: int, stream: np.ndarray) -> dict[str, np.ndarray]:
    """The ops table's columns of a writer's rows ``ops`` (seq, t0, t1,
    sig, ctx, grad_fn, flags; ``Writer.ops``) recorded by ``thread``:
    name, shapes and device from the session's ``sig`` table (the device
    ``index`` for ops that launched on it), module and depth from its
    ``ctx`` table; ``stream`` that of each op's launch (NONE: none)."""
    sig_of, ctx_of, flags = ops[:, 3], ops[:, 4], ops[:, 6]
    on_device = (flags & (OpFlag.LAUNCH | OpFlag.CAPTURED)) != 0
    return {"seq": ops[:, 0], "thread": thread, "name": sig[sig_of, 0],
            "shapes": sig[sig_of, 1], "module": ctx[ctx_of, 0], "depth": ctx[ctx_of, 1],
            "grad_fn": ops[:, 5], "device": np.where(on_device, index, sig[sig_of, 2]),
            "stream": stream, "flags": flags, "host_begin_ns": ops[:, 1],
            "host_end_ns": ops[:, 2]}


def assemble(s: Session, harvest: Harvest | None, meta: dict[str, Any]) -> Timeline:
    """The Timeline of a finished session: ops sorted by seq; events, syncs
    and gpu rows mapped from seq to ops rows; every thread's spans."""
    ws = list(s.writers)
    per_writer = [s.rows.table(w) for w in ws]  # converted chunks, then the rest
    ops = np.concatenate(per_writer) if per_writer else np.zeros((0, 7), np.int64)
    thread = np.repeat(np.array([w.thread for w in ws], np.int32),
                       [len(o) for o in per_writer])
    order = np.argsort(ops[:, 0], kind="stable")
    ops, thread = ops[order], thread[order]
    seq, sig_of, flags = ops[:, 0], ops[:, 3], ops[:, 6]
    sig = np.array(s.sig_table, np.int64).reshape(-1, 3)
    meta = priced(s, ops, sig, meta)
    ctx = np.array(s.ctx_table, np.int64).reshape(-1, 2)
    index = NONE if s.device is None else s.device.index
    launches = _rows([w.launches for w in ws], 5)
    launches = cut(launches[np.argsort(launches[:, 0], kind="stable")])
    row = _row_of(seq, launches[:, 0])
    stream = np.full(len(ops), NONE, np.int64)
    stream[row] = launches[:, 1]
    names = sig[sig_of, 0]
    tables: dict[str, Any] = {"ops": ops_columns(ops, thread, sig, ctx, index, stream)}
    span_lists = [list(w.spans) for w in ws]  # a late span from another thread
    spans = _rows(span_lists, 7)
    span_order = np.argsort(spans[:, 5], kind="stable")
    spans = spans[span_order]
    tables["spans"] = dict(zip(("kind", "name", "thread", "depth", "number",
                                "begin_ns", "end_ns"), spans.T))
    tables.update(_measured(s, seq, [len(x) for x in span_lists], span_order))
    if harvest is not None:
        events = dict(harvest.events, op=_row_of(seq, harvest.events["op"]))
        syncs = dict(harvest.syncs, op=_row_of(seq, harvest.syncs["op"]))
        syncs["kind"] = np.array([s.intern(str(k)) for k in syncs["kind"]], np.int32)
        syncs["thread"] = _sync_threads(syncs.pop("ident", None), syncs["op"], thread, ws)
        record_ns = np.asarray(events["host_record_ns"], np.int64)
        tables.update(events=events, syncs=syncs, truth=harvest.truth, gpu={
            "op": row, "device": np.full(len(row), index, np.int16),
            "stream": launches[:, 1], "name": names[row], "kind": launches[:, 4],
            "begin_event": launches[:, 2], "end_event": launches[:, 3],
            "launch_ns": _launch_ns(launches, row, record_ns, ops, flags)})
    tl = Timeline({k: v for k, v in tables.items() if v is not None}, s.strings, meta)
    if harvest is not None and harvest.host_map is not None:
        # a simulator's virtual host clock
        tl = warp_host(tl, *harvest.host_map)
    return tl
