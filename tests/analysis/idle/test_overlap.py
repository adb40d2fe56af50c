"""A stream's idle time beside a busy stream of its device adds to no cause."""

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.idle.activity import host_activity
from cutimeline.analysis.idle.gaps import CAUSES
from cutimeline.analysis.idle.lanes import lanes
from cutimeline.analysis.idle.overlap import device_idle_amounts, stream_window
from cutimeline.timeline.schema import OpFlag, SpanKind

from handmade import random_timeline, timeline


def prefetch_beside_compute():
    """Compute stream 0 busy all of [100, 1100) (ten kernels queued up
    front); a copy stream 1 runs [500, 600) only: idle 90% of the step."""
    rows = [(0, 10 + k, 100 + 100 * k, 200 + 100 * k) for k in range(10)]
    rows.append((1, 450, 500, 600))
    return timeline(rows, steps=[(0, 0, 1100)])


def test_an_idle_side_stream_beside_a_busy_one_is_gpu_bound_with_no_host_time():
    rep = ctl.analyze(prefetch_beside_compute())
    s = rep.steps[0]
    # the step opens at its host begin: the 100 ns before any work are its
    # only idle time, the side stream's idle beside compute adds none
    assert s["verdict"] == "GPU-bound" and s["busy_ns"] == 1000 and s["idle_ns"] == 100
    for row in (rep.overall, rep.devices[0]):  # only the 100 ns before any work
        assert row["idle_ns"] == 100 and row["busy_ns"] == 1000
    side = rep.streams[rep.streams["stream"] == 1][0]
    assert side["busy_ns"] == 100 and side["idle_ns"] == 1000
    # 900 ns idle beside the busy stream: no cause; the 100 ns before any
    # work are the device's idle time too, with the device's causes
    assert side["overlapped_ns"] == 900 and sum(side[f"{c}_ns"] for c in CAUSES) == 100
    (r,) = rep.ranges()
    assert r["verdict"] == "GPU-bound" and r["idle_total_ns"] == 100
    assert "launch" not in r["advice"] and "host" not in r["advice"].replace("the host", "")
    g = rep.gap_table("stream")
    g1 = g[g["stream"] == 1]
    assert set(g1["cause"]) == {"overlapped"} and g1["overlapped_ns"].sum() == 900
    assert rep.summary().startswith("Verdict: GPU-bound — the GPU computes 91% of the step")


def test_only_the_device_idle_part_of_a_stream_gap_gets_causes():
    # stream 0 idles over [200, 400); stream 1 runs [250, 300): 150 ns of
    # stream 0's gap are device idle (launch), 50 overlapped
    tl = timeline([(0, 10, 100, 200), (1, 240, 250, 300), (0, 395, 400, 500)])
    rep = ctl.analyze(tl)
    g = rep.gap_table("stream")
    row = g[(g["stream"] == 0) & (g["begin_ns"] == 200)][0]
    assert row["overlapped_ns"] == 50 and row["launch_ns"] == 150 and row["cause"] == "launch"
    st = rep.streams[rep.streams["stream"] == 0][0]
    assert st["idle_ns"] == sum(st[f"{c}_ns"] for c in CAUSES) + st["overlapped_ns"]


@pytest.mark.parametrize("seed", range(3))
def test_stream_amounts_add_up_and_the_twins_agree(seed):
    tl = random_timeline(seed, n=400, streams=3)
    act = host_activity(tl, host_gap_ns=4_000)
    ln = lanes(tl, act, [tl.start_ns], [tl.end_ns])
    st = ln.streams
    k = np.arange(len(st.gb))
    got = [device_idle_amounts(ln, act, k, engine=e) for e in ("numba", "numpy")]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    am, over = got[0]
    np.testing.assert_array_equal(am.sum(axis=1) + over, st.ge - st.gb)
    assert (over >= 0).all() and (am >= 0).all()
    # per device, each stream's device-idle time is the device's idle time
    dv = ln.devices
    idle = dv.idle[:, 0].sum(axis=1)
    sums, _ = stream_window(ln, act, tl.start_ns, tl.end_ns)
    for j in range(st.n):
        assert sums[j].sum() == idle[ln.stream_device[j]]


def test_one_stream_per_device_has_nothing_overlapped():
    tl = random_timeline(1, n=200, streams=1)
    rep = ctl.analyze(tl)
    assert (rep.streams["overlapped_ns"] == 0).all()
    for c in CAUSES:
        np.testing.assert_array_equal(rep.streams[f"{c}_ns"], rep.devices[f"{c}_ns"])


def apart(seed):
    """Three streams whose ops end before their launch times (an imported
    trace's clocks): gaps whose host part lies between launching segments."""
    rng = np.random.default_rng(seed)
    t, free, rows, ops = 1_000, [0, 0, 0], [], []
    for _ in range(300):
        t += int(rng.integers(100, 6_000))
        s = int(rng.integers(0, 3))
        b = max(free[s], t + int(rng.integers(200, 2_000)))
        free[s] = b + int(rng.integers(0, 9_000))
        rows.append((s, t, b, free[s]))
        ops.append(("aten::mm", t - 3_000, t - 2_500, OpFlag.LAUNCH))
    return timeline(rows, ops=ops, spans=[(SpanKind.DATA, "next(DataLoader)", 50_000,
                                           90_000)], syncs=[(400_000, 420_000)])


@pytest.mark.parametrize("seed", range(6))
def test_the_twins_agree_on_clipped_gaps_in_any_order_and_per_stream(seed):
    tl = random_timeline(seed, n=500, streams=1 + seed % 4) if seed < 4 else apart(seed)
    act = host_activity(tl, host_gap_ns=3_000 if seed < 4 else 1_000)
    ln = lanes(tl, act, [tl.start_ns], [tl.end_ns])
    st = ln.streams
    rng = np.random.default_rng(seed)
    k = rng.permutation(len(st.gb))[: len(st.gb) * 2 // 3]  # out of time order
    qa = st.gb[k] + rng.integers(-2_000, 4_000, len(k))
    qb = qa + rng.integers(0, 30_000, len(k))
    got = [device_idle_amounts(ln, act, k, qa, qb, engine=e) for e in ("numba", "numpy")]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    w0 = tl.start_ns + (tl.end_ns - tl.start_ns) // 5
    w1 = tl.end_ns - (tl.end_ns - tl.start_ns) // 7
    got = [stream_window(ln, act, w0, w1, engine=e) for e in ("numba", "numpy")]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    assert got[0][0].sum() > 0


def test_many_sparse_streams_take_memory_linear_in_rows(monkeypatch):
    # 400 one-kernel streams: each stream's gaps span the device's ~400
    # gaps, ~160,000 pieces; classified a batch at a time (here 4,096),
    # with the numba kernel's results (4,000 such streams took 4 GiB)
    import tracemalloc

    from cutimeline.analysis.idle import overlap

    from adversarial import many_streams
    tl = many_streams(400)
    act = host_activity(tl, 100_000, "numpy")
    ln = lanes(tl, act, np.array([tl.start_ns]), np.array([tl.end_ns]), "numpy")
    want = stream_window(ln, act, tl.start_ns, tl.end_ns, engine="numba")
    monkeypatch.setattr(overlap, "PIECES_PER_BATCH", 4096)
    tracemalloc.start()
    try:
        got = stream_window(ln, act, tl.start_ns, tl.end_ns, engine="numpy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert peak < 16 << 20, peak
