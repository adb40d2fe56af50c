"""opstream.py's OpRows: a recording holds its op rows in compact chunks, ≤ 64 B an
op while it runs, and the Timeline is the one the tuples alone make: the
same session assembled from its chunks and from its tuples gives equal
tables, with tiny chunks converted all through the recording (threads,
autograd, a cut at max_ops, an exception, a simulated device, a journal)."""

from __future__ import annotations

import gc
import sys
import threading
import time
import tracemalloc
import warnings

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.recording import opstream as oprows, recorder
from cutimeline.recording.opstream import OP_ROW_BYTES, OpRows

N_OPS = 50_000


def _ops(n: int) -> None:
    x, y = torch.ones(16), torch.full((16,), 2.0)
    for _ in range(n // 4):
        torch.sum(torch.relu(torch.mul(torch.add(x, y), y)))


def _held(s) -> int:
    """Bytes the session's op rows hold, counted here (not by OpRows):
    each writer's list, its tuples and the three ints each alone holds
    (seq, t0, t1), and whatever chunks it has."""
    n = 0
    for w in s.writers:
        ops = list(w.ops)
        n += sys.getsizeof(w.ops)
        n += sum(sys.getsizeof(t) + sum(map(sys.getsizeof, t[:3])) for t in ops)
        chunks = list(getattr(w, "chunks", ()))
        n += sys.getsizeof(chunks) + sum(c.nbytes + sys.getsizeof(c[:0]) for c in chunks)
    return n


def test_50k_ops_hold_at_most_64_bytes_each_while_recording():
    with ctl.record(device="cpu", measure=False, modules=False) as rec:
        s = rec._session
        _ops(N_OPS)
        counted = _held(s)
        assert oprows.OpRows.held_bytes(s.rows) == pytest.approx(counted, rel=0.02)
    assert len(rec.timeline.ops) >= N_OPS
    per_op = counted / N_OPS
    assert per_op <= 64, f"{per_op:.0f} B/op held while recording"
    assert rec.timeline.meta["op_rows_converted"]["rows"] > N_OPS - 2 * oprows.CHUNK


def test_tracemalloc_sees_at_most_64_bytes_an_op_while_recording():
    """The Python heap's growth while recording, not the objects counted:
    tracemalloc (numpy reports its arrays to it)."""
    _ops(400)  # torch's own first-use allocations, outside the measure
    tracemalloc.start()
    try:
        with ctl.record(device="cpu", measure=False, modules=False) as rec:
            _ops(400)
            base = tracemalloc.get_traced_memory()[0]
            _ops(N_OPS)
            held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held / N_OPS <= 64, f"{held / N_OPS:.0f} B/op (tracemalloc)"


# -- the same Timeline, chunks or tuples ---------------------------------------------

@pytest.fixture
def both(monkeypatch):
    """Record with each thread's rows converted every 5 of its ops, and at
    stop assemble the session twice: from its chunks (the Timeline the
    recorder returns) and from the tuples those chunks were made of, put
    back in front of each writer's list. Yields the list of pairs."""
    monkeypatch.setattr(oprows, "CHUNK", 5)
    made: dict[int, tuple[np.ndarray, list]] = {}  # id(chunk) -> (chunk, its tuples)
    real_converted = oprows._converted

    def converted(rows):
        out = real_converted(rows)
        made[id(out)] = (out, list(rows))
        return out
    monkeypatch.setattr(oprows, "_converted", converted)
    pairs = []
    real_assemble = recorder.assemble

    def assemble(s, harvest, meta):
        tl = real_assemble(s, harvest, meta)
        chunked = sum(len(w.chunks) for w in s.writers)
        with s.rows.lock:
            for w in s.writers:
                w.ops[:0] = [t for c in w.chunks for t in made[id(c)][1]]
                w.chunks = []
        pairs.append((tl, real_assemble(s, harvest, meta), chunked))
        return tl
    monkeypatch.setattr(recorder, "assemble", assemble)
    yield pairs


def _assert_same(a, b) -> None:
    assert sorted(a._tables) == sorted(b._tables)
    for name in a._tables:
        ca, cb = a.table(name).columns, b.table(name).columns
        assert list(ca) == list(cb), name
        for col in ca:
            x, y = np.asarray(ca[col]), np.asarray(cb[col])
            assert x.dtype == y.dtype and np.array_equal(x, y), f"{name}.{col}"
    assert list(a.strings) == list(b.strings)
    skip = {"op_rows_converted"}
    assert {k: v for k, v in a.meta.items() if k not in skip} == \
        {k: v for k, v in b.meta.items() if k not in skip}


def _check(pairs, least_ops: int) -> None:
    (tl, ref, chunked), = pairs
    assert chunked > 10, "the converter made no chunks: the test tests nothing"
    assert len(tl.ops) >= least_ops
    _assert_same(tl, ref)
    assert np.all(np.diff(tl.ops.seq) > 0)


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _train(steps: int) -> None:
    torch.manual_seed(0)
    net = _MLP()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(4, 8)
    for _ in range(steps):
        opt.zero_grad()
        net(x).square().sum().backward()
        opt.step()


def test_threads_autograd_and_modules_assemble_alike(both):
    with ctl.record(device="cpu", measure=False, threads=True) as rec:
        t = threading.Thread(target=_ops, args=(4000,))
        t.start()
        _train(20)
        _ops(2000)
        t.join()
    _check(both, 6000)
    assert len(set(rec.timeline.ops.thread.tolist())) == 2
    assert (rec.timeline.ops.grad_fn >= 0).any()


def test_a_cut_at_max_ops_assembles_alike(both):
    with pytest.warns(RuntimeWarning, match="max_ops=3,000 ops"):
        with ctl.record(device="cpu", measure=False, max_ops=3000) as rec:
            _ops(8000)
    _check(both, 3000)
    assert len(rec.timeline.ops) == 3001 and rec.timeline.meta["truncated"]


def test_an_exception_mid_recording_keeps_the_trace_up_to_it(both):
    with pytest.raises(ZeroDivisionError):
        with ctl.record(device="cpu", measure=False):
            _ops(3000)
            1 / 0
    _check(both, 3000)


def test_a_simulated_gpu_assembles_alike(both):
    x = torch.ones(64, 64, device="meta")
    with ctl.record(device=ctl.SimGPU(), measure=False) as rec:
        for _ in range(300):
            x = torch.relu(x @ x)
    _check(both, 600)
    assert len(rec.timeline.gpu) >= 300


def test_the_journal_holds_the_ops_of_the_chunks(tmp_path, monkeypatch):
    """With out_dir, the journal (here left as the file: writing the
    final one fails) holds every op the Timeline holds."""
    from cutimeline.recording.control import lifecycle
    monkeypatch.setattr(oprows, "CHUNK", 7)

    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(lifecycle, "write_rank", fail)
    with pytest.raises(OSError, match="disk full"):
        with ctl.record(device="cpu", out_dir=tmp_path, measure=False) as rec:
            _train(5)
            _ops(4000)
            time.sleep(0.3)  # a flush or two while recording
            _ops(1001)
    tl, journal = rec.timeline, ctl.load(tmp_path / "rank-0.ctl")
    assert len(journal.ops) == len(tl.ops) > 5000
    for col in ("seq", "thread", "host_begin_ns", "host_end_ns", "grad_fn", "flags",
                "device", "stream", "depth"):
        assert np.array_equal(journal.ops.columns[col], tl.ops.columns[col]), col
    for col in ("name", "shapes", "module"):
        assert journal.decode(journal.ops.columns[col]).tolist() == \
            tl.decode(tl.ops.columns[col]).tolist(), col


# -- the cap in bytes -------------------------------------------------------------------

def test_max_bytes_caps_the_ops_at_40_bytes_each():
    with pytest.warns(RuntimeWarning, match=r"max_ops=250 ops \(max_bytes=10,000"):
        with ctl.record(device="cpu", measure=False, max_bytes=10_000) as rec:
            _ops(1000)
    assert len(rec.timeline.ops) == 10_000 // OP_ROW_BYTES + 1
    assert rec.timeline.meta["options"]["max_bytes"] == 10_000


def test_max_ops_is_the_same_cap_in_ops():
    rec = ctl.record(device="cpu", max_ops=1000)
    assert rec.options["max_bytes"] == 1000 * OP_ROW_BYTES
    assert ctl.record(device="cpu").options["max_ops"] == 10_000_000


@pytest.mark.parametrize("kwargs, words", [
    ({"max_bytes": 39}, "max_bytes=39) must be a whole number of bytes ≥ 40"),
    ({"max_bytes": 1.5e9}, "max_bytes=1500000000.0) must be a whole number"),
    ({"max_bytes": True}, "max_bytes=True) must be"),
    ({"max_bytes": 10_000, "max_ops": 10}, "gives the cap twice; give max_bytes only"),
    ({"max_ops": 0}, "max_ops=0) must be a whole number of ops"),
])
def test_a_bad_cap_says_what_it_takes(kwargs, words):
    with pytest.raises(CutimelineError) as info:
        ctl.record(device="cpu", **kwargs)
    assert words in str(info.value)


def test_the_recorded_thread_converts_its_rows_between_ops_off_the_device_clock(monkeypatch):
    """No thread of its own: every CHUNK of a thread's ops, that thread
    converts them between two ops; a SimGPU's virtual host leaves the time
    out, so no op and no gap of the simulated host grows by it."""
    assert not any(t.name.startswith("cutimeline") for t in threading.enumerate())
    lost = []
    gpu = ctl.SimGPU(seed=0)
    real = gpu.recorder_work
    monkeypatch.setattr(gpu, "recorder_work", lambda ns: (lost.append(ns), real(ns)))
    x = torch.ones(8, device="meta")
    gc.disable()  # Python's collections leave it too (test_gcpauses.py): none here
    try:
        with ctl.record(device=gpu, measure=False, modules=False) as rec:
            for _ in range(3 * oprows.CHUNK // 2 + 10):
                x = x + 1
    finally:
        gc.enable()
    stats = rec.timeline.meta["op_rows_converted"]
    assert stats["chunks"] == len(lost) >= 1 and stats["rows"] >= oprows.CHUNK
    assert all(ns > 0 for ns in lost)
    with ctl.record(device="cpu", measure=False) as rec:
        _ops(100)
    assert rec.timeline.meta["op_rows_converted"]["rows"] == 0  # 100 < one chunk
