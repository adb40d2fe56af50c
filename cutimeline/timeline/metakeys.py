"""Every key of ``Timeline.meta``, declared once: its name, what its value
must be (a checker and the words for it), the modules that write it and
what it means. ``KEYS`` is the source of truth; docs/ARCHITECTURE.md points
here.

``invariants.check_meta`` holds every Timeline read from outside (a
``.ctl`` file, a journal, an imported trace, the ranks handed to merge) to
it: a declared key whose value does not fit is refused with a sentence
naming the file, the key and the value. ``None`` is as absent (several
writers store None for "not measured"). A key not declared here is kept
as it is, unchecked: a newer cutimeline may write keys this one does not
know, and a user may add their own; tests/timeline/test_metakeys.py holds
cutimeline's own writers to this table.

Comparison's ``meta`` (``comparison/result.py``) is a Comparison's
settings, not a Timeline's, and is not declared here.

``RETIRED`` names keys that earlier file formats wrote and whose data now
lives elsewhere (``meta["collectives"]``: the collectives table since
format 5); a Timeline holding one is refused, since nothing reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .schema import MAX_RANKS, NONE, TIME_LIMIT_NS

__all__ = ["Key", "KEYS", "RETIRED", "STRAGGLER_COLUMNS", "declared"]


@dataclass(frozen=True)
class Key:
    """One meta key: ``fits(value)`` says whether a value (not None) is
    what ``what`` says; ``writer``: the modules under ``cutimeline/`` that
    write it; ``meaning``: one line."""
    name: str
    fits: Callable[[Any], bool]
    what: str
    writer: str
    meaning: str


# -- checkers (JSON values: after a load, numbers are int or float, objects dict) --------

def _str(x: object) -> bool:
    return isinstance(x, str)


def _bool(x: object) -> bool:
    return isinstance(x, bool)


def _int(x: object, lo: int = -2 ** 63, hi: int = 2 ** 63 - 1) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x \
        and abs(x) != float("inf")


def _ns(x: object) -> bool:
    """A duration: ns ≥ 0 (a float allowed: measured means)."""
    return _number(x) and 0 <= x < TIME_LIMIT_NS  # type: ignore[operator]


def _time(x: object) -> bool:
    return _int(x, -TIME_LIMIT_NS, TIME_LIMIT_NS)


def _rank(x: object) -> bool:
    return _int(x, 0, MAX_RANKS - 1)


def _count(x: object) -> bool:
    return _int(x, 0)


def _list(each: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: isinstance(x, list) and all(each(v) for v in x)


def _dict(each: Callable[[Any], bool] = lambda v: True) -> Callable[[Any], bool]:
    """An object whose values all fit ``each``."""
    return lambda x: isinstance(x, dict) and all(each(v) for v in x.values())


def _fields(**fields: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """An object whose named fields fit, where present and not None
    (others are kept as they are)."""
    return lambda x: isinstance(x, dict) and all(
        x.get(k) is None or f(x[k]) for k, f in fields.items())


def _interval(x: object) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(map(_time, x)) and x[0] <= x[1]


def _columns(x: object, names: tuple[str, ...], each: Callable[[str, Any], bool]) -> bool:
    """An object of equally long lists, ``names`` among them, each entry
    of column c fitting ``each(c, v)``."""
    if not isinstance(x, dict) or not all(isinstance(x.get(c), list) for c in names):
        return False
    cols = [v for v in x.values() if isinstance(v, list)]
    return len({len(v) for v in cols}) <= 1 and all(
        each(c, v) for c, col in x.items() if isinstance(col, list) for v in col)


#: ``meta["stragglers"]`` (``dist/straggler.py``'s ``slowest``): per step
#: (NONE: the whole run, first) the rank that held the others up most
STRAGGLER_COLUMNS = ("step", "rank", "held_ns", "last", "collectives", "late_mean_ns")


def _stragglers(x: object) -> bool:
    def each(col: str, v: Any) -> bool:
        if col == "late_mean_ns":
            return v is None or _number(v)
        return _int(v, NONE) if col == "step" else _rank(v) if col == "rank" else _count(v)
    return _columns(x, STRAGGLER_COLUMNS, each) and (
        x.get("steps") is None or _count(x["steps"]))  # type: ignore[union-attr]


_SIGNATURES = _fields(name=_list(_int), shapes=_list(_int), ns=_list(_ns))

RECORDER = "recording/recorder.py"
ASSEMBLY = "recording/assembly.py"
RANKS = "recording/ranks.py"
KINETO = "formats/kineto/importer.py"
MERGER = "dist/merger.py"
SIM = "devices/sim/streams.py"
CUDA = "devices/cuda/gpu.py"

_NS = "a number of ns ≥ 0"
_TIME = "a time in integer ns"
_TEXTS = "a list of sentences"

KEYS: dict[str, Key] = {k.name: k for k in (
    # -- where it came from ---------------------------------------------------------------
    Key("source", _str, "a str", f"{RECORDER}, {KINETO}, {MERGER}, devices/sim/synthetic.py",
        'where the Timeline came from: "record", "kineto", "merge", "synthetic"'),
    Key("versions", _dict(_str), "an object of version strings", ASSEMBLY,
        "cutimeline's, torch's and Python's versions at the recording"),
    Key("host", _str, "a host name", f"{RANKS}, {MERGER}",
        "the machine (a merge: the reference rank's)"),
    Key("hosts", _list(_str), "a list of host names", MERGER, "every rank's machine"),
    Key("pid", _count, "a process id", RANKS, "the recorded process"),
    Key("options", _dict(), "an object", ASSEMBLY, "record()'s options, and the device"),
    Key("file", _str, "a file name", KINETO, "the trace file imported"),
    Key("trace_name", _str, "a str", KINETO, "the trace's traceName"),
    Key("schema_version", lambda x: _str(x) or _int(x), "an int or a str", KINETO,
        "the trace's schemaVersion"),
    Key("script", _str, "a script's name", "recording/script.py", "record_script's script"),
    Key("script_argv", _list(_str), "a list of str", "recording/script.py",
        "the script's arguments"),
    Key("schedule", lambda x: isinstance(x, (dict, str)), "an object or a str",
        "recording/control/schedule.py", "the schedule that cut this window (or its repr)"),
    Key("what_if", _str, "an edit's name", "analysis/replay/whatif.py",
        "the edit a what-if Timeline replayed"),
    Key("what_if_code", _str, "a str", "analysis/replay/whatif.py",
        "the change in the user's code that edit stands for"),
    # -- clocks ---------------------------------------------------------------------------
    Key("aligned", _bool, "true or false", f"{ASSEMBLY}, alignment/aligner.py, {KINETO}, "
        f"{MERGER}, timeline/ctlfile/journal.py", "device times are on the host clock"),
    Key("align_error", _str, "a sentence", ASSEMBLY, "why alignment failed (kept unaligned)"),
    Key("clock_resolution_ns", _dict(_ns), "an object of numbers of ns by device",
        f"{SIM}, {CUDA}, {RECORDER}, devices/sim/synthetic.py",
        "per device, how far a raw clock reading may lie (devices/clockread.py)"),
    Key("timing", _str, 'a str ("events" or "stamps")', f"{CUDA}, {RECORDER}",
        "how a CUDA device's work was timed"),
    Key("start_epoch_ns", _time, _TIME, f"{RECORDER}, {MERGER}, timeline/ranks.py",
        "the wall clock at start (a rank clock's first guess)"),
    Key("start_host_ns", _time, _TIME, f"{RECORDER}, {MERGER}, timeline/ranks.py",
        "the host clock at start"),
    Key("epoch_offset_ns", _time, _TIME, KINETO, "wall = host + this, for imported traces"),
    Key("base_time_ns", _time, _TIME, KINETO, "the trace's baseTimeNanoseconds"),
    Key("profiler_window_ns", _interval, "[begin, end] times in ns", KINETO,
        "the profiler's Trace window"),
    Key("window", _interval, "[begin, end] times in ns", "timeline/timeline.py",
        "the host-time window slice_time kept"),
    Key("test_clock_skew_ns", _time, _TIME, RANKS,
        "CUTIMELINE_TEST_CLOCK_SKEW_NS applied to this rank's host times (tests)"),
    # -- the recorder's own cost ----------------------------------------------------------
    Key("overhead_ns_per_op", _ns, _NS, f"{RECORDER}, recording/selfcost.py, {MERGER}",
        "the recorder's mean cost per op"),
    Key("overhead_ns_per_launch", _ns, _NS, f"{RECORDER}, {MERGER}",
        "the recorder's cost per device launch"),
    Key("overhead_model", _dict(_ns), "an object of numbers of ns", RECORDER,
        "the start-up measurement of the cost per op, by argument kinds"),
    Key("overhead_ns_by_signature",
        lambda x: _SIGNATURES(x) and all(isinstance(x.get(k), list)
                                         for k in ("name", "shapes", "ns"))
        and len(x["name"]) == len(x["shapes"]) == len(x["ns"]),
        'an object of equally long "name", "shapes" (string ids) and "ns" lists',
        "recording/selfcost.py", "the cost per (op name, shapes) signature"),
    Key("overhead_calibrations", _list(lambda c: isinstance(c, list) and len(c) == 3
                                       and all(map(_int, c))),
        "a list of [begin_ns, end_ns, ratio] integer triples", f"{ASSEMBLY}, timeline/ranks.py",
        "each calibration of the cost model while recording"),
    Key("recorder_left", _dict(_ns), "an object of numbers of ns", RECORDER,
        "on a simulated host, which the recorder's time left as it was spent "
        "(recording/opstream.py ExactMode): the prices of what no clock inside it saw "
        "(entry_ns per op, module_entry_ns per module call), what measuring them took, "
        "and Python's garbage collections it left out (gc_collections, a count; gc_ns; "
        "recording/hooks/gcpauses.py)"),
    Key("op_rows_converted", _dict(_number), "an object of numbers", ASSEMBLY,
        "rows, chunks and ns of moving op rows into chunks while recording"),
    # -- devices --------------------------------------------------------------------------
    Key("devices", _list(lambda d: isinstance(d, dict)), "a list of objects describing devices",
        f"{ASSEMBLY}, {KINETO}, {MERGER}", "the devices recorded (index, kind, name)"),
    Key("device_name", _str, "a device name", f"{SIM}, {CUDA}, {KINETO}, {MERGER}",
        "the (first) device's name"),
    Key("device_names", _dict(_str), "an object of names by device index",
        f"{SIM}, {CUDA}, {KINETO}", "every device's name"),
    Key("simulated", _bool, "true or false", f"{SIM}, {MERGER}, devices/sim/synthetic.py",
        "a SimGPU recording"),
    Key("sim", _fields(peak_flops=_dict(_number), bandwidth=_number, min_kernel_ns=_ns,
                       offset_ns=_number, drift_ppm=_number, quantum_ns=_ns),
        "an object of the SimGPU's profile and options", f"{SIM}, devices/sim/synthetic.py",
        "the SimGPU's profile (peaks, bandwidth) and options"),
    Key("cuda", _dict(), "an object", CUDA, "what the CUDA device's event pool and stamps did"),
    Key("cuda_mapped", _dict(), "an object", "devices/sim/gpu.py",
        "what torch.cuda's calls answered while a SimGPU stood for CUDA"),
    Key("launch_queue", lambda x: _int(x, 0, 2 ** 20), "a queue depth from 0 to 2^20", SIM,
        "pending launches per stream at which the host blocks (0: unbounded)"),
    Key("float32_matmul_precision", _str, "a str", ASSEMBLY,
        "torch's fp32 matmul precision at stop (TF32: MFU's peak)"),
    Key("cudnn_allow_tf32", _bool, "true or false", ASSEMBLY, "cuDNN's TF32 switch at stop"),
    Key("cudnn_benchmark", _bool, "true or false", ASSEMBLY,
        "whether cuDNN benchmarked its algorithms"),
    # -- threads --------------------------------------------------------------------------
    Key("threads", _list(lambda v: isinstance(v, (str, dict))), "a list of thread names",
        f"{ASSEMBLY}, {KINETO}, {MERGER}, timeline/ctlfile/journal.py",
        "the host threads, by thread id"),
    # -- the import -----------------------------------------------------------------------
    Key("import_counts", _dict(_count), "an object of counts", KINETO,
        "events read, by category"),
    Key("import_skipped", _dict(_count), "an object of counts", KINETO,
        "events left out, by why"),
    Key("import_warnings", _list(_str), _TEXTS, KINETO, "what the import could not read"),
    Key("distributed", _dict(), "an object", KINETO, "the trace's distributedInfo"),
    Key("steps_from", _str, "a range's name", f"{KINETO} (formats/kineto/steps.py), "
        "recording/script.py", "the ranges that end each step"),
    Key("steps_rule", _str, "a str", "formats/kineto/steps.py, recording/script.py",
        'which rule made the steps: "ProfilerStep", "optimizer", "steps_from"'),
    # -- how the recording ended ----------------------------------------------------------
    Key("warnings", _list(_str), _TEXTS, f"{ASSEMBLY}, devices/sim/gpu.py, {MERGER}",
        "what the recording could not show"),
    Key("truncated", _bool, "true or false", f"{ASSEMBLY}, timeline/ctlfile/journal.py, "
        f"{MERGER}", "max_ops/max_bytes cut the recording"),
    Key("truncated_by", _str, 'a str ("ops" or "spans")', "recording/session.py",
        "which reached max_ops first"),
    Key("max_ops", _count, "a count", "recording/session.py", "the cap that cut it"),
    Key("partial", _str, "a sentence", f"{RANKS}, timeline/ctlfile/journal.py",
        "why the recording ended early (signal, kill) and in which step"),
    Key("error", _str, "a sentence", RANKS, "the exception the recorded block raised"),
    Key("device_error", _str, "a sentence", "recording/control/lifecycle.py",
        "why the device side was lost (the file holds the host side)"),
    Key("journal", _fields(chunks=_count, unread_bytes=_count, stopped=_bool, why_unread=_str),
        "an object", "timeline/ctlfile/journal.py", "what reading a journal found"),
    Key("disabled", _bool, "true or false", f"{RECORDER}, recording/control/schedule.py",
        "CUTIMELINE_DISABLE=1: nothing recorded"),
    Key("forked", _bool, "true or false", RECORDER,
        "an empty recording in a process forked while recording"),
    Key("steps", lambda x: isinstance(x, list) and len(x) == 2 and all(map(_int, x)),
        "[first, last] step numbers", "recording/control/stepwatch.py",
        "a schedule window's steps"),
    Key("partial_step", _bool, "true or false", "recording/control/stepwatch.py",
        "the window's last step was recorded in part"),
    # -- ranks ----------------------------------------------------------------------------
    Key("rank", _rank, f"a rank from 0 to {MAX_RANKS - 1}", f"{RANKS}, {KINETO}",
        "this process's rank"),
    Key("world_size", lambda x: _int(x, 1, MAX_RANKS), f"a world size from 1 to {MAX_RANKS}",
        f"{RANKS}, {KINETO}, {MERGER}", "the number of ranks"),
    Key("local_rank", _rank, "a rank", RANKS, "the rank on its machine"),
    Key("backend", _str, "a str", RANKS, "torch.distributed's backend"),
    Key("run_id", _str, "a str", RANKS, "torchrun's TORCHELASTIC_RUN_ID (merge checks it)"),
    Key("groups", _list(_fields(name=_str, ranks=_list(_rank), backend=_str)),
        'a list of {"name", "ranks", "backend"} objects',
        f"recording/measures/collectives.py, {MERGER}", "the process groups collectives ran on"),
    Key("ranks", _list(_fields(rank=_rank, threads=_list(_count), devices=_list(_count),
                               clock=_dict(), ops=_count)),
        "a list of objects, one per rank", MERGER,
        "a merged run's ranks: file, clock line, threads, devices, ..."),
    Key("reference_rank", _rank, "a rank", MERGER, "the rank whose host clock the merge is on"),
    Key("thread_rank", _list(_rank), "a list of ranks, one per thread", MERGER,
        "the rank of each thread id"),
    Key("device_rank", _list(_rank), "a list of ranks, one per device", MERGER,
        "the rank of each device index"),
    Key("missing_ranks", _list(_rank), "a list of ranks", MERGER, "ranks of the world not given"),
    Key("partial_ranks", _list(_rank), "a list of ranks", MERGER,
        "ranks whose recording ended early"),
    Key("errors", _list(_rank), "a list of ranks", MERGER, "ranks whose block raised"),
    Key("stragglers", _stragglers,
        f"an object of equally long lists {', '.join(STRAGGLER_COLUMNS)} and a count steps",
        f"{MERGER} (dist/straggler.py)", "who held the others up, per step and over the run"),
)}


#: keys of earlier file formats whose data lives elsewhere now: where, and
#: how to give it there (an older file's is moved as it loads)
RETIRED: dict[str, str] = {
    "collectives": "files of formats 1-4 kept the collectives; a Timeline keeps them "
                   "in its collectives table (timeline/collectives.py; an older file's "
                   "move there as it loads): give them as "
                   "tables={'collectives': {'op': ..., 'group': ..., 'kind': ..., "
                   "'number': ..., 'peer': ..., 'done_ns': ...}}, not in meta"}


def declared(key: str) -> bool:
    """Whether ``key`` is a meta key cutimeline knows."""
    return key in KEYS
