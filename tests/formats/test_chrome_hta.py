"""export_chrome read by HolisticTraceAnalysis 0.5: HTA's temporal breakdown
of our export equals ``Report.hta``'s to the hundredth of a point, on a
SimGPU recording, on imports of real traces (two ranks in one folder among
them), and on files of more than 32,767 events and of more than 32,767
kernels (its int narrowing of small correlation ids overflowed there).

HTA is the optional ``hta`` extra (.ci/run installs it without its
dependencies: its metadata asks for jupyterlab, which it never imports).

HTA rounds fractional-µs times to whole µs (begins up, ends down) unless
``HTA_DISABLE_NS_ROUNDING=1``. ``Report.hta`` reproduces that rounding for
imported Kineto traces (it is what HTA reads from the original file) and
not for recordings, whose ns it keeps; the tests set the variable to match.
"""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.tables import hta as ours
from cutimeline.formats.kineto import import_chrome
from cutimeline.timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from cutimeline.timeline.table import Strings
from cutimeline.timeline.timeline import Timeline

from kinetotraces import DATA, TRACES

pytest.importorskip("hta", reason="needs HolisticTraceAnalysis 0.5 (the `hta` extra: "
                    "pip install --no-deps HolisticTraceAnalysis==0.5.0, then the extra)")
from hta.analyzers.breakdown_analysis import BreakdownAnalysis  # noqa: E402
from hta.common.trace import Trace  # noqa: E402

ROUNDING = "HTA_DISABLE_NS_ROUNDING"


@pytest.fixture(autouse=True)
def quiet_hta():
    # HTA logs a warning per file parsed and per step of its parse
    level = logging.getLogger("hta").level
    logging.getLogger("hta").setLevel(logging.ERROR)
    yield
    logging.getLogger("hta").setLevel(level)


def hta_breakdown(folder) -> dict[int, tuple[float, float, float]]:
    """HTA's idle, compute and non-compute % of each rank of the traces
    in ``folder``, the ranks found as TraceAnalysis(trace_dir=...) finds
    them; parsed in this process (TraceAnalysis forks a pool for two)."""
    t = Trace(trace_dir=str(folder))
    t.load_traces(use_multiprocessing=False)
    df = BreakdownAnalysis.get_temporal_breakdown(t, visualize=False)
    return {int(r.rank): (r.idle_time_pctg, r.compute_time_pctg, r.non_compute_time_pctg)
            for r in df.itertuples()}


def figures(t: dict) -> tuple[float, float, float]:
    return t["idle_pct"], t["compute_pct"], t["non_compute_pct"]


def assert_same(hta: tuple, mine: tuple) -> None:
    # both round to two decimals, from float µs and integer ns: a tie may
    # round apart by one hundredth
    assert np.allclose(hta, mine, rtol=0, atol=0.01 + 1e-9), (hta, mine)


def export_to(tl: Timeline, folder, name: str = "trace.json.gz"):
    folder.mkdir(exist_ok=True)
    ctl.export_chrome(tl, folder / name)
    return folder


def test_a_simgpu_recording(tmp_path, monkeypatch):
    import torch
    with ctl.record(device=ctl.SimGPU("h100", seed=0)) as rec:
        w = torch.randn(256, 256, device="meta")
        for _ in range(4):
            x = torch.randn(64, 256, device="meta")
            for _ in range(10):
                x = (x @ w).relu()
            x.sum().item()   # a sync: HTA must not count the host's wait as GPU work
            rec.step()
    tl = rec.timeline
    assert len(tl.syncs)
    export_to(tl, tmp_path / "sim")
    mine = figures(ctl.analyze(tl).hta["temporal_breakdown"])
    monkeypatch.setenv(ROUNDING, "1")
    assert_same(hta_breakdown(tmp_path / "sim")[0], mine)
    # by default HTA rounds the sub-µs times (the issue saw the idle share
    # move by about a point), as Report.hta does for imported traces
    monkeypatch.delenv(ROUNDING)
    assert_same(hta_breakdown(tmp_path / "sim")[0],
                figures(ours.temporal_breakdown(tl, round_us=True)))


def test_a_real_trace_of_more_than_32767_events(tmp_path, monkeypatch):
    tl = import_chrome(DATA / TRACES["nccl"])
    folder = export_to(tl, tmp_path / "nccl")
    with gzip.open(folder / "trace.json.gz", "rt") as fh:
        assert sum(1 for _ in fh) > 32_767   # an event a line
    monkeypatch.delenv(ROUNDING, raising=False)
    got = hta_breakdown(folder)
    assert list(got) == [0]   # its distributedInfo's rank
    assert_same(got[0], figures(ctl.analyze(tl).hta["temporal_breakdown"]))
    assert got[0] == (77.78, 17.26, 4.97)   # HTA on the original file (README)


def test_two_real_ranks_in_one_folder(tmp_path, monkeypatch):
    tls = {r: import_chrome(DATA / TRACES[f"rank{r}"]) for r in (0, 1)}
    for r, tl in tls.items():   # the file names say nothing: HTA reads each rank inside
        export_to(tl, tmp_path / "ranks", f"{'ab'[r]}.json.gz")
    monkeypatch.delenv(ROUNDING, raising=False)
    got = hta_breakdown(tmp_path / "ranks")
    assert sorted(got) == [0, 1]
    for r, tl in tls.items():
        assert_same(got[r], figures(ctl.analyze(tl).hta["temporal_breakdown"]))
    # unrounded, HTA reads the ns the import kept
    monkeypatch.setenv(ROUNDING, "1")
    got = hta_breakdown(tmp_path / "ranks")
    for r, tl in tls.items():
        assert_same(got[r], figures(ours.temporal_breakdown(tl, round_us=False)))


def many_events(n_host: int, n_gpu: int, launched: bool, streams: int = 2) -> Timeline:
    """``n_gpu`` kernels on ``streams`` streams (some of them a collective
    or a copy), and ``n_host`` host ops. ``launched``: each kernel has its
    op and launch time among the host ops, and three steps split them;
    else none has (a file of one event per kernel, plus its counters) and
    one step holds it all, so that HTA keeps every kernel (it keeps only
    those it can correlate with the steps before the last one when there
    are two). Sub-µs times throughout."""
    rng = np.random.default_rng(7)
    st = Strings()
    names = np.array([st.intern(s) for s in ("aten::mm", "aten::add", "ncclKernel_AllReduce",
                                             "Memcpy HtoD (Pageable -> Device)")])
    which = rng.choice(len(names), n_gpu, p=[0.5, 0.4, 0.05, 0.05])
    kind = np.select([which == 2, which == 3], [GpuKind.COLLECTIVE, GpuKind.MEMCPY],
                     GpuKind.KERNEL)
    stream = 7 + rng.integers(0, streams, n_gpu)
    n = n_host if launched else 0
    begin = 10**9 + np.cumsum(rng.integers(300, 2_500, n))
    flags = np.zeros(n, np.int64)
    op = np.full(n_gpu, NONE)
    if launched:
        op = np.sort(rng.choice(n, n_gpu, replace=False))
        flags[op] = int(OpFlag.LAUNCH)
        ready = begin[op] + 1_000
    else:
        ready = 10**9 + np.cumsum(rng.integers(0, 3_000, n_gpu))
    dur = rng.integers(150, 4_000, n_gpu)
    gb = np.empty(n_gpu, np.int64)
    free = dict.fromkeys(range(7, 7 + streams), 0)
    for i, s in enumerate(stream.tolist()):   # in order on each stream
        gb[i] = max(free[s], int(ready[i]))
        free[s] = gb[i] + dur[i]
    dev = np.where(flags > 0, 0, NONE)
    op_stream = np.full(n, NONE)
    op_stream[op[op != NONE]] = stream[op != NONE]
    ops = {"seq": np.arange(n), "thread": np.zeros(n), "name": np.full(n, names[1]),
           "host_begin_ns": begin, "host_end_ns": begin + 1_200, "flags": flags,
           "device": dev, "stream": op_stream}
    gpu = {"op": op, "stream": stream,
           "launch_ns": np.where(op != NONE, ready - 900, NONE), "begin_ns": gb,
           "end_ns": gb + dur, "name": names[which], "device": np.zeros(n_gpu),
           "kind": kind}
    steps = 3 if launched else 1
    first = min(int(begin[0]) if n else gb[0], int(gb[0]))
    cut = np.linspace(first, int((gb + dur).max()) + 1, steps + 1).astype(np.int64)
    spans = {"kind": np.full(steps, int(SpanKind.STEP)),
             "name": np.full(steps, st.intern("step")), "begin_ns": cut[:-1],
             "end_ns": cut[1:], "number": np.arange(steps), "thread": np.zeros(steps),
             "depth": np.zeros(steps)}
    return Timeline({"ops": ops, "gpu": gpu, "spans": spans}, st,
                    {"aligned": True, "source": "handmade"})


@pytest.mark.parametrize("n_host, n_gpu, launched", [(34_000, 1_500, True),
                                                     (0, 33_000, False)],
                         ids=["more-events", "more-kernels"])
def test_files_beyond_int16(tmp_path, monkeypatch, n_host, n_gpu, launched):
    # With ids under 2^15 HTA narrowed the column to int16, then wrote event
    # row numbers over 32,767 into it: a TypeError (pandas 3). The first
    # file crashed so; the second, whose ids pass 2^15 anyway, is the size
    # the issue asks for (no real trace at hand has that many kernels).
    tl = many_events(n_host, n_gpu, launched)
    folder = export_to(tl, tmp_path / "big")
    monkeypatch.setenv(ROUNDING, "1")
    t = ctl.analyze(tl).hta["temporal_breakdown"]
    assert t["rows"] > (1_000 if launched else 32_767)
    assert t["idle_pct"] > 1 and t["non_compute_pct"] > 0   # copies, collectives
    assert_same(hta_breakdown(folder)[0], figures(t))
