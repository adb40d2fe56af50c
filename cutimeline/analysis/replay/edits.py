"""What-if edits: each fix a user could make, as a change of the replay's inputs.

The replay (``whatif.py`` over ``replaying.replay``) takes host time
removed (at points, and whole intervals), the syncs the host still waits
for and the gpu rows still launched; an edit's ``Changes`` say which of
those change (``changes``; None when there is nothing to remove):

* ``recorder``: the recorder's own host cost (``costs.py``), at points;
* ``data``: DataLoader fetches (``activity.fetch_spans``) take no time;
* ``sync``: host-blocking ops, the syncs they made and the host's waits
  of no op are gone, with their read-back copies (an op that also ran
  kernels keeps them);
* ``host``: op-free stretches of at least ``host_gap_ns`` between the
  first and the last op take no time;
* ``launch``: each device op's host time halved: partial
  (``Edit.complete`` False), so it names no verdict;
* ``graphs``: each piece of a step between host syncs (a graph cannot
  hold a sync) costs what its first launch did (``_graph_cuts``);
* ``tf32``, ``bf16``, ``fused_optimizer``, ``compile``: GPU work scaled
  by the roofline's ratio per op, or rows merged (``gpuside.py``);
* ``copies``: host→device copies made asynchronous on a side stream
  (``_h2d_copies`` says which copies, and why only those).

A fix is judged on the program without the recorder (``combined`` joins
the recorder's edit to it); the complete fixes are what a verdict weighs
(``verdicts/causal.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import CutimelineError
from ...numeric import intervals as iv
from ...numeric.columns import extent
from ...numeric.ordering import sort_order
from ...timeline.schema import NONE, GpuKind, OpFlag
from ...timeline.timeline import Timeline
from ..idle.activity import HostActivity, subtract
from ..idle.gaps import CauseName
from ..idle.steps import step_windows
from ..tables.oneoff import one_offs
from ..thresholds import THRESHOLDS
from .costs import costs
from .editname import EditName
from .gpuside import GPU_EDITS, gpu_edit

__all__ = ["Edit", "EditName", "EDITS", "FIXES", "Changes", "changes", "combined", "edit_named",
           "STAGED_LAUNCHES"]

STAGED_LAUNCHES = THRESHOLDS.staged_launches  # why: analysis/thresholds.py


@dataclass(frozen=True)
class Edit:
    """One fix: ``name`` (what ``Report.what_if(edit=...)`` takes),
    ``code`` (the change in the user's code), ``cause`` (the idle cause it
    addresses, a ``CauseName``; "gpu" for the GPU-side edits, "" for the
    recorder), ``remedy`` (what the program would do
    instead, as a verdict says it), ``complete`` (whether it removes that
    bottleneck whole, as a verdict asks, or only makes it cheaper)."""
    name: EditName
    code: str
    cause: str
    remedy: str = ""
    complete: bool = True

    @property
    def is_fix(self) -> bool:
        """A change in the user's code (``FIXES``): every edit but the
        recorder's own cost."""
        return self.name != EditName.RECORDER

    @property
    def on_gpu(self) -> bool:
        """A GPU-side edit (``gpuside.GPU_EDITS``): it changes GPU work."""
        return self.name in GPU_EDITS


EDITS = {e.name: e for e in (
    Edit(EditName.DATA, "DataLoader(num_workers>=2, pin_memory=True): batches ready "
         "when the step asks", CauseName.DATA, "batches ready when the step asks"),
    Edit(EditName.SYNC, "keep values on the GPU and read them back every N steps, "
         "not in each step (.item(), .cpu(), print of a GPU value)", CauseName.SYNC,
         "no host reads of GPU values inside the step"),
    Edit(EditName.COPIES, "copy batches asynchronously: pin_memory=True, "
         ".to(device, non_blocking=True) on a side stream, an event for the compute",
         CauseName.SYNC, "batches copied asynchronously from pinned memory"),
    Edit(EditName.HOST, "move the Python between ops (logging, metrics, bookkeeping) "
         "out of the step or overlap it", CauseName.HOST,
         "the Python between ops moved out of the step"),
    Edit(EditName.GRAPHS, "CUDA graphs: torch.compile(mode=\"reduce-overhead\") or "
         "torch.cuda.graph, one launch per sync-free piece of the step", CauseName.LAUNCH,
         "CUDA graphs, one launch per sync-free piece of the step"),
    Edit(EditName.LAUNCH, "halve the host's launch cost: a faster dispatcher, "
         "torch.compile, fused/foreach ops", CauseName.LAUNCH, "a dispatcher twice as fast",
         complete=False),
    Edit(EditName.TF32, "torch.set_float32_matmul_precision(\"high\"): fp32 matmuls on TF32 "
         "tensor cores", "gpu", "fp32 matmuls on TF32 tensor cores"),
    Edit(EditName.BF16, "torch.autocast(\"cuda\", dtype=torch.bfloat16) around the forward "
         "and the loss", "gpu", "bf16 autocast"),
    Edit(EditName.FUSED_OPTIMIZER, "the optimizer with fused=True (e.g. torch.optim.AdamW(..., "
         "fused=True)): one kernel per step", "gpu",
         "a fused optimizer, one kernel per step"),
    Edit(EditName.COMPILE, "torch.compile(model): element-wise and normalisation ops fused", "gpu",
         "torch.compile's fused element-wise ops"),
    Edit(EditName.RECORDER, "run without the recorder (its own host cost removed)", "",
         "no recorder"),
)}
#: the edits a user can make, in ``EDITS`` order (the recorder is not one)
FIXES = tuple(n for n, e in EDITS.items() if e.is_fix)


def edit_named(name: str) -> Edit:
    """The edit called ``name``, or a CutimelineError listing them."""
    if isinstance(name, Edit):
        return name
    if not isinstance(name, str) or name not in EDITS:
        raise CutimelineError(f"There is no what-if edit {name!r:.60}; the edits are "
                              f"{', '.join(EDITS)}.")
    return EDITS[name]


@dataclass(frozen=True)
class Changes:
    """An edit's inputs to the replay: host time removed at points
    (``cost_t``, ``cost``, sorted by time) and over sorted disjoint
    intervals [``cut_b``, ``cut_e``); ops and syncs that are gone (bool
    masks over their tables; a gone op's gpu rows go with it); ops whose
    gpu rows move to a side stream (``side_ops``, None: none); gpu rows
    whose work takes longer or shorter (``gpu_scale``, the GPU-side
    edits, ``gpuside.py``)."""
    cost_t: np.ndarray
    cost: np.ndarray
    cut_b: np.ndarray
    cut_e: np.ndarray
    drop_ops: np.ndarray
    drop_syncs: np.ndarray
    side_ops: np.ndarray | None = None
    #: per gpu row, its duration in the replay over its recorded one (None: as recorded)
    gpu_scale: np.ndarray | None = None


def changes(tl: Timeline, edit: Edit, act: HostActivity,
            engine: str = "numba") -> Changes | None:
    """``edit`` applied to ``tl`` (``act``: its ``activity.host_activity``);
    None when there is nothing it would remove."""
    o, y = tl.ops, tl.syncs
    none = np.zeros(0, np.int64)
    drop_ops, drop_syncs = np.zeros(len(o), bool), np.zeros(len(y), bool)
    cuts = (none, none)
    if edit.on_gpu:
        got = gpu_edit(tl, edit.name, act)
        if got is None:
            return None
        return Changes(none, none, got.cut_b, got.cut_e, got.drop_ops, drop_syncs,
                       gpu_scale=got.scale)
    if edit.name == EditName.RECORDER:
        spent = costs(tl, engine)
        if spent is None or not spent[1].sum():
            return None
        return Changes(spent[0], spent[1], none, none, drop_ops, drop_syncs)
    if edit.name == EditName.DATA:
        cuts = act.data
    elif edit.name == EditName.SYNC:
        sync_ops = (o.flags & OpFlag.SYNC) != 0
        # the host's waits made by those ops, and those of no op (the user's
        # torch.cuda.synchronize(), a trace's runtime syncs); the recorder's
        # calibration pings stay
        drop_syncs = _of_op(y.op, sync_ops) | ((y.op == NONE) & (y.kind != tl.string_id("ping")))
        # gone with their own rows (a read-back's copy, the bracket of a
        # read), except ops that also ran kernels: an imported op around a
        # blocking call (``aten::mm`` holding a cudaStreamSynchronize) keeps
        # its work and loses its wait
        drop_ops = sync_ops & ~_runs_kernels(tl)
        cuts = iv.union(np.concatenate([o.host_begin_ns[sync_ops], y.host_begin_ns[drop_syncs]]),
                        np.concatenate([o.host_end_ns[sync_ops], y.host_end_ns[drop_syncs]]),
                        engine)
    elif edit.name == EditName.COPIES:
        side = _h2d_copies(tl)
        if side is None or not side.any():
            return None
        drop_syncs = _of_op(y.op, side)
        b, e = np.asarray(o.host_begin_ns, np.int64), np.asarray(o.host_end_ns, np.int64)
        keep = _launch_ns(tl, side)
        b, e = b[side] + np.minimum(e[side] - b[side], keep), e[side]
        order = np.argsort(b, kind="stable")
        b, e = iv.union(b[order][e[order] > b[order]], e[order][e[order] > b[order]], engine)
        return Changes(none, none, b, e, drop_ops, drop_syncs, side)
    elif edit.name == EditName.HOST:
        cuts = _host_stretches(tl, act, engine)
    elif edit.name == EditName.LAUNCH:
        cuts = _launch_cuts(tl, engine)
    elif edit.name == EditName.GRAPHS:
        cuts = _graph_cuts(tl, act, engine)
    else:
        raise CutimelineError(f"The what-if edit {edit.name.value!r} has no replay inputs.")
    b, e = (np.asarray(c, np.int64) for c in cuts)
    keep = e > b
    if not keep.all():
        b, e = b[keep], e[keep]
    b, e = iv.union(b, e, engine)  # threads' cuts may overlap
    if not len(b):
        return None
    return Changes(none, none, b, e, drop_ops, drop_syncs)


_COPY_NAMES = ("aten::_to_copy", "aten::copy_", "aten::to")


def _launch_ns(tl: Timeline, copies: np.ndarray) -> int:
    """What a launch costs the host here: the median host time of the
    device ops that are neither ``copies`` nor syncs (0 with none)."""
    o = tl.ops
    other = (o.device != NONE) & ((o.flags & (OpFlag.SYNC | OpFlag.LAUNCH)) == OpFlag.LAUNCH)
    other &= ~copies
    return int(np.median(o.host_end_ns[other] - o.host_begin_ns[other])) if other.any() else 0


def _h2d_copies(tl: Timeline) -> np.ndarray | None:
    """The copy ops that can only be host→device, which the ``copies``
    edit makes asynchronous: a bool mask over ops, None when the Timeline
    has no other device op to price a launch by.

    Each such copy then costs the host what a launch does (``_launch_ns``),
    its sync is gone, and its gpu rows move to a stream of their own, the
    first compute launched after them on their stream waiting for them
    (``whatif._side_streams``). A Timeline does not say which way a copy
    goes, so only these count: one that is no sync yet took the host more
    than ``STAGED_LAUNCHES`` launches (staging pageable memory: a copy to
    the host does not stage), and a blocking one launched before any
    device op of its step but copies (the batch coming in; a read-back
    follows the compute it reads), not right after a cast
    (``.to(dtype).cpu()``). A blocking read-back of the last step's values
    at the head of a step (``loss.cpu()`` after ``optimizer.step()``) is
    taken for one: only the recorder knows a copy's direction, and no op
    flag says it yet. Device-to-host copies are the ``sync`` edit's."""
    o = tl.ops
    names = np.unique(o["name"])
    ids = [int(i) for i in names if tl.string(int(i)).split(".")[0] in _COPY_NAMES]
    launched = (o.device != NONE) & ((o.flags & OpFlag.LAUNCH) != 0)
    copy = launched & np.isin(o["name"], ids)
    if not copy.any():
        return None
    launch = _launch_ns(tl, copy)
    if not launch:
        return None
    own = np.asarray(o.host_end_ns - o.host_begin_ns, np.int64)
    sync = (o.flags & OpFlag.SYNC) != 0
    staged = copy & ~sync & (own > STAGED_LAUNCHES * launch)
    # a blocking copy before any device op of its step but copies
    _, hb, _ = step_windows(tl)
    dev = np.flatnonzero(launched)
    dev = dev[np.argsort(o.host_begin_ns[dev], kind="stable")]
    step = np.searchsorted(hb, o.host_begin_ns[dev], side="right")
    compute = ~copy[dev]
    # per op of dev: how many compute ops of its step came before it
    seen = np.cumsum(compute) - compute
    first = np.concatenate([[True], step[1:] != step[:-1]])
    at_start = np.maximum.accumulate(np.where(first, np.arange(len(dev)), 0))
    head = seen - seen[at_start] == 0
    # a read-back of a cast's output (``.to(dtype).cpu()``) follows the cast
    cast = (copy & ~sync & ~staged)[dev]
    head &= ~np.concatenate([[False], cast[:-1]])
    out = staged.copy()
    out[dev[head & copy[dev] & sync[dev]]] = True
    return out


def _host_stretches(tl: Timeline, act: HostActivity, engine: str):
    """Op-free stretches of at least ``act.host_gap_ns`` between the first
    and the last op's begin, outside fetches and syncs: the host's own."""
    o = tl.ops
    if len(o) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    busy_b, busy_e = iv.union(
        np.concatenate([act.launching[0], act.data[0], act.sync[0]]),
        np.concatenate([act.launching[1], act.data[1], act.sync[1]]), engine)
    b, e = busy_e[:-1], busy_b[1:]
    lo, hi = int(o.host_begin_ns.min()), int(o.host_begin_ns.max())
    keep = (e - b >= act.host_gap_ns) & (b >= lo) & (e <= hi)
    return b[keep], e[keep]


def _launch_cuts(tl: Timeline, engine: str):
    """The second half of each device op's host time, which ``launch``
    removes. The recorder's own cost is spent between ops (``costs.py``
    prices it at the op's begin, outside its interval), so it is kept: it
    runs after the fix too. So are one-off calls (``oneoff.py``: warm-up
    inside an op, as lazy initialisation or autotuning) and the ops that
    hold them: a faster launch path does not remove them."""
    o = tl.ops
    b, e = np.asarray(o.host_begin_ns, np.int64), np.asarray(o.host_end_ns, np.int64)
    dev = (o.device != NONE) & ((o.flags & OpFlag.SYNC) == 0)
    # every op a device op (no sync): the columns themselves, no gathered copy
    dev = None if dev.all() else np.flatnonzero(dev)
    if dev is not None:
        b, e = b[dev], e[dev]
    warm = _one_off_ops(tl)
    if len(warm):  # device ops around (or being) a one-off call keep their time
        wb, we = o.host_begin_ns[warm], o.host_end_ns[warm]
        th = o.thread if dev is None else o.thread[dev]
        keep = ((b[:, None] <= wb) & (e[:, None] >= we) &
                (th[:, None] == o.thread[warm])).any(axis=1)
        b, e = b[~keep], e[~keep]
    # the cuts [e − cut, e) in any order: ``changes`` unites them (a set:
    # the union is the same whichever order they come in, and sorts them
    # when they are not sorted already)
    cut = e - b  # the recorder's bookkeeping lies outside the op's interval
    cut >>= 1  # // 2 (an arithmetic shift floors as // does), at a fraction of its cost
    return np.subtract(e, cut, out=cut), e  # e − cut, in the array cut was


def _graph_cuts(tl: Timeline, act: HostActivity, engine: str):
    """What CUDA graphs remove: per piece of a step that a graph can hold
    (its device ops between two host syncs), the dispatching
    (``act.launch_only``: ops, views and the glue between them, outside
    fetches and syncs) from the end of the piece's first launch to the end
    of its last; the first launch stays, as the graph's own. One-off calls
    and the ops around them keep their time (see ``_launch_cuts``)."""
    o = tl.ops
    lb, le = act.launch_only
    d = np.flatnonzero((o.device != NONE) &
                       ((o.flags & (OpFlag.SYNC | OpFlag.LAUNCH)) == OpFlag.LAUNCH))
    none = np.zeros(0, np.int64)
    if len(d) < 2 or not len(lb):
        return none, none
    order = sort_order(o.host_begin_ns[d], engine)
    if order is not None:
        d = d[order]
    b, e = np.asarray(o.host_begin_ns[d], np.int64), np.asarray(o.host_end_ns[d], np.int64)
    _, hb, _ = step_windows(tl)
    sb, _ = act.sync
    # a piece: the launches of one step with no host sync begun between them
    piece = np.searchsorted(hb, b, side="right") * (len(sb) + 1) + \
        np.searchsorted(sb, b, side="right")
    head = np.flatnonzero(np.concatenate([[True], piece[1:] != piece[:-1]]))
    last = np.maximum.reduceat(e, head)
    pb, pe = e[head], last  # from the end of the first launch to the last's end
    keep = pe > pb
    pb, pe = iv.union(pb[keep], pe[keep], engine)
    cb, ce = intersect((lb, le), (pb, pe))
    warm = _one_off_ops(tl)
    if len(warm) and len(cb):  # one-off calls keep the time of the ops around them
        ob, oe = o.host_begin_ns, o.host_end_ns
        around = np.flatnonzero(((ob[d][:, None] <= ob[warm]) &
                                 (oe[d][:, None] >= oe[warm])).any(axis=1))
        kb, ke = iv.union(np.concatenate([ob[warm], ob[d][around]]),
                          np.concatenate([oe[warm], oe[d][around]]), engine)
        cb, ce = subtract((cb, ce), (kb, ke))
    return cb, ce


def intersect(a: tuple[np.ndarray, np.ndarray],
              b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Segments in both a and b (each sorted and disjoint)."""
    return subtract(a, subtract(a, b))


def combined(first: Changes | None, then: Changes | None) -> Changes | None:
    """Two edits' changes as one replay's: ``first``'s point costs (the
    recorder's) outside ``then``'s cuts (a removed interval takes the
    recorder's cost spent in it along: counting both would remove it
    twice), both edits' cuts, gone ops and syncs; ``then``'s side copies.
    Where the recorder's cost priced inside a cut is more than the cut
    (its probe's price, against a host whose dispatch SimGPU models), the
    rest stays a point cost at the cut's begin: a fix removes at least
    what the recorder's edit alone removes there. None when both are."""
    if first is None or then is None:
        return then if first is None else first
    t = np.asarray(first.cost_t, np.int64)
    keep = np.ones(len(t), bool)
    if len(then.cut_b) and len(t):
        i = np.searchsorted(then.cut_b, t, side="right") - 1
        keep = ~((i >= 0) & (t < then.cut_e[np.maximum(i, 0)]))
        if not keep.all():
            inside = np.bincount(i[~keep], weights=np.asarray(first.cost)[~keep],
                                 minlength=len(then.cut_b))
            excess = inside - (then.cut_e - then.cut_b)
            more = excess > 0
            if more.any():  # the rest of the recorder's cost, at each cut's begin
                then = Changes(np.concatenate([then.cost_t, then.cut_b[more]]),
                               np.concatenate([then.cost, excess[more].astype(np.int64)]),
                               then.cut_b, then.cut_e, then.drop_ops, then.drop_syncs,
                               then.side_ops, then.gpu_scale)
    if not len(then.cost_t):  # a fix of cuts alone: the first's points, still sorted
        cost_t = t if keep.all() else t[keep]
        cost = np.asarray(first.cost, np.int64)
        cost = cost if keep.all() else cost[keep]
        order = slice(None)
    else:
        cost_t = np.concatenate([t[keep], then.cost_t]).astype(np.int64)
        cost = np.concatenate([np.asarray(first.cost, np.int64)[keep], then.cost]).astype(np.int64)
        order = np.argsort(cost_t, kind="stable")
    cut_b, cut_e = (then.cut_b, then.cut_e) if not len(first.cut_b) else \
        iv.union(np.concatenate([first.cut_b, then.cut_b]),
                 np.concatenate([first.cut_e, then.cut_e]), "numpy")
    side = then.side_ops if first.side_ops is None else first.side_ops
    scale = then.gpu_scale if first.gpu_scale is None else first.gpu_scale
    return Changes(cost_t[order], cost[order], np.asarray(cut_b, np.int64),
                   np.asarray(cut_e, np.int64), first.drop_ops | then.drop_ops,
                   first.drop_syncs | then.drop_syncs, side, scale)


def _one_off_ops(tl: Timeline) -> np.ndarray:
    """The one-off calls' op rows over the whole Timeline, remembered by
    its ops table (``Table.remember``: they read only its columns and the
    extent, part of the key): ``launch`` and ``graphs`` both ask, and each
    asking sorts every op by name and self time."""
    w0, w1, _ = extent(tl)
    return tl.ops.remember("host_begin_ns", ("one_off ops", w0, w1),
                           lambda _: one_offs(tl, w0, w1)["op"])


def _runs_kernels(tl: Timeline) -> np.ndarray:
    """Which ops launched a kernel (or a graph, compiled or collective
    work): gpu rows that are work of their own, not a copy, a memset or a
    recorder's bracket around an op (bool per op)."""
    g = tl.gpu
    out = np.zeros(len(tl.ops), bool)
    work = np.isin(g.kind, [int(GpuKind.KERNEL), int(GpuKind.GRAPH), int(GpuKind.COMPILED),
                            int(GpuKind.COLLECTIVE)]) & (g.op != NONE)
    out[g.op[work]] = True
    return out


def _of_op(op: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``mask`` (one bool per op) read at each row's op; False where the row
    has none (NONE), also when there are no ops at all (a trace of GPU
    rows and runtime syncs only)."""
    out = np.zeros(len(op), bool)
    linked = op != NONE
    out[linked] = mask[op[linked]]
    return out
