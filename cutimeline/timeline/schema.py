"""The data model's constants: the tables and their columns (``SCHEMA``),
their enums and flags, and how columns relate and are stored.

Times are integer nanoseconds (``_ns``). Columns that name a string hold an
int32 id into ``Timeline.strings``; columns that name a row of another table
hold that row's index. In both, ``NONE`` (-1) means "absent": an op in
forward has ``grad_fn == NONE``, a host-only op has ``device == NONE`` (the
CPU), a GPU row whose launching op is unknown has ``op == NONE``, a
device-wide sync has ``stream == NONE``.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = [
    "NONE", "SCHEMA", "FORMAT", "FORMAT_VERSION", "OpFlag", "SpanKind", "GpuKind",
    "EventKind", "CollectiveKind", "STRING_COLUMNS", "ENUM_COLUMNS", "REFERENCES", "ENCODING",
    "COMPILED_PREFIX", "TABLE_ADDED", "NON_BLOCKING_SYNC_KINDS", "DEFAULTS",
    "TIME_LIMIT_NS", "MAX_RANKS",
]

NONE = -1
#: times lie within ±2^62 ns (±146 years): a sum or difference of two stays
#: inside int64, where every stage computes (``invariants`` holds columns
#: and ``metakeys`` the meta's times to it)
TIME_LIMIT_NS = 2 ** 62
#: ranks and world sizes: a job of 2^20 processes is past any run today;
#: merge lists the ranks of its world, so a larger one is damage
MAX_RANKS = 2 ** 20
FORMAT = "cutimeline"
# 2: syncs.thread (files of version 1 read with it NONE)
# 3: one zip of meta.json (with a manifest) and columns.bin (each column
#    predicted, narrowed and deflated on its own; versions 1-2: an .npz)
# 4: tables sources, memory and flops (older files read with them empty)
# 5: table collectives (older files kept them in meta["collectives"], which
#    becomes the table as they load: timeline/collectives.py)
FORMAT_VERSION = 5

i8, i16, i32, i64, u8, f64 = (np.dtype(t) for t in
                              ("i1", "i2", "i4", "i8", "u1", "f8"))


class OpFlag(enum.IntFlag):
    """Bits of ``ops.flags``."""
    VIEW = 1         # metadata-only op (view, reshape): launches no work
    SYNC = 2         # blocks the host until device work completes (.item())
    COLLECTIVE = 4   # torch.distributed collective
    LAUNCH = 8       # enqueued device work (bracketed by events)
    CAPTURED = 16    # dispatched while a stream captured a CUDA graph
    TRUNCATED = 32   # first op past max_ops (the row is kept, none after)


class SpanKind(enum.IntEnum):
    """``spans.kind``."""
    STEP = 0
    DATA = 1
    FORWARD = 2
    BACKWARD = 3
    OPTIMIZER = 4
    USER = 5
    MODULE = 6
    SYNC = 7


class GpuKind(enum.IntEnum):
    """``gpu.kind``."""
    OP = 0          # all work one dispatched op launched (recorder)
    KERNEL = 1
    MEMCPY = 2
    MEMSET = 3
    GRAPH = 4       # a CUDA graph replay
    COMPILED = 5    # a torch.compile region
    COLLECTIVE = 6  # a communication kernel (NCCL)


# syncs rows of these kinds (imported from profiler traces) block no host:
# a cudaStreamWaitEvent makes a stream wait, not the CPU. The analysis sets
# them aside; the Timeline keeps them (export writes them back).
NON_BLOCKING_SYNC_KINDS = ("Stream Wait Event",)


class EventKind(enum.IntEnum):
    """``events.kind``."""
    BEGIN = 0   # recorded on the stream just before an op's launch
    END = 1     # recorded just after it
    ANCHOR = 2  # segment anchor: elapsed times are read relative to these
    PING = 3    # calibration ping (the host waited for it; see syncs)


class CollectiveKind(enum.IntEnum):
    """``collectives.kind``: what completing one proves across ranks
    (``dist/matching.py``'s roles)."""
    ALL = 0        # every rank of the group takes part (all_reduce, barrier, ...)
    FROM_ROOT = 1  # data from the root (broadcast, scatter)
    TO_ROOT = 2    # data to the root (reduce, gather)
    SEND = 3       # a point-to-point send
    RECV = 4       # a point-to-point receive
    WAIT = 5       # a functional collective's wait (an op kind; no row holds it)


SCHEMA: dict[str, tuple[tuple[str, np.dtype], ...]] = {
    # One row per dispatched aten op (host side), in dispatch order.
    "ops": (("seq", i64), ("thread", i32), ("name", i32), ("shapes", i32),
            ("module", i32), ("grad_fn", i32), ("device", i16),
            ("stream", i64), ("flags", u8), ("depth", i16),
            ("host_begin_ns", i64), ("host_end_ns", i64)),
    # Raw device events; raw_ns is the device clock (chained from anchors).
    "events": (("device", i16), ("stream", i64), ("kind", u8), ("op", i64),
               ("raw_ns", i64), ("host_record_ns", i64)),
    # One row per interval of device work; begin/end on the host clock.
    "gpu": (("op", i64), ("device", i16), ("stream", i64), ("name", i32),
            ("kind", u8), ("begin_event", i64), ("end_event", i64),
            ("launch_ns", i64), ("begin_ns", i64), ("end_ns", i64)),
    # Host-blocking points; last_event is the newest event the wait covered,
    # thread the host thread that waited (NONE: unknown).
    "syncs": (("op", i64), ("kind", i32), ("device", i16), ("stream", i64),
              ("last_event", i64), ("host_begin_ns", i64),
              ("host_end_ns", i64), ("thread", i32)),
    # Host ranges; number is the step number of STEP spans, the ns a DATA
    # span (a fetch) waited for a DataLoader worker's batch where the
    # recording modelled it (SimGPU), NONE otherwise.
    "spans": (("kind", u8), ("name", i32), ("thread", i32), ("depth", i16),
              ("number", i64), ("begin_ns", i64), ("end_ns", i64)),
    # Per device: host_ns = offset_ns + slope * (raw_ns - ref_raw_ns).
    "clocks": (("device", i16), ("ref_raw_ns", i64), ("offset_ns", i64),
               ("slope", f64), ("bound_ns", f64), ("bound_max_ns", f64),
               ("relax_ns", f64), ("n_lower", i64), ("n_upper", i64),
               ("ping_offset_ns", i64)),
    # Simulated runs only: the true host-clock time of each event.
    "truth": (("event", i64), ("host_ns", i64)),
    # Where in the user's code an op (op) or a host span (span; the other
    # NONE) came from: the first frame outside torch and cutimeline.
    "sources": (("op", i64), ("span", i64), ("file", i32), ("line", i32),
                ("function", i32), ("code", i32)),
    # Device memory: per op that changed it (op; NONE when imported without
    # one), bytes it allocated and bytes freed since the previous row, and
    # the bytes in use after it, at host time host_ns.
    "memory": (("op", i64), ("device", i16), ("host_ns", i64), ("allocated", i64),
               ("freed", i64), ("in_use", i64)),
    # Floating-point operations of an op's device work (torch's formulas).
    "flops": (("op", i64), ("flops", f64)),
    # One row per torch.distributed collective, by its op (op), in op order:
    # group indexes meta["groups"] (NONE: unknown), kind its CollectiveKind,
    # number its count on the group from 0 (p2p: on the sender-receiver
    # pair; NONE: unknown), peer the global rank of the root or of the
    # other side (NONE: none or unknown), done_ns the host time it had
    # completed by (NONE: unknown). Its rank is its op's thread's
    # (meta["thread_rank"] in a merged Timeline).
    "collectives": (("op", i64), ("group", i32), ("kind", u8), ("number", i64),
                    ("peer", i32), ("done_ns", i64)),
}

#: what a column left out of a new Table holds where that is not NONE (or 0
#: for floats): every op and span runs on some thread, so a Timeline built
#: without saying which has one, thread 0 (a NONE thread indexes no lane)
DEFAULTS = {("ops", "thread"): 0, ("spans", "thread"): 0}

#: the format version that added each table after version 3
TABLE_ADDED = {"sources": 4, "memory": 4, "flops": 4, "collectives": 5}

# Columns holding string ids, decoded by to_pandas.
STRING_COLUMNS = {("ops", "name"), ("ops", "shapes"), ("ops", "module"),
                  ("ops", "grad_fn"), ("gpu", "name"), ("syncs", "kind"),
                  ("spans", "name"), ("sources", "file"), ("sources", "function"),
                  ("sources", "code")}
ENUM_COLUMNS = {("spans", "kind"): SpanKind, ("gpu", "kind"): GpuKind,
                ("events", "kind"): EventKind, ("collectives", "kind"): CollectiveKind}
# Columns holding a row index of another table.
REFERENCES = {("gpu", "op"): "ops", ("events", "op"): "ops",
              ("syncs", "op"): "ops", ("syncs", "last_event"): "events",
              ("gpu", "begin_event"): "events", ("gpu", "end_event"): "events",
              ("truth", "event"): "events", ("sources", "op"): "ops",
              ("sources", "span"): "spans", ("memory", "op"): "ops",
              ("flops", "op"): "ops", ("collectives", "op"): "ops"}
# On disk (format 3 on) an integer column is stored as its residual after a
# prediction: ("raw",) none; ("delta",) the previous row's value; ("minus",
# c) column c of the same row; ("after", c) column c of the previous row
# (an op's begin: the previous op's end); ("ref", r, t, c) column c of the
# row of table t that column r names (0 where r is NONE). Listed: each
# column's candidates, the writer taking per file the one that stores
# smallest (prediction.py); unlisted columns are stored raw. Every candidate
# depends only on columns the reader decodes first, or (an "after" column
# whose column is "minus" it) decodes jointly with them.
_DELTA = ("delta",)
ENCODING = {
    ("ops", "seq"): (_DELTA,),
    ("ops", "host_begin_ns"): (_DELTA, ("after", "host_end_ns")),
    ("ops", "host_end_ns"): (("minus", "host_begin_ns"),),
    ("events", "op"): (_DELTA,),
    ("events", "raw_ns"): (_DELTA, ("minus", "host_record_ns")),
    ("events", "host_record_ns"): (_DELTA,),
    ("gpu", "op"): (_DELTA,),
    ("gpu", "device"): (("raw",), ("ref", "op", "ops", "device")),
    ("gpu", "stream"): (("raw",), ("ref", "op", "ops", "stream")),
    ("gpu", "name"): (("raw",), ("ref", "op", "ops", "name")),
    ("gpu", "begin_event"): (_DELTA,),
    ("gpu", "end_event"): (("minus", "begin_event"),),
    ("gpu", "launch_ns"): (_DELTA, ("ref", "op", "ops", "host_begin_ns"),
                           ("ref", "op", "ops", "host_end_ns")),
    ("gpu", "begin_ns"): (_DELTA, ("minus", "launch_ns"), ("after", "end_ns")),
    ("gpu", "end_ns"): (("minus", "begin_ns"),),
    ("syncs", "host_begin_ns"): (_DELTA,),
    ("syncs", "host_end_ns"): (("minus", "host_begin_ns"),),
    ("spans", "begin_ns"): (_DELTA,),
    ("spans", "end_ns"): (("minus", "begin_ns"),),
    ("truth", "event"): (_DELTA,),
    ("truth", "host_ns"): (_DELTA, ("ref", "event", "events", "host_record_ns")),
    ("sources", "op"): (_DELTA,),
    ("memory", "op"): (_DELTA,),
    ("memory", "host_ns"): (_DELTA, ("ref", "op", "ops", "host_end_ns")),
    ("memory", "in_use"): (_DELTA,),
    ("flops", "op"): (_DELTA,),
    ("collectives", "op"): (_DELTA,),
    ("collectives", "number"): (("raw",), _DELTA),
    # a blocking collective completes just before its op returns
    ("collectives", "done_ns"): (_DELTA, ("ref", "op", "ops", "host_end_ns")),
}

# The op name of a torch.compile graph's call: COMPILED_PREFIX + its number
# (the recorder names them so; nesting and the plot recognise them by it).
COMPILED_PREFIX = "inductor::graph_"
