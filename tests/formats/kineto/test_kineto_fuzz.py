"""Fuzzing the torch.profiler (Kineto) import: no file makes cutimeline crash.

Mutants of a small real trace (bit flips of its gzip bytes, truncations,
and JSON-level damage: a field's value replaced by inf, nan, 2**70, -1, [],
{}, "x", None or 10^5 levels of nesting, keys deleted, types swapped) each
either import, and then analyze, summarise, export (and for some, plot)
without error, or raise ``CutimelineError`` naming the file. Anything else is
a crash and fails the test with the mutant that caused it.

The sweep runs in a subprocess (this file with ``--worker``) under a memory
cap (RLIMIT_AS) and a per-mutant time limit, so a blow-up fails the test,
not the machine. The mutants are made by a seeded generator: the same ones
every run (``FUZZ_SEED=<n>`` draws another set, for a longer hunt). The
suite sweeps the first 150 (every kind of damage, both outcomes, ~10 s);
``CUTIMELINE_FUZZ_FULL=1`` the first 400, the sweep that found the crash
classes. Below the sweep, one in-process test for each crash class it found.
"""

from __future__ import annotations

import collections
import copy
import gzip
import json
import math
import os
import pathlib
import random
import subprocess
import sys

import pytest

from fuzzsweep import Timeout, sweep as run_sweep, work

DATA = pathlib.Path(__file__).parents[2] / "data" / "kineto"
TRACE = DATA / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz"
SEED = int(os.environ.get("FUZZ_SEED", 20240601))
# the first COUNT of the seeded mutants: 150 reach every kind of damage and
# both outcomes (~100 import, ~45 refused); the 400 of the full sweep took 27 s
COUNT = 400 if "CUTIMELINE_FUZZ_FULL" in os.environ else 150
PLOT_EVERY = 8          # plot every 8th mutant that imports (plots cost ~0.1 s)
MEMORY_CAP = 2 << 30    # bytes of address space the worker may add after imports
TIME_LIMIT_S = 20       # per mutant
DEEP = "\x00deep\x00"   # stands for 10^5 levels of nesting in the JSON text
DEPTH = 100_000
LONG = "\x00long\x00"   # stands for an integer of 5000 digits (Python reads 4300)

# Values a field may be damaged into.
BAD = [math.inf, -math.inf, math.nan, 2**70, -2**70, 2**63, 2**63 - 1, -2**63,
       -1, -2, -7, 0, 10**20, 10**400, 1e300, -1e300, 1e16, -1e16, 9.3e15, 4.5e15,
       -4.5e15, 1.5, -0.5, 32768, 2**32 - 1, LONG,
       [], {}, [1, 2], {"a": 1}, [[[[]]]], "x", "", "0x10", "-0x5", "0x" + "f" * 20,
       "stream -3", "stream 99999999999999999999", "ProfilerStep#" + "9" * 30,
       "ProfilerStep#-1", "nccl", None, True, False, DEEP]
EVENT_KEYS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "id"]
ARG_KEYS = ["correlation", "stream", "device", "External id", "Input Dims",
            "Input type", "flags", "cutimeline kind", "name", "op device",
            "op stream", "Collective name", "Shapes"]
TOP_KEYS = ["traceEvents", "baseTimeNanoseconds", "cutimelineTimeShiftNanoseconds",
            "deviceProperties", "distributedInfo", "traceName", "schemaVersion",
            "exportedBy"]
READ_CATS = ("cpu_op", "user_annotation", "cuda_sync", "Trace", "kernel",
             "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")


# -- the mutants ------------------------------------------------------------------
def _encode(doc, rng: random.Random) -> tuple[bytes, str]:
    text = json.dumps(doc)
    if json.dumps(DEEP) in text:
        deep = rng.choice(["[" * DEPTH + "]" * DEPTH,
                           '{"a": ' * DEPTH + "1" + "}" * DEPTH])
        text = text.replace(json.dumps(DEEP), deep)
    text = text.replace(json.dumps(LONG), "9" * 5000)
    data = text.encode()
    if rng.random() < 0.5:
        return gzip.compress(data, compresslevel=1, mtime=0), ".json.gz"
    return data, ".json"


def _damage_value(doc: dict, rng: random.Random) -> str:
    """One field of ``doc`` replaced by a bad value or deleted; says which."""
    value = rng.choice(BAD)
    delete = rng.random() < 0.15
    events = doc.get("traceEvents")
    if rng.random() < 0.15 or not isinstance(events, list) or not events:
        key, where = rng.choice(TOP_KEYS), doc
        if key == "distributedInfo" and rng.random() < 0.5:
            key, where = rng.choice(["rank", "world_size"]), doc.setdefault(
                "distributedInfo", {})
        elif key == "deviceProperties" and rng.random() < 0.5 and doc.get(key):
            where = rng.choice(doc[key])
            key = rng.choice(["id", "name", "totalGlobalMem", "numSms"])
    else:
        read = [e for e in events if isinstance(e, dict) and (
            e.get("cat") in READ_CATS or e.get("ph") in ("s", "M"))]
        e = rng.choice(read or events)
        if not isinstance(e, dict):
            return "nothing"
        if rng.random() < 0.45 and isinstance(e.get("args"), dict):
            where, key = e["args"], rng.choice(ARG_KEYS)
        else:
            where, key = e, rng.choice(EVENT_KEYS)
    if not isinstance(where, dict):
        return "nothing"
    if delete:
        where.pop(key, None)
        return f"del {key}"
    where[key] = copy.deepcopy(value)
    return f"{key}={value!r:.30}"


def _structural(doc: dict, rng: random.Random) -> tuple[object, str]:
    """The document's shape broken: events or args of the wrong type."""
    events = doc["traceEvents"]
    kind = rng.randrange(6)
    bad = copy.deepcopy(rng.choice([[], {}, "x", 5, None, [1, 2], DEEP]))
    if kind == 0:
        return bad, f"doc={bad!r:.20}"
    if kind == 1:
        doc["traceEvents"] = bad
        return doc, f"traceEvents={bad!r:.20}"
    i = rng.randrange(len(events))
    if kind == 2:
        events[i] = bad
        return doc, f"event {i}={bad!r:.20}"
    if kind == 3 and isinstance(events[i], dict):
        events[i]["args"] = bad
        return doc, f"event {i} args={bad!r:.20}"
    if kind == 4:
        return events, "bare event list"
    return {"traceEvents": [e for e in events if rng.random() < 0.5]}, "half the events"


def _ts_shift(doc: dict, rng: random.Random) -> str:
    """Every ts of one category moved by a huge or negative amount."""
    cat = rng.choice(READ_CATS)
    by = rng.choice([-1e16, -1.7e15, -4.5e15, 2.8e15, 5e15, 9.2e15, 2.0**53, 1e300])
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") == cat and isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + by
    return f"{cat} ts+={by:g}"


def mutants(count: int = COUNT, seed: int = SEED,
            bases: dict[str, dict] | None = None) -> list[tuple[str, bytes, str]]:
    """``count`` (label, file bytes, suffix) of the trace, the same every run.
    ``bases`` are the JSON documents damaged (by default the trace itself)."""
    raw = TRACE.read_bytes()
    bases = bases or {"kineto": json.loads(gzip.decompress(raw))}
    text = json.dumps(bases["kineto"]).encode()
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = rng.choices(["flip", "cut-gz", "cut-json", "value", "values", "struct",
                            "shift"], [12, 5, 5, 45, 18, 8, 7])[0]
        base = rng.choice(sorted(bases))
        doc = copy.deepcopy(bases[base])
        if kind == "flip":
            data = bytearray(raw)
            bits = rng.randint(1, 4)
            for _ in range(bits):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            label, data, suffix = f"{bits} bits flipped", bytes(data), ".json.gz"
        elif kind == "cut-gz":
            n = rng.choice([0, 1, 2, 10, rng.randrange(len(raw)), len(raw) - 4])
            label, data, suffix = f"gzip cut at {n}", raw[:n], ".json.gz"
        elif kind == "cut-json":
            n = rng.randrange(len(text))
            label, data, suffix = f"json cut at {n}", text[:n], ".json"
        else:
            if kind == "value":
                label = _damage_value(doc, rng)
            elif kind == "values":
                label = ", ".join(_damage_value(doc, rng) for _ in range(rng.randint(2, 6)))
            elif kind == "shift":
                label = _ts_shift(doc, rng)
            else:
                doc, label = _structural(doc, rng)
            data, suffix = _encode(doc, rng)
        out.append((f"{i:03d} {kind} {base}: {label}", data, suffix))
    return out


# -- the worker: each mutant through the pipeline, in process ------------------------
def _outcome(path: str, out_dir: str, plot: bool) -> dict:
    import cutimeline as ctl
    from cutimeline import CutimelineError
    from cutimeline.formats.kineto import import_chrome
    stage = "import"
    try:
        tl = import_chrome(path)
        stage = "analyze"
        ctl.analyze(tl).summary()
        stage = "export"
        ctl.export_chrome(tl, os.path.join(out_dir, "export.json.gz"))
        if plot:
            stage = "plot"
            ctl.plot(tl, os.path.join(out_dir, "plot.png"))
    except CutimelineError as exc:
        return {"outcome": "CutimelineError", "message": str(exc)}
    except (Exception, Timeout) as exc:
        import traceback
        return {"outcome": type(exc).__name__, "stage": stage, "message": str(exc)[:300],
                "traceback": traceback.format_exc()[-3000:]}
    return {"outcome": "ok", "stage": stage, "warnings": tl.meta.get("import_warnings", []),
            "rows": len(tl.ops) + len(tl.gpu) + len(tl.spans) + len(tl.syncs)}


def _work(folder: str, plot_every: int) -> None:
    """The worker: every mutant of ``folder``; a plot of every
    ``plot_every``-th one that imports."""
    import matplotlib

    import cutimeline  # noqa: F401  (imports are not the mutants' memory)
    matplotlib.use("Agg")
    work(folder, lambda path, ok: _outcome(path, folder, plot=plot_every > 0
                                           and ok % plot_every == 0),
         memory_cap=MEMORY_CAP, time_limit_s=TIME_LIMIT_S)


def sweep(folder: pathlib.Path, items: list[tuple[str, bytes, str]],
          plot_every: int = PLOT_EVERY, timeout: float = 300) -> list[dict]:
    """Write the mutants to ``folder`` and run them in a worker process."""
    return run_sweep(folder, items, __file__, str(plot_every), timeout=timeout)


def bases(folder: pathlib.Path) -> dict[str, dict]:
    """The trace, and the trace as export_chrome writes it (whose explicit
    links, flags and kinds the import reads another way)."""
    import cutimeline as ctl
    ctl.export_chrome(ctl.load(TRACE), folder / "exported.json.gz")
    return {"kineto": json.loads(gzip.decompress(TRACE.read_bytes())),
            "exported": json.loads(gzip.decompress((folder / "exported.json.gz").read_bytes()))}


# -- the tests ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")   # (folder, one outcome per mutant)
    return folder, sweep(folder, mutants(bases=bases(folder)))


def test_mutants_are_deterministic():
    assert mutants(30) == mutants(30) != mutants(30, seed=SEED + 1)


@pytest.mark.slow
def test_no_mutant_crashes(swept):
    crashes = [r for r in swept[1] if r["outcome"] not in ("ok", "CutimelineError")]
    detail = "\n\n".join(f"{r['label']}: {r['outcome']} in {r['stage']}: {r['message']}\n"
                         f"{r.get('traceback', '')}" for r in crashes[:5])
    table = collections.Counter(r["outcome"] for r in crashes)
    assert not crashes, f"{len(crashes)} crashes {dict(table)}:\n{detail}"


@pytest.mark.slow
def test_the_sweep_meets_both_outcomes(swept):
    # A sweep where nothing imports (or nothing fails) tests too little.
    n = collections.Counter(r["outcome"] for r in swept[1])
    assert n["ok"] >= len(swept[1]) // 4 and n["CutimelineError"] >= len(swept[1]) // 10, n
    assert any(r.get("stage") == "plot" for r in swept[1])
    # A damaged file is an error, never an empty Timeline.
    assert all(r["rows"] > 0 for r in swept[1] if r["outcome"] == "ok")


@pytest.mark.slow
def test_errors_are_one_line_naming_the_file(swept):
    for r in swept[1]:
        if r["outcome"] == "CutimelineError":
            assert r["file"] in r["message"], (r["label"], r["message"])
            assert "\n" not in r["message"], (r["label"], r["message"])


# `python -m cutimeline summary FILE` for each FILE, in one Python: each run
# as -m makes it (runpy, alter_sys), with its own stdout, stderr and warnings
# state; an exception it lets out is printed as Python would, exit status 1.
# One start of Python instead of one per file: each start imports torch (~3 s).
_SUMMARIES = """
import contextlib, io, json, runpy, sys, traceback, warnings
runs = []
for path in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["cutimeline", "summary", path]
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), \\
            contextlib.redirect_stderr(err):
        try:
            runpy.run_module("cutimeline", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    runs.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(runs))
"""


@pytest.mark.slow
def test_cli_summary_of_a_damaged_trace_is_one_line_and_exit_2(swept):
    folder, results = swept
    failing = [r for r in results if r["outcome"] == "CutimelineError"]
    picked = {r["label"].split()[1]: r for r in failing}   # one of each kind
    assert len(picked) >= 4
    four = list(picked.values())[:4]
    proc = subprocess.run([sys.executable, "-c", _SUMMARIES,
                           *(str(folder / r["file"]) for r in four)], capture_output=True,
                          text=True, timeout=120, cwd=pathlib.Path(__file__).parents[3])
    assert proc.returncode == 0, proc.stderr
    for r, run in zip(four, json.loads(proc.stdout), strict=True):
        assert run["returncode"] == 2, (r["label"], run["stderr"])
        assert run["stdout"] == "" and run["stderr"].count("\n") == 1, (r["label"], run["stderr"])
        assert run["stderr"].startswith("cutimeline: error: ") and r["file"] in run["stderr"]


# -- one of each crash class the sweep found, in process ------------------------------
def _first(doc: dict, cat: str) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X")


def _import_damaged(tmp_path, damage):
    from cutimeline.formats.kineto import import_chrome
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    damage(doc)
    (tmp_path / "t.json").write_text(json.dumps(doc))
    return import_chrome(tmp_path / "t.json")


def _set(cat, key, value, arg=False):
    def damage(doc):
        e = _first(doc, cat)
        (e["args"] if arg else e)[key] = value
    return damage


@pytest.mark.parametrize("damage, warning", [
    (_set("kernel", "ts", math.inf), "1 kernel events have no numeric 'ts'"),
    (_set("cpu_op", "dur", math.nan), "1 cpu_op events have no numeric 'dur'"),
    (_set("kernel", "ts", 1e300), "1 kernel events have a ts or dur beyond ±146 years"),
    (_set("kernel", "ts", -9.3e15), "1 kernel events have a ts or dur beyond"),
    (_set("cpu_op", "dur", 2**70), "1 cpu_op events have a ts or dur beyond"),
    (_set("cpu_op", "dur", [1, 2]), "1 cpu_op events have no numeric 'dur'"),
    (_set("cpu_op", "tid", [1]), "1 cpu_op events have a 'tid' that is neither"),
    (_set("kernel", "pid", 2**64), "1 kernel events have a 'pid' that is neither"),
    (_set("kernel", "device", 2**70, arg=True), "have a 'device' that is no integer"),
    (_set("cuda_sync", "device", -2, arg=True), "1 syncs in"),
    (_set("kernel", "correlation", {}, arg=True), "1 of 5 GPU rows"),
])
def test_a_damaged_field_leaves_its_event_out_with_a_warning(tmp_path, damage, warning):
    import cutimeline as ctl
    tl = _import_damaged(tmp_path, damage)
    assert any(warning in w for w in tl.meta["import_warnings"]), \
        tl.meta["import_warnings"]
    json.dumps(tl.meta, allow_nan=False)
    ctl.analyze(tl).summary()


@pytest.mark.parametrize("damage, check", [
    (_set("kernel", "stream", 2**70, arg=True), lambda tl: -1 in tl.gpu.stream),
    (_set("user_annotation", "name", "ProfilerStep#" + "9" * 30),
     lambda tl: len(tl.step_numbers()) == 0),
    (_set("cpu_op", "Input Dims", {"a": 1}, arg=True), lambda tl: len(tl.ops) == 10),
    (_set("kernel", "cat", ["kernel"]),
     lambda tl: len(tl.gpu) == 4 and tl.meta["import_skipped"]["list"] == 1),
    (lambda d: d.update(deviceProperties=[{"id": math.nan, "numSms": 2**70}], distributedInfo={
        "rank": 2**70, "pg": [[[[[[[1]]]]]]]}),
     lambda tl: tl.meta["devices"] == [{}] and "rank" not in tl.meta),
    (lambda d: d.update(baseTimeNanoseconds=math.inf, traceName=[1]),
     lambda tl: tl.meta["base_time_ns"] == 0 and tl.meta["trace_name"] == ""),
])
def test_a_damaged_value_reads_as_absent(tmp_path, damage, check):
    tl = _import_damaged(tmp_path, damage)
    assert check(tl)
    json.dumps(tl.meta, allow_nan=False)


@pytest.mark.parametrize("text, words", [
    ('{"traceEvents": ' + "[" * DEPTH + "]" * DEPTH + "}", "levels deep"),
    ('{"traceEvents": [], "x": ' + "9" * 5000 + "}", "cannot read"),
    ('{"traceEvents": [], "cutimelineTimeShiftNanoseconds": "x", "exportedBy": "cutimeline"}',
     "'cutimelineTimeShiftNanoseconds' is 'x', not a whole number of ns"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1e300, "dur": 1}]}',
     "none of its cpu_op, kernel, memcpy or memset events can be read (1 kernel events"),
])
def test_a_damaged_file_is_a_sentence(tmp_path, text, words):
    from cutimeline import CutimelineError
    from cutimeline.formats.kineto import import_chrome
    (tmp_path / "t.json").write_text(text)
    with pytest.raises(CutimelineError, match="t.json") as e:
        import_chrome(tmp_path / "t.json")
    assert words in str(e.value)
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(text.encode())[:-5])
    with pytest.raises(CutimelineError, match="t.json.gz is a damaged or truncated gzip"):
        import_chrome(tmp_path / "t.json.gz")


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _work(sys.argv[2], int(sys.argv[3]))
