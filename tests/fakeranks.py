"""Synthetic ranks for merge and straggler tests: per-rank Timelines whose
clocks, arrivals and collectives are known exactly."""

from __future__ import annotations

import numpy as np

from cutimeline.recording.measures.collectives import ALL, FROM_ROOT, KINDS, TO_ROOT
from cutimeline.timeline.schema import NONE, OpFlag, SpanKind
from cutimeline.timeline.timeline import Timeline


def fake_ranks(seed: int, world: int = 3, *, n: int = 60, slow: int | None = None,
               delay_ns: int = 2_000_000, shift_ns=None, drift_ppm=None,
               epoch_error_ns=None, kinds=("all",)) -> list[Timeline]:
    """Ranks that run ``n`` collectives of the given kinds (cycled) on one
    world group, one step each, with a host op between: rank r's host clock
    reads ``shift[r] + (1 + drift[r]·1e-6)·t`` at true time t; its stored
    epoch is off by ``epoch_error[r]``. ``meta["true_shift"]`` holds (for
    the test) the rank's clock parameters."""
    rng = np.random.default_rng(seed)
    shift = np.zeros(world, np.int64) if shift_ns is None else np.asarray(shift_ns, np.int64)
    drift = np.zeros(world) if drift_ppm is None else np.asarray(drift_ppm, float)
    err = np.zeros(world, np.int64) if epoch_error_ns is None else np.asarray(epoch_error_ns)
    t0 = 10 ** 12
    kind = np.array([KINDS.index(kinds[k % len(kinds)]) for k in range(n)])
    root = rng.integers(0, world, n)
    arrive = np.zeros((world, n), np.int64)
    done = np.zeros((world, n), np.int64)
    t = np.full(world, t0 + 1_000_000)
    for k in range(n):
        a = t + rng.integers(20_000, 200_000, world)
        if slow is not None:
            a[slow] += delay_ns
        lat = rng.integers(5_000, 60_000, world)
        if kind[k] == FROM_ROOT:
            d = np.maximum(a, a[root[k]]) + lat
        elif kind[k] == TO_ROOT:
            d = a + lat
            d[root[k]] = a.max() + lat[root[k]]
        else:
            d = a.max() + lat
        arrive[:, k], done[:, k] = a, d
        t = d + rng.integers(1_000, 30_000, world)

    def clock(r, x):
        return shift[r] + x + np.rint((x - t0) * drift[r] * 1e-6).astype(np.int64)

    out = []
    for r in range(world):
        hb = np.empty(2 * n, np.int64)
        hb[0::2] = arrive[r] - 15_000  # a host op, then the collective
        hb[1::2] = arrive[r]
        he = hb + 8_000
        names = np.tile([0, 1], n)
        steps_b = np.concatenate([[t0], done[r, :-1] + 1])
        meta = {"source": "fake", "rank": r, "world_size": world, "host": "h",
                "start_epoch_ns": 1_700_000_000 * 10 ** 9 + t0 + int(err[r]),
                "start_host_ns": int(clock(r, t0)), "threads": ["MainThread"],
                "groups": [{"name": "0", "ranks": list(range(world)), "backend": "gloo"}],
                "true_clock": [int(shift[r]), float(drift[r]), t0]}
        out.append(Timeline({
            "ops": {"seq": np.arange(2 * n), "thread": np.zeros(2 * n), "name": names,
                    "flags": np.tile([0, int(OpFlag.COLLECTIVE)], n),
                    "host_begin_ns": clock(r, hb), "host_end_ns": clock(r, he)},
            "spans": {"kind": np.full(n, int(SpanKind.STEP)), "name": np.full(n, 2),
                      "thread": np.zeros(n), "depth": np.zeros(n), "number": np.arange(n),
                      "begin_ns": clock(r, steps_b), "end_ns": clock(r, done[r])},
            "collectives": {"op": np.arange(1, 2 * n, 2), "group": np.zeros(n),
                            "kind": kind, "number": np.arange(n),
                            "peer": np.where(kind == ALL, NONE, root),
                            "done_ns": clock(r, done[r])}},
            ["aten::mul", "c10d::allreduce_", "step"], meta))
    return out
