"""hooks/gcpauses.py: on a simulated host, Python's collections leave the
virtual clock, except those the program asks for and those that start in
the recorder's or the simulator's own code."""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.recording.hooks.gcpauses import Collections


def _gap_between_launches(tl: ctl.Timeline) -> int:
    """Virtual host time from the end of the first launch to the begin of
    the second (the program's code between them)."""
    ops = tl.ops
    launched = np.isin(ops["seq"], tl.gpu["op"])
    first, second = np.flatnonzero(launched)[:2]
    return int(ops["host_begin_ns"][second] - ops["host_end_ns"][first])


def _record(between) -> tuple[ctl.Timeline, int]:
    """Two launches on a SimGPU with ``between()`` run between them; the
    Timeline and the real time ``between`` took."""
    x = torch.ones(8, device="meta")
    with ctl.record(device=ctl.SimGPU(seed=0), modules=False) as rec:
        x = x + 1
        t0 = time.perf_counter_ns()
        between()
        real = time.perf_counter_ns() - t0
        x = x + 1
    return rec.timeline, real


@pytest.fixture
def heap():
    """300,000 live lists: a full collection walks them all (tens of ms)."""
    heap = [[] for _ in range(300_000)]
    yield heap
    del heap


def test_automatic_collections_in_the_programs_code_leave_the_simulated_host():
    # 200,000 new lists kept alive: hundreds of collections (how long they
    # take depends on the heap: 5 ms in a test worker, 300 ms in a fresh
    # process whose full collections walk torch's and transformers' objects)
    tl, real = _record(lambda: [[] for _ in range(200_000)])
    given = tl.meta["recorder_left"]
    assert given["gc_collections"] >= 10 and 0 < given["gc_ns"] < real, (given, real)
    # the stretch between the launches is the program's allocations alone;
    # kept, the collections would leave it at ``real`` less a few µs
    assert _gap_between_launches(tl) <= real - 0.9 * given["gc_ns"]


def test_a_collection_the_program_asks_for_stays_its_own(heap):
    original = gc.collect
    gc.disable()
    try:
        tl, real = _record(lambda: gc.collect())
    finally:
        gc.enable()
    assert tl.meta["recorder_left"]["gc_collections"] == 0
    assert _gap_between_launches(tl) >= 0.5 * real
    assert gc.collect is original and not any(isinstance(c, Collections) for c in gc.callbacks)


def test_a_collection_started_in_the_recorders_or_the_simulators_code_is_not_given_back():
    code = "c('start', {'generation': 0}); c('stop', {'generation': 0})"
    for module, given in (("cutimeline.recording.opstream", False),
                          ("cutimeline.devices.sim.gpu", False),
                          ("cutimeline.integrations.wandb", True), ("train", True)):
        lost = []
        c = Collections(lambda ns: lost.append(ns) or ns)
        exec(code, {"__name__": module, "c": c})  # the frame that set it off
        assert len(lost) == c.n == int(given), module
        assert c.remove() == {"gc_collections": c.n, "gc_ns": sum(lost)}


def test_a_collection_inside_a_simulated_launch_lasts_the_launchs_modelled_cost():
    gpu = ctl.SimGPU(seed=0)
    loc = gpu._local
    gpu.recorder_work(1000)
    assert loc.discount == 1000
    loc.mark = (0, 0)  # SimGPU.begin's: a launch is being dispatched
    try:
        gpu.recorder_work(5000)
    finally:
        loc.mark = None
    assert loc.discount == 1000


def test_a_real_host_keeps_its_collections():
    n = len(gc.callbacks)
    with ctl.record(device="cpu", measure=False) as rec:
        assert len(gc.callbacks) == n
        torch.ones(4) + 1
    assert "recorder_left" not in rec.timeline.meta


def test_a_ctrl_c_raised_inside_the_collections_callback_reaches_the_program():
    """A signal that comes during a collection has its handler run in the
    callback; the collector drops what a callback raises, so the recording
    delivers a KeyboardInterrupt again, and the program sees it."""
    sent = []

    def interrupted(ns):  # SIGINT's handler, run inside the callback (main thread only)
        if not sent and threading.current_thread() is threading.main_thread():
            sent.append(ns)
            raise KeyboardInterrupt
        return 0

    x = torch.ones(8, device="meta")
    hook = sys.unraisablehook
    # Ctrl-C's own handler: a test before this one in the worker may have set another
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with ctl.record(device=ctl.SimGPU(seed=0), modules=False, measure=False):
                c, = (c for c in gc.callbacks if isinstance(c, Collections))
                c.lost = interrupted
                x = x + 1
                end = time.monotonic() + 10
                while time.monotonic() < end:  # collections until one is interrupted,
                    if not sent:               # then time for the interrupt to land
                        [[] for _ in range(2_000)]
                    time.sleep(0.001)
    finally:
        signal.signal(signal.SIGINT, old)
    assert sent and sys.unraisablehook is hook
    assert not any(isinstance(c, Collections) for c in gc.callbacks)
