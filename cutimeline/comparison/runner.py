"""``ctl.compare``: a workload run uninstrumented, under cutimeline and under
torch.profiler, and the runs compared.

    cmp = ctl.compare(train_step, steps=20, warmup=3)
    print(cmp)                       # markdown tables
    cmp.plot("comparison.png")     # both Timelines, one above the other
    ctl.compare("train.py")          # a training script: its optimizer steps (script.py)

``fn`` (one training step) runs ``warmup + steps`` times in each of three
passes, one after the other: uninstrumented, under ``ctl.record``, under
``torch.profiler`` (``rounds`` times, odd rounds reversed; overheads are
per-round ratios, then their median). The passes are separate because a
profiler running while a ``TorchDispatchMode`` is active sees every op
twice. Each pass has its own warm-up; only the ``steps`` after it are
timed, with ``perf_counter_ns`` around ``fn()`` and, on CUDA, a
``torch.cuda.synchronize``, so a step's time includes its GPU work and
steps do not overlap; step boundaries lie outside the timed region.

The profiler pass leaves the process as it found it, so that a recording
after ``compare`` costs what one before did: Kineto detaches CUPTI at
the end of a trace only when ``TEARDOWN_CUPTI=1`` (otherwise every later
launch still pays CUPTI's callbacks), so the pass sets it unless the user
has (torch sets it to 0 with CUDA graphs on CUDA < 12.6, where teardown
crashes); the variables torch.profiler may set (``PROFILER_ENV``) are
restored, and the profiler must be off (``profiler_left_on``), or
``compare`` raises. What is compared: ``Comparison`` (``result``), with
the op-stream match (``opmatch.py``) and, on CUDA, each matched op's GPU
time on both sides (``GpuAgreement``).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from time import perf_counter_ns as _now
from typing import Any

import numpy as np
import torch
from torch.profiler import profile, schedule

from ..devices.device import Device
from ..errors import CutimelineError
from ..formats.kineto import import_chrome
from ..recording.devicespec import cuda_index, device_spelling, simulated
from ..recording.recorder import record
from ..timeline.schema import GpuKind, SpanKind
from ..timeline.timeline import Timeline
from .opmatch import OpMatch, match_ops, profiler_leaves, recorded_ops
from .result import PASSES, Comparison, GpuAgreement
from .script import Script

__all__ = ["compare"]

#: environment variables the profiler pass sets or torch.profiler may set
PROFILER_ENV = ("TEARDOWN_CUPTI", "DISABLE_CUPTI_LAZY_REINIT")


def compare(fn: Callable[[], Any] | str | os.PathLike, *, steps: int = 20, warmup: int = 3,
            device: Any = "auto", profiler_activities: Iterable[Any] | None = None,
            record_shapes: bool = True, rounds: int = 1,
            trace_dir: str | os.PathLike | None = None,
            argv: Sequence[str] = ()) -> Comparison:
    """Run ``fn`` uninstrumented, under cutimeline and under torch.profiler
    (see the module doc) and compare.

    ``fn``: one training step, called with no arguments ``warmup + steps``
    times per pass (3 passes), so it must be repeatable; or the path of a
    training script (.py), run once per pass with ``argv`` as its
    arguments, whose optimizer steps are the steps (``script.py``: stopped
    after ``warmup + steps`` of them). ``steps``: timed,
    compared steps per pass (≥ 1). ``warmup``: untimed steps before them
    (≥ 0). ``device``: "auto" (CUDA when available), "cpu", "cuda",
    "cuda:N" or a ``torch.device`` — what ``ctl.record`` records and what
    is synchronized after each step; or "sim" / a ``ctl.SimGPU``: the
    cutimeline pass records that simulated GPU (``fn`` puts its work on
    ``meta`` tensors) and is synchronized with it, while the other two
    passes run the same ops on the CPU side only, since torch.profiler
    cannot see a simulated GPU (``meta["profiler_device"]`` is "cpu" and
    the table says so). ``profiler_activities``: torch.profiler activities (default
    CPU, plus CUDA on a CUDA device); CPU is required. ``record_shapes``:
    passed to torch.profiler. ``rounds``: how many times the three passes
    run (odd rounds in reverse order); every round is timed, the first
    one's traces are compared. ``trace_dir``: a folder that keeps both traces
    (``cutimeline.ctl``, ``kineto.json``); by default they are written to a
    temporary folder and removed. An exception from ``fn`` propagates
    unchanged.
    """
    if isinstance(fn, (str, os.PathLike)):
        timed = Script(fn, argv).timed
    elif not callable(fn):
        raise CutimelineError(f"compare(fn={fn!r}) needs a callable that runs one "
                              f"training step with no arguments, or the path of a "
                              f"training script (.py).")
    elif argv:
        raise CutimelineError(f"compare(argv={argv!r}) gives a script its arguments; "
                              f"fn is a function, which takes none.")
    else:
        def timed(warmup: int, steps: int, sync: Callable[[], None],
                  boundary: Callable[[], Any] | None = None) -> np.ndarray:
            return _timed(fn, warmup, steps, sync, boundary)
    for name, value, least in (("steps", steps, 1), ("warmup", warmup, 0),
                               ("rounds", rounds, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise CutimelineError(f"compare({name}={value!r}) must be a whole number "
                                  f"≥ {least}.")
    if not isinstance(record_shapes, bool):
        raise CutimelineError(f"compare(record_shapes={record_shapes!r}) must be "
                              f"True or False.")
    if os.environ.get("CUTIMELINE_DISABLE", "").strip() not in ("", "0"):
        raise CutimelineError("CUTIMELINE_DISABLE is set, so the cutimeline pass would "
                              "record nothing; unset it to compare.")
    dev, sim = _device(device, torch)
    activities = _activities(profiler_activities, dev, torch)
    if trace_dir is not None and os.path.exists(trace_dir) and not os.path.isdir(trace_dir):
        raise CutimelineError(f"compare(trace_dir={os.fspath(trace_dir)!r}) names a "
                              f"file; give a folder (it is made if missing).")
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    syncs = {name: sync for name in PASSES}
    if sim is not None:  # only the cutimeline pass has the simulated GPU to wait for
        syncs["cutimeline"] = sim.synchronize

    with tempfile.TemporaryDirectory(prefix="cutimeline-compare-") as tmp:
        folder = tmp if trace_dir is None else os.fspath(trace_dir)
        os.makedirs(folder, exist_ok=True)
        kineto = os.path.join(folder, "kineto.json")
        times: dict[str, list[np.ndarray]] = {k: [] for k in PASSES}
        kept: dict[str, Any] = {}
        for r in range(rounds):
            # odd rounds run backwards, so no pass always comes first
            for name in PASSES if r % 2 == 0 else PASSES[::-1]:
                times[name].append(_pass(name, timed, warmup, steps, syncs[name],
                                         str(dev) if sim is None else sim,
                                         activities, record_shapes,
                                         kineto if r == 0 else None, kept))
        theirs = import_chrome(kineto)
        recorded = kept["timeline"]
        ours, match, rows = _match(recorded, theirs, warmup, steps, sim is not None)
        ctl_path = os.path.join(folder, "cutimeline.ctl")
        ours.save(ctl_path)
        sizes = _sizes(ctl_path, kineto, len(match.theirs), len(ours.ops))
    gpu, why = None, None
    if dev.type == "cuda" and recorded.aligned:
        gpu = _gpu_agreement(recorded, theirs, match, rows)
    elif dev.type == "cuda":   # the recorder warned; say so in the table too
        why = ("our GPU times are not on the host clock: "
               f"{recorded.meta.get('align_error', 'the recording is not aligned')}")
    meta = {"device": str(dev) if sim is None else sim.name,
            "profiler_device": str(dev), "steps": steps, "warmup": warmup, "rounds": rounds,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "activities": [str(a).split(".")[-1] for a in activities],
            "record_shapes": record_shapes,
            "trace_dir": None if trace_dir is None else os.fspath(trace_dir)}
    if why:
        meta["gpu_not_compared"] = why
    if sim is not None:
        meta["gpu_not_compared"] = (
            f"cutimeline recorded {sim.name}; torch.profiler cannot see a simulated "
            f"GPU, so its pass (and the uninstrumented one) ran the same ops on the "
            f"CPU side only, and the step times are not a GPU's")
    if dev.type == "cuda":
        meta["device_name"] = torch.cuda.get_device_name(dev)
    return Comparison(step_ns={k: np.stack(v) for k, v in times.items()}, match=match,
                      gpu=gpu, sizes=sizes, ours=ours, theirs=theirs, meta=meta)


def _device(device: Any, torch: Any) -> tuple[Any, Any]:
    """The torch.device synchronized after each step (and the profiler's),
    and the SimGPU the cutimeline pass records when ``device`` names one."""
    where = "compare(device=...)"
    spec = device_spelling(device, where)
    spec = simulated(spec) or spec  # "sim", "sim:a100"
    if isinstance(spec, Device):
        if getattr(spec, "kind", "") != "sim":
            raise CutimelineError(
                f"compare(device={device!r}) takes a SimGPU as its Device; for a CUDA "
                f"GPU give 'cuda' or 'cuda:N', which both passes then see.")
        return torch.device("cpu"), spec
    if spec == "cpu" or spec == "auto" and not torch.cuda.is_available():
        return torch.device("cpu"), None
    return torch.device("cuda", cuda_index(spec, where)), None


def _activities(given: Iterable[Any] | None, dev: Any, torch: Any) -> list[Any]:
    A = torch.profiler.ProfilerActivity
    if given is None:
        return [A.CPU, A.CUDA] if dev.type == "cuda" else [A.CPU]
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise CutimelineError(f"compare(profiler_activities={given!r}) must be a list "
                              f"of torch.profiler.ProfilerActivity.")
    given = list(given)
    if not all(isinstance(a, A) for a in given) or A.CPU not in given:
        raise CutimelineError(
            f"compare(profiler_activities={given!r}) must be a list of "
            f"torch.profiler.ProfilerActivity that includes CPU (the op stream "
            f"is compared on the profiler's CPU ops).")
    return given


def _timed(fn: Callable[[], Any], warmup: int, steps: int, sync: Callable[[], None],
           boundary: Callable[[], Any] | None = None) -> np.ndarray:
    """Step times (ns) of the ``steps`` calls after ``warmup`` ones."""
    out = np.empty(steps, np.int64)
    sync()  # work queued before the pass is not its first step's
    for i in range(warmup + steps):
        t0 = _now()
        fn()
        sync()
        t1 = _now()
        if i >= warmup:
            out[i - warmup] = t1 - t0
        if boundary is not None:
            boundary()
    return out


def _pass(name: str, timed: Callable[..., np.ndarray], warmup: int, steps: int,
          sync: Callable[[], None], dev: Any, activities: list[Any],
          record_shapes: bool, kineto: str | None, kept: dict[str, Any]) -> np.ndarray:
    """One pass; its step times (ns), from ``timed(warmup, steps, sync,
    boundary)`` (``_timed`` of a function, or ``Script.timed``). The
    cutimeline pass records ``dev``
    (a device spelling or a SimGPU) and keeps its first
    Timeline in ``kept``; the profiler pass exports its trace to ``kineto``
    when given."""
    if name == "none":
        return timed(warmup, steps, sync)
    if name == "cutimeline":
        with record(device=dev, steps="manual") as rec:
            times = timed(warmup, steps, sync, rec.step)
        kept.setdefault("timeline", rec.timeline)
        return times
    ready = None if kineto is None else (lambda p: p.export_chrome_trace(kineto))
    with _leaving_no_profiler(torch), \
            profile(activities=activities, record_shapes=record_shapes,
                    schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
                    on_trace_ready=ready) as prof:
        times = timed(warmup, steps, sync, prof.step)
    if kineto is not None and not os.path.exists(kineto):
        raise CutimelineError("torch.profiler wrote no trace for the compared steps, "
                              "so there is nothing to compare against; check that "
                              "fn runs torch ops and that Kineto is available "
                              "(torch.profiler.kineto_available()).")
    return times


@contextlib.contextmanager
def _leaving_no_profiler(torch: Any):
    """Around the profiler pass: CUPTI torn down at its end, the
    environment restored, the profiler checked off (see the module doc)."""
    saved = {k: os.environ.get(k) for k in PROFILER_ENV}
    if saved["TEARDOWN_CUPTI"] is None:
        os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    left = profiler_left_on(torch)
    if left:
        raise CutimelineError(f"torch.profiler is still on after compare()'s profiler "
                              f"pass ({'; '.join(left)}), so a recording now would pay "
                              f"its cost; report this with your torch version "
                              f"({torch.__version__}).")


def profiler_left_on(torch: Any) -> list[str]:
    """What of torch.profiler is still on, as torch exposes it: its Python
    flag, the autograd profiler's state and its type; empty when off."""
    left = []
    if getattr(torch.autograd.profiler, "_is_profiler_enabled", False):
        left.append("torch.autograd.profiler._is_profiler_enabled is True")
    auto = torch._C._autograd
    if hasattr(auto, "_profiler_enabled") and auto._profiler_enabled():
        left.append("torch._C._autograd._profiler_enabled() is True")
    if hasattr(auto, "_profiler_type") and not str(auto._profiler_type()).endswith("NONE"):
        left.append(f"the active profiler type is {auto._profiler_type()}")
    return left


def _match(recorded: Timeline, theirs: Timeline, warmup: int, steps: int,
           cuda_paths: bool = False):
    """Our op rows and the profiler's leaf ops, step by step, aligned
    (``cuda_paths``: ours recorded a SimGPU, ``OpMatch.cuda_paths``).

    Returns our Timeline of the compared steps, the OpMatch, and the ops
    rows behind its positions: (ours rows, theirs rows, profiler owner)."""
    numbers = theirs.step_numbers()
    if len(numbers) < steps:
        raise CutimelineError(
            f"The torch.profiler trace holds {len(numbers)} ProfilerStep ranges where "
            f"{steps} were profiled, so its steps cannot be matched to ours.")
    mine = recorded_ops(recorded)
    leaf, owner = profiler_leaves(theirs)
    o, p = recorded.ops, theirs.ops
    our_rows, their_rows, our_step, their_step = [], [], [], []
    for k in range(steps):
        b, e = recorded.step_bounds(warmup + k)
        rows = np.flatnonzero(mine & (o.host_begin_ns >= b) & (o.host_begin_ns < e))
        our_rows.append(rows)
        our_step.append(np.full(len(rows), k))
        b, e = theirs.step_bounds(int(numbers[k]))
        rows = np.flatnonzero(leaf & (p.host_begin_ns >= b) & (p.host_begin_ns < e))
        their_rows.append(rows)
        their_step.append(np.full(len(rows), k))
    our_rows, their_rows = np.concatenate(our_rows), np.concatenate(their_rows)
    match = match_ops(recorded.decode(o["name"][our_rows]).tolist(),
                      theirs.decode(p["name"][their_rows]).tolist(),
                      ours_step=np.concatenate(our_step),
                      theirs_step=np.concatenate(their_step), cuda_paths=cuda_paths)
    ours = recorded.slice_steps(warmup, warmup + steps - 1)
    # A step's span ends a few ns after the next one begins (both are read
    # at the boundary), so the slice holds the neighbours' STEP spans too.
    sp = ours.spans
    other = (sp.kind == SpanKind.STEP) & ((sp.number < warmup) | (sp.number >= warmup + steps))
    ours = ours.keep_rows(spans=~other)  # their sources' rows go with them
    return ours, match, (our_rows, their_rows, owner)


def _sizes(ctl_path: str, kineto_path: str, leaf_ops: int, our_ops: int) -> dict[str, Any]:
    """Bytes on disk of both traces of the compared steps, and per op: per
    profiler leaf aten op for all three (one denominator, so the ratios are
    the files' ratios) and, for ours, per recorded ops row."""
    with open(kineto_path, "rb") as f:
        raw = f.read()
    sizes = {"ctl_bytes": os.path.getsize(ctl_path), "kineto_json_bytes": len(raw),
             # level 6: the zlib default, as np.savez_compressed uses for .ctl
             "kineto_gz_bytes": len(gzip.compress(raw, compresslevel=6, mtime=0)),
             "leaf_ops": leaf_ops, "ctl_ops": our_ops}
    per = max(leaf_ops, 1)
    for k in ("ctl", "kineto_json", "kineto_gz"):
        sizes[f"{k}_bytes_per_op"] = sizes[f"{k}_bytes"] / per
    sizes["ctl_bytes_per_row"] = sizes["ctl_bytes"] / max(our_ops, 1)
    return sizes


def _gpu_agreement(recorded: Timeline, theirs: Timeline, match: OpMatch,
                   rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> GpuAgreement:
    """Per matched op: our event span(s) against the profiler's device work
    launched from inside its leaf op (kernels of nested ops included)."""
    our_rows, their_rows, owner = rows

    def per_op(tl: Timeline, op_of_row: np.ndarray, kinds: tuple[int, ...]):
        g = tl.gpu
        keep = np.isin(g.kind, kinds) & (g.op >= 0)
        op = op_of_row[g.op[keep]]
        ok = op >= 0
        dur = (g.end_ns - g.begin_ns)[keep][ok]
        n = len(tl.ops)
        return (np.bincount(op[ok], weights=dur, minlength=n).round().astype(np.int64),
                np.bincount(op[ok], minlength=n))
    ours_ns, _ = per_op(recorded, np.arange(len(recorded.ops)),
                        (int(GpuKind.OP), int(GpuKind.GRAPH)))
    theirs_ns, count = per_op(theirs, owner, (int(GpuKind.KERNEL), int(GpuKind.MEMCPY),
                                              int(GpuKind.MEMSET)))
    i, j = match.pairs[:, 0], match.pairs[:, 1]
    a, b, k = ours_ns[our_rows[i]], theirs_ns[their_rows[j]], count[their_rows[j]]
    busy = (a > 0) | (b > 0)
    return GpuAgreement(names=tuple(np.asarray(match.ours, object)[i[busy]].tolist()),
                        ours_ns=a[busy], theirs_ns=b[busy], kernels=k[busy])
