"""chrome.py: Chrome-trace/Perfetto export, checked against the trace event
format, read back through the Kineto import (the traces of kinetotraces), and
byte for byte against the files it wrote before (tests/data/chrome_export).

Those golden files are written by ``write_golden``; after a deliberate change
of the export, rewrite them (and review the diff):

    PYTHONPATH=tests python tests/formats/test_chrome.py --write-golden
"""

from __future__ import annotations

import collections
import decimal
import gzip
import hashlib
import json
import os
import pathlib
import re
import stat
import sys
import threading

import numpy as np
import pytest

from cutimeline import CutimelineError, Timeline, __version__
from cutimeline.alignment import align
from cutimeline.formats import chrome, chromeevents, jsonrows
from cutimeline.formats.chrome import export_chrome, queue_depth
from cutimeline.formats.kineto import import_chrome
from cutimeline.formats.kineto.schema import SHIFT_KEY
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind

from handmade import random_timeline
from kinetotraces import DATA, TRACES
from synth import trace

GOLDEN = pathlib.Path(__file__).parents[1] / "data" / "chrome_export"


@pytest.fixture(scope="module")
def imported():
    return {k: import_chrome(DATA / p) for k, p in TRACES.items()}


@pytest.fixture(scope="module")
def exported(imported, tmp_path_factory):
    """Each imported trace exported (plain JSON) and the file's JSON."""
    out = {}
    for k, tl in imported.items():
        path = tmp_path_factory.mktemp("export") / f"{k}.json"
        export_chrome(tl, path)
        out[k] = (path, json.loads(path.read_text()))
    return out

# -- export: format ---------------------------------------------------------------
def validate_chrome(doc):
    """The Chrome trace event format, as Perfetto and chrome://tracing read it."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    flows = collections.defaultdict(list)
    tracks = collections.defaultdict(list)
    named_pids, named_threads, used = set(), set(), set()
    for e in doc["traceEvents"]:
        ph = e["ph"]
        assert ph in ("X", "M", "C", "s", "f", "i"), e
        assert isinstance(e["pid"], int) and isinstance(e["ts"], (int, float))
        if ph == "X":
            assert isinstance(e["name"], str) and isinstance(e["cat"], str)
            assert isinstance(e["tid"], int) and e["dur"] >= 0
            assert isinstance(e.get("args", {}), dict)
            tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
            used.add((e["pid"], e["tid"]))
        elif ph == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index"), e
            key = "sort_index" if e["name"].endswith("sort_index") else "name"
            assert key in e["args"]
            if e["name"] == "process_name":
                named_pids.add(e["pid"])
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
        elif ph == "i":
            assert e["s"] in ("t", "p", "g") and isinstance(e["tid"], int)
            assert isinstance(e["name"], str) and isinstance(e["args"], dict)
        elif ph == "C":
            assert isinstance(e["name"], str) and e["args"]
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
        else:
            assert isinstance(e["id"], int) and e["cat"] and e["name"]
            assert isinstance(e["tid"], int)
            if ph == "f":
                assert e["bp"] == "e"
            flows[e["id"]].append(e)
    for track in tracks.values():   # slices on a track nest, never overlap
        track.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for b, end in track:
            while stack and stack[-1] <= b + 1e-6:   # µs floats: 0.1 + 0.2
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, "slices overlap on a track"
            stack.append(end)
    for fid, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {fid} is not one s + one f"
        assert len({(e["cat"], e["name"]) for e in pair}) == 1
        for e in pair:   # both ends bind to a slice on their track
            slices = tracks[e["pid"], e["tid"]]
            if e["ph"] == "s":
                assert any(b <= e["ts"] <= end for b, end in slices)
            else:
                assert any(b == e["ts"] for b, _ in slices)
    assert {p for p, _ in used} <= named_pids and used <= named_threads
    return flows


@pytest.mark.parametrize("key", TRACES)
def test_export_is_valid_chrome_trace(imported, exported, key):
    tl = imported[key]
    path, doc = exported[key]
    flows = validate_chrome(doc)
    assert len(flows) == int((tl.gpu.op >= 0).sum())
    x = collections.Counter(e["cat"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert x["cpu_op"] == len(tl.ops) and x["user_annotation"] == len(tl.spans)
    assert x["kernel"] + x["gpu_memcpy"] + x["gpu_memset"] == len(tl.gpu)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert counters and all(e["args"]["depth"] >= 0 for e in counters)
    gpu_pids = {e["pid"] for e in doc["traceEvents"]
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert gpu_pids == set(tl.gpu.device.tolist())   # a process per device


def test_export_tracks_per_thread_and_stream(imported, exported):
    tl, (_, doc) = imported["rank0"], exported["rank0"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    streams = {n for n in names.values() if n.startswith("stream ")}
    assert streams == {f"stream {s}" for s in set(tl.gpu.stream.tolist())}
    procs = {e["pid"]: e["args"]["name"] for e in exported["nccl"][1]["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[0] == "GPU 0: NVIDIA A100-PG509-200"
    assert procs[2910249] == "Host (rank 0)"


# -- export → import round trip ----------------------------------------------------
def same_timeline(a: Timeline, b: Timeline):
    for table in ("ops", "gpu", "syncs", "spans"):
        ta, tb = a.table(table), b.table(table)
        assert len(ta) == len(tb), table
        for col, arr in ta.columns.items():
            if (table, col) in {("ops", "name"), ("ops", "shapes"), ("ops", "module"),
                                ("ops", "grad_fn"), ("gpu", "name"), ("syncs", "kind"),
                                ("spans", "name")}:
                assert list(a.decode(arr)) == list(b.decode(tb[col])), (table, col)
            elif table == "gpu" and col in ("begin_event", "end_event"):
                continue   # raw events are not exported
            else:
                assert np.array_equal(arr, tb[col]), (table, col)


@pytest.mark.parametrize("key", TRACES)
def test_round_trip_through_export(imported, exported, key):
    back = import_chrome(exported[key][0])
    same_timeline(imported[key], back)
    assert back.meta["import_warnings"] == imported[key].meta["import_warnings"] or \
        all("GPU rows" in w for w in back.meta["import_warnings"])
    assert back.meta["base_time_ns"] == imported[key].meta["base_time_ns"]


def handmade(offset_ns: int = 0) -> Timeline:
    """Two threads, kinds Kineto lacks, launches unknown, a sync, spans."""
    names = ["aten::mm", "aten::item", "op kernel", "graph", "copy", "step",
             "DataLoader", "synchronize", "float[2,2]"]
    t = offset_ns + np.array([0, 100, 150, 300, 1000], np.int64)
    tables = {
        "ops": {"seq": np.arange(3), "thread": [0, 1, 0], "name": [0, 4, 1],
                "shapes": [8, NONE, NONE], "grad_fn": [NONE, NONE, NONE],
                "device": [0, 0, 0], "stream": [7, 7, NONE],
                "flags": [int(OpFlag.LAUNCH), int(OpFlag.LAUNCH | OpFlag.VIEW),
                          int(OpFlag.SYNC)], "depth": [0, 0, 0],
                "host_begin_ns": t[[0, 1, 2]], "host_end_ns": t[[0, 1, 2]] + 40},
        "gpu": {"op": [0, 1, NONE], "device": [0, 0, 1], "stream": [7, 7, 3],
                "name": [2, 3, 2], "kind": [GpuKind.OP, GpuKind.GRAPH, GpuKind.KERNEL],
                "launch_ns": [t[0] + 40, NONE, t[2]], "begin_ns": t[[1, 3, 3]],
                "end_ns": t[[3, 4, 4]]},
        "syncs": {"op": [2], "kind": [7], "device": [0], "stream": [NONE],
                  "host_begin_ns": [t[2] + 1], "host_end_ns": [t[4]], "thread": [0]},
        "spans": {"kind": [SpanKind.STEP, SpanKind.DATA], "name": [5, 6],
                  "thread": [0, 1], "depth": [0, 0], "number": [3, NONE],
                  "begin_ns": [t[0], t[1]], "end_ns": [t[4] + 10, t[1] + 40]},
    }
    return Timeline(tables, names, {"source": "test", "aligned": True})


@pytest.mark.parametrize("offset", [0, 1_700_000_000_123_456_789])   # large: shifted
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_handmade_round_trip(tmp_path, offset, suffix):
    tl = handmade(offset)
    path = tmp_path / f"h{suffix}"
    export_chrome(tl, path)
    text = gzip.decompress(path.read_bytes()) if suffix.endswith(".gz") else path.read_bytes()
    doc = json.loads(text)
    assert len(validate_chrome(doc)) == 2   # two GPU rows have an op
    back = import_chrome(path)
    same_timeline(tl, back)
    assert back.meta["import_warnings"] == []


def test_recorder_like_round_trip_keeps_row_order(tmp_path):
    """One gpu row per op in launch order, on streams whose work runs out
    of order; ops one after another, each launching at its end."""
    rng = np.random.default_rng(11)
    n = 300
    begin = np.cumsum(rng.integers(1_000, 5_000, n)) + 10**9
    end = begin + rng.integers(100, 900, n)
    stream = rng.integers(0, 3, n)
    cost = rng.integers(100, 40_000, n)   # streams drain unevenly
    start, free = np.zeros(n, np.int64), {}
    for i in range(n):   # each stream runs its work in order, one at a time
        start[i] = max(free.get(stream[i], 0), end[i] + 4_000)
        free[stream[i]] = start[i] + cost[i]
    tl = Timeline({
        "ops": {"seq": np.arange(n), "thread": np.zeros(n), "name": np.zeros(n),
                "device": np.zeros(n), "stream": stream,
                "flags": np.full(n, int(OpFlag.LAUNCH)), "depth": np.zeros(n),
                "host_begin_ns": begin, "host_end_ns": end},
        "gpu": {"op": np.arange(n), "device": np.zeros(n), "stream": stream,
                "name": np.zeros(n), "kind": np.full(n, int(GpuKind.OP)),
                "launch_ns": end, "begin_ns": start, "end_ns": start + cost}},
        ["aten::mul"], {"source": "test", "aligned": True})
    assert np.any(np.diff(tl.gpu.begin_ns) < 0)
    export_chrome(tl, tmp_path / "r.json.gz")
    validate_chrome(json.loads(gzip.decompress((tmp_path / "r.json.gz").read_bytes())))
    same_timeline(tl, import_chrome(tmp_path / "r.json.gz"))


def with_extras(offset_ns: int = 0) -> Timeline:
    """``handmade`` with the tables of format 4: a source line on the
    sync op and on the DataLoader span, FLOPs of the two launching ops,
    memory on two devices (a row without an op among them)."""
    tl = handmade(offset_ns)
    names = list(tl.strings) + ["train.py", "main", "loss.item()", 'say "hi"']
    f, fn, code, odd = range(len(tl.strings), len(names))
    t = offset_ns + np.array([40, 140, 190, 900])
    extras = {
        "sources": {"op": [2, NONE], "span": [NONE, 1], "file": [f, odd], "line": [57, 3],
                    "function": [fn, NONE], "code": [code, NONE]},
        "flops": {"op": [0, 1], "flops": [2.0 * 64**3, 1e15]},
        "memory": {"op": [0, 1, NONE, 2], "device": [0, 0, 1, 0], "host_ns": t,
                   "allocated": [1 << 30, 4096, 0, 0], "freed": [0, 1024, 512, 4096],
                   "in_use": [1 << 30, (1 << 30) + 3072, 7 << 20, (1 << 30) - 1024]},
    }
    tables = {n: tl.table(n).columns for n in ("ops", "gpu", "syncs", "spans")}
    return Timeline({**tables, **extras}, names, dict(tl.meta))


@pytest.mark.parametrize("offset", [0, 1_700_000_000_123_456_789])
def test_sources_flops_and_memory_export_and_read_back(tmp_path, offset):
    tl = with_extras(offset)
    export_chrome(tl, tmp_path / "x.json.gz")
    doc = json.loads(gzip.decompress((tmp_path / "x.json.gz").read_bytes()))
    validate_chrome(doc)
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    assert [e["args"].get("flops") for e in ops] == [2 * 64**3, 10**15, None]
    assert {k: ops[2]["args"][k] for k in ("source", "function", "code")} == \
        {"source": "train.py:57", "function": "main", "code": "loss.item()"}
    fetch = next(e for e in ev if e.get("name") == "DataLoader")
    assert fetch["args"]["source"] == 'say "hi":3' and "code" not in fetch["args"]
    shift = doc.get("cutimelineTimeShiftNanoseconds", 0)
    counters = [(e["pid"], round(e["ts"] * 1000) + shift, e["args"]) for e in ev
                if e["ph"] == "C" and e["name"] == "GPU memory"]
    m = tl.memory
    assert counters == [(d, t, {"allocated_bytes": u}) for d, t, u in
                        zip(m.device.tolist(), m.host_ns.tolist(), m.in_use.tolist())]
    kineto = [e["args"] for e in ev if e["ph"] == "i"]
    assert [a["Bytes"] for a in kineto] == [1 << 30, 3072, -512, -4096]
    assert [a["Device Type"] for a in kineto] == [1] * 4
    back = import_chrome(tmp_path / "x.json.gz")
    same_timeline(tl, back)
    for name in ("memory", "flops", "sources"):
        a, b = tl.table(name), back.table(name)
        for col, arr in a.columns.items():
            if (name, col) in {("sources", "file"), ("sources", "function"),
                               ("sources", "code")}:
                assert list(tl.decode(arr)) == list(back.decode(b[col])), (name, col)
            else:
                assert np.array_equal(arr, b[col]), (name, col)


def test_a_timeline_without_extras_writes_none_of_their_keys(tmp_path):
    export_chrome(handmade(), tmp_path / "h.json")
    text = (tmp_path / "h.json").read_text()
    for key in ('"source"', '"flops"', "GPU memory", "[memory]"):
        assert key not in text


def test_what_hta_reads_is_in_the_file(tmp_path):
    """What HolisticTraceAnalysis 0.5 needs (test_chrome_hta.py runs it where
    installed): the rank on the first line, in the '"rank": N' its file scan
    matches; correlation ids from 2^15 (it narrowed smaller ones to int16,
    then overflowed them); no "stream" on a sync, which would make the
    host's wait GPU work to it; the sync's stream still read back."""
    tl = handmade()
    tl = tl.replace(meta={**tl.meta, "rank": 3, "world_size": 4},
                    syncs={**tl.syncs.columns, "stream": np.array([7])})
    path = tmp_path / "r.json.gz"
    export_chrome(tl, path)
    with gzip.open(path, "rt") as fh:
        assert re.search(r'"rank":\s+(\d+)', fh.readline()).group(1) == "3"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert list(doc)[:2] == ["schemaVersion", "distributedInfo"]
    assert doc["distributedInfo"] == {"rank": 3, "world_size": 4}
    ids = [e["args"]["correlation"] for e in doc["traceEvents"]
           if "correlation" in e.get("args", {})]
    assert min(ids) == chromeevents.FIRST_CORRELATION == 2**15
    syncs = [e["args"] for e in doc["traceEvents"] if e.get("cat") == "cuda_sync"]
    assert syncs == [{**syncs[0], "cutimeline stream": 7}] and "stream" not in syncs[0]
    assert import_chrome(path).syncs.stream.tolist() == [7]


def test_empty_timeline_round_trips(tmp_path):
    export_chrome(Timeline(meta={"aligned": True}), tmp_path / "empty.json")
    back = import_chrome(tmp_path / "empty.json")
    assert all(len(back.table(t)) == 0 for t in ("ops", "gpu", "syncs", "spans"))


def test_queue_depth_counts_launched_unfinished_work():
    tl = handmade()
    q = queue_depth(tl)
    assert set(q) == {(0, 7), (1, 3)}
    t, d = q[0, 7]
    # row 0: launched 40, ends 300; row 1: no launch time, so not counted
    # (when it entered the queue is unknown: Report.queue_depth's model)
    assert t.tolist() == [40, 300] and d.tolist() == [1, 0]
    rng = np.random.default_rng(3)
    n = 500
    begin = np.sort(rng.integers(0, 10_000, n))
    end = begin + rng.integers(0, 500, n)
    launch = begin - rng.integers(0, 2_000, n)
    rand = Timeline({"gpu": {"op": np.full(n, NONE), "device": np.zeros(n),
                             "stream": rng.integers(0, 3, n), "launch_ns": launch,
                             "begin_ns": begin, "end_ns": end}}, [], {"aligned": True})
    for (_, s), (t, d) in queue_depth(rand).items():
        mine = rand.gpu.stream == s
        for probe in rng.integers(-2_000, 11_000, 50):
            want = int(((launch[mine] <= probe) & (end[mine] > probe)).sum())
            k = np.searchsorted(t, probe, side="right") - 1
            assert (d[k] if k >= 0 else 0) == want


def held(t, d):
    """A step function with one point per time: the last at each."""
    t, d = np.asarray(t), np.asarray(d)
    keep = np.append(t[1:] != t[:-1], True) if len(t) else np.zeros(0, bool)
    return t[keep].tolist(), d[keep].tolist()


@pytest.mark.parametrize("case", ["nccl", "rank0", "multi_stream"])
def test_the_exported_counter_is_the_report_s_queue_depth(tmp_path, imported, case):
    """One queue-depth model (issue 47): the Perfetto counter of an
    imported trace's export holds, per stream, the points of
    ``Report.queue_depth`` (one per time)."""
    from cutimeline.analysis.analyzer import analyze
    tl = imported[case]
    rep = analyze(tl)
    export_chrome(tl, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text(), parse_float=decimal.Decimal)
    shift = doc.get(SHIFT_KEY, 0)   # times relative to a whole second where large
    counters = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "C" and e["name"].startswith("queue depth"):
            counters[e["pid"], e["name"]].append((shift + int(e["ts"] * 1000),
                                                  e["args"]["depth"]))
    depths = queue_depth(tl)
    assert depths and len(counters) == len(depths)
    for (dev, stream), (t, d) in depths.items():
        want = held(*rep.queue_depth(device=dev, stream=stream))
        assert (t.tolist(), d.tolist()) == want
        got = counters[dev, f"queue depth (stream {stream})"]
        assert [a for a, _ in got] == want[0] and [b for _, b in got] == want[1]


def test_export_needs_an_aligned_timeline(tmp_path):
    tl = handmade()
    raw = tl.replace(meta={"aligned": False})
    with pytest.raises(CutimelineError, match="not aligned.*alignment.align"):
        export_chrome(raw, tmp_path / "x.json")
    assert not list(tmp_path.iterdir())


# -- export: the same bytes as the files it wrote before ------------------------
def odd(offset_ns: int = 0, alike: bool = False) -> Timeline:
    """Every branch of the export: unknown flag bits, negative threads and
    durations, names to escape, launches and ops unknown, every GPU kind,
    sync kinds named and not, steps without a number, threads named in
    meta (``alike``: two named alike, so all are numbered)."""
    names = ["aten::mm", 'quote " and \\ back', "new\nline\ttab", "é 日本 \ud800",
             "Stream Sync", "Event Sync", "", "custom wait", "float[2,2]", "step"]
    t = offset_ns + np.array([0, 100, 150, 300, 1000, 5000, 7000], np.int64)
    n_ops = 6
    tables = {
        "ops": {"seq": [0, 1, 2, 3, 10**12, 5], "thread": [0, 1, -2, 2, 0, 1],
                "name": [0, 1, 2, 3, 6, 0], "shapes": [8, NONE, 3, NONE, 1, 2],
                "grad_fn": [NONE, 2, NONE, 0, NONE, NONE], "module": [1, NONE, NONE, 3, NONE, 0],
                "device": [0, NONE, 1, 0, 2, NONE], "stream": [7, NONE, 2**63 - 1, 0, 3, NONE],
                "flags": [0, int(OpFlag.SYNC | OpFlag.VIEW), 64, 255, int(OpFlag.TRUNCATED), 128],
                "depth": [0, 1, 0, 0, 2, 0],
                "host_begin_ns": t[[0, 1, 2, 3, 4, 5]], "host_end_ns": t[[1, 0, 4, 5, 6, 6]]},
        "gpu": {"op": [0, NONE, 2, NONE, 3, 4, 5], "device": [0, 1, 1, 2, 0, 2, 0],
                "stream": [7, 3, 2, 2**40, 7, 3, 0], "name": [0, 1, 2, 3, 6, 8, 9],
                "kind": [int(k) for k in GpuKind],
                "launch_ns": [t[1], t[1], NONE, NONE, t[3] + 1, t[4], NONE],
                "begin_ns": t[[2, 2, 3, 3, 4, 5, 6]], "end_ns": t[[3, 3, 3, 6, 5, 6, 6]] + 1},
        "syncs": {"op": [1, NONE, 4, 3, 2, 5], "kind": [4, 5, 6, NONE, 7, 4],
                  "device": [0, 1, 0, 2, 0, 1], "stream": [NONE, 3, 7, NONE, 2, NONE],
                  "host_begin_ns": t[[0, 2, 4, 5, 3, 6]], "host_end_ns": t[[1, 3, 6, 6, 5, 6]] + 9,
                  "thread": [0, 0, 1, 2, 0, 1]},
        "spans": {"kind": [int(k) for k in SpanKind] + [int(SpanKind.STEP)],
                  "name": [9, 1, 2, 3, NONE, 0, 8, 6, 9], "thread": [0, 1, -2, 2, 0, 1, 0, 0, 1],
                  "depth": [0] * 9, "number": [3, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE],
                  "begin_ns": t[[0, 1, 2, 3, 4, 5, 0, 1, 2]],
                  "end_ns": t[[6, 2, 3, 4, 5, 6, 6, 1, 5]]},
    }
    assert len(tables["ops"]["seq"]) == n_ops
    meta = {"source": "test", "aligned": True, "rank": 3, "base_time_ns": 17,
            "threads": [{"pid": 4242, "tid": 9, "name": "main é"}, {"pid": True, "tid": "x"},
                        {"pid": 4242, "tid": 9 if alike else 11}, "not a dict"],
            "device_names": {"0": "NVIDIA \"H100\"", "2": ""},
            "devices": [{"id": 0, "name": "x"}], "trace_name": "odd \u2603"}
    return Timeline(tables, names, meta)


def exports(tl: Timeline, folder: pathlib.Path, write) -> dict[str, bytes]:
    out = {}
    for suffix in (".json", ".json.gz"):
        path = folder / f"{write.__name__}{suffix}"
        write(tl, path)
        data = path.read_bytes()
        out[suffix] = gzip.decompress(data) if suffix.endswith(".gz") else data
    return out


def cases():
    yield from ((f"kineto {k}", lambda p=p: import_chrome(DATA / p)) for k, p in TRACES.items())
    for offset in (0, 1_700_000_000_123_456_789, -(2**62) + 5 * 10**9, 2**62 - 10**4):
        yield f"odd {offset}", lambda o=offset: odd(o)
    yield "odd, threads alike", lambda: odd(0, alike=True)
    yield "handmade", lambda: handmade(1_700_000_000_000_000_000)
    yield "random", lambda: random_timeline(4, n=2_000, streams=3)
    yield "simulated, 2 devices", lambda: align(trace(2, devices=2, n_ops=800))
    yield "empty", lambda: Timeline(meta={"aligned": True, "threads": [{"pid": 1, "tid": 1}]})


# Cases whose golden is the whole file (gzipped, under ~16 KB); the others
# (real traces of 10^4-10^5 rows, random and simulated Timelines) keep its
# length and SHA-256 only.
WHOLE_GZ_BYTES = 16_000
VERSION = f'"exportedBy": "cutimeline {__version__}"'.encode()


def normalised(data: bytes) -> bytes:
    """The export with the version it names replaced, so that a release
    changes no golden."""
    return data.replace(VERSION, b'"exportedBy": "cutimeline VERSION"', 1)


def golden_name(case: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in case).strip("_") + ".json.gz"


def write_golden(folder: pathlib.Path = GOLDEN) -> None:
    """Write the golden files of every case (see the module doc): one
    ``<case>.json.gz`` per small case and ``digests.json`` for all, and
    ``queue_depth.json.gz`` for ``test_queue_depth_is_what_it_was``."""
    import tempfile
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, make in cases():
            data = normalised(exports(make(), pathlib.Path(tmp), export_chrome)[".json"])
            digests[case] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            packed = gzip.compress(data, 9, mtime=0)
            if len(packed) <= WHOLE_GZ_BYTES:
                (folder / golden_name(case)).write_bytes(packed)
    (folder / "digests.json").write_text(json.dumps(digests, indent=1) + "\n")
    depth = {name: {f"{d} {s}": [t.tolist(), v.tolist()] for (d, s), (t, v) in
                    queue_depth(tl).items()} for name, tl in depth_cases()}
    (folder / "queue_depth.json.gz").write_bytes(gzip.compress(json.dumps(depth).encode(), 9,
                                                               mtime=0))


@pytest.mark.parametrize("case", [c for c, _ in cases()])
def test_export_writes_the_bytes_it_wrote_before(tmp_path, case):
    tl = dict(cases())[case]()
    new = exports(tl, tmp_path, export_chrome)
    assert new[".json"] == new[".json.gz"]
    json.loads(new[".json"])
    data = normalised(new[".json"])
    whole = GOLDEN / golden_name(case)
    if whole.exists():
        want = gzip.decompress(whole.read_bytes())
        if data != want:   # the first line that differs, not 10 KB of bytes
            lines = zip(data.splitlines(), want.splitlines())
            k, (got, was) = next(((k, p) for k, p in enumerate(lines) if p[0] != p[1]),
                                 (None, (b"", b"")))
            assert data == want, f"line {k}: wrote {got[:300]!r}, before {was[:300]!r}"
    want = json.loads((GOLDEN / "digests.json").read_text())[case]
    assert (len(data), hashlib.sha256(data).hexdigest()) == (want["bytes"], want["sha256"])


def test_chunks_and_threads_change_no_byte(tmp_path, monkeypatch):
    tl = random_timeline(8, n=3_000, streams=4)
    want = exports(tl, tmp_path, export_chrome)   # one chunk, no worker thread
    monkeypatch.setattr(jsonrows, "CHUNK_BYTES", 3_000)   # rows of a few hundred bytes
    monkeypatch.setattr(chrome, "POOL_ROWS", 0)            # and worker threads
    assert exports(tl, tmp_path, export_chrome) == want


def depth_cases():
    yield "handmade", handmade()
    yield "odd", odd()
    yield "random", random_timeline(3, n=1_000, streams=3)


def test_queue_depth_is_what_it_was():
    was = json.loads(gzip.decompress((GOLDEN / "queue_depth.json.gz").read_bytes()))
    for name, tl in depth_cases():
        new = queue_depth(tl)
        assert [f"{d} {s}" for d, s in new] == list(was[name])
        for key, (t, d) in new.items():
            assert all(type(k) is int for k in key)
            assert t.tolist() == was[name][f"{key[0]} {key[1]}"][0]
            assert d.tolist() == was[name][f"{key[0]} {key[1]}"][1]


def test_export_follows_the_umask_and_leaves_nothing_on_failure(tmp_path):
    tl = handmade()
    old = os.umask(0o027)
    try:
        export_chrome(tl, tmp_path / "new.json.gz")
        export_chrome(tl, tmp_path / "old.json.gz")
    finally:
        os.umask(old)
    mode = [stat.S_IMODE(os.stat(tmp_path / f).st_mode) for f in ("new.json.gz", "old.json.gz")]
    assert mode == [0o640, 0o640]  # as any file the user writes, not mkstemp's 0600
    bad = tl.replace(spans=tl.spans.replace(kind=[9, 1]))   # no SpanKind 9
    with pytest.raises(CutimelineError, match="spans.kind holds 9, which is no SpanKind"):
        export_chrome(bad, tmp_path / "bad.json.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json.gz", "old.json.gz"]
    with pytest.raises(CutimelineError, match="folder .* does not exist"):
        export_chrome(tl, tmp_path / "missing" / "x.json")


def test_a_failed_export_on_workers_leaves_no_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome, "POOL_ROWS", 0)   # workers, and the queue depth ahead
    tl = handmade()
    bad = tl.replace(spans=tl.spans.replace(kind=[9, 1]))
    threads = threading.active_count()
    with pytest.raises(CutimelineError, match="no SpanKind"):
        export_chrome(bad, tmp_path / "bad.json.gz")
    assert threading.active_count() == threads and list(tmp_path.iterdir()) == []


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    write_golden()
