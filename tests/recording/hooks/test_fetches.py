"""DataLoader fetches (``recording/hooks/fetches.py``): worker processes on SimGPU's
host clock, each batch costing what its worker spent making it, queued as
DataLoader queues it, so ``num_workers`` matters as it does beside a GPU;
single-process fetches without the recorder's per-op cost."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl

from tickclock import TickClock, on_clock

META = torch.device("meta")
ITEM_CPU_NS = 2_000_000  # each item costs its worker 2 ms of CPU: 16 ms a batch of 8


class Burning(Dataset):
    """Items that cost their worker ``ITEM_CPU_NS`` of CPU time each."""

    def __len__(self) -> int:
        return 10 * 8

    def __getitem__(self, i: int):
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < ITEM_CPU_NS:
            pass
        return torch.zeros(4), i


class Ticking(Dataset):
    """Items that cost their worker ``ITEM_CPU_NS`` of the test's clock
    (``tickclock.py``; a forked worker advances its copy of it)."""

    def __init__(self, clock: TickClock):
        self.clock = clock

    def __len__(self) -> int:
        return 10 * 8

    def __getitem__(self, i: int):
        self.clock.advance(ITEM_CPU_NS)
        return torch.zeros(4), i


def _run(workers: int) -> ctl.Report:
    a = torch.empty(4096, 4096, device=META)
    data = DataLoader(Burning(), batch_size=8, num_workers=workers)
    with ctl.record(device=ctl.SimGPU("h100", tf32=False), steps="manual") as rec:
        for x, _ in data:
            x = x.to(META)
            for _ in range(3):  # ≈ 2 ms each at the fp32 peak: ≈ 6 ms of GPU a step
                a @ a
            rec.step()
    return ctl.analyze(rec.timeline)


def _later(rep: ctl.Report, col: str) -> np.ndarray:
    return np.asarray(rep.steps[col])[4:]  # after the workers' start-up


@pytest.mark.parametrize("workers", [1, 4])
def test_workers_cost_what_they_spent_on_the_simulated_clock(workers):
    rep = _run(workers)
    step = np.median(_later(rep, "duration_ns"))
    if workers == 1:  # one worker makes a batch in 16 ms: the GPU's 6 ms waits for it
        assert 14e6 <= step <= 30e6, step
        assert (_later(rep, "verdict") == "input-bound").mean() >= 0.5
    else:  # four make one every 4 ms: the GPU is the bottleneck
        assert 5e6 <= step <= 11e6, step
        assert (_later(rep, "verdict") == "GPU-bound").mean() >= 0.5


def test_a_recording_without_workers_is_untouched():
    import torch.utils.data.dataloader as dl
    before = dl._MultiProcessingDataLoaderIter._try_put_index
    with ctl.record(device=ctl.SimGPU("h100")):
        assert dl._MultiProcessingDataLoaderIter._try_put_index is not before
    assert dl._MultiProcessingDataLoaderIter._try_put_index is before
    with ctl.record(device="cpu"):  # no simulated clock: nothing patched
        assert dl._MultiProcessingDataLoaderIter._try_put_index is before


class Tokens(Dataset):
    """A tokenized row as run_glue's collate sees it: a few small CPU ops."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        pos = torch.arange(16)
        return pos * 2, (pos < i % 16).long()


class OnDevice(Dataset):
    """A dataset held on the (simulated) device: its fetches launch work."""

    def __init__(self):
        self.x = torch.empty(64, 8, device=META)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        return self.x[i] * 2


def _fetch_ops(dataset) -> list[int]:
    from cutimeline.timeline.schema import SpanKind
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        for _ in DataLoader(dataset, batch_size=8):
            pass
    tl = rec.timeline
    sp, ops = tl.spans, tl.ops
    data = (sp.kind == SpanKind.DATA) & (tl.decode(sp["name"]) == "next(DataLoader)")
    return [int(((ops.host_begin_ns >= b) & (ops.host_end_ns <= e)).sum())
            for b, e in zip(sp.begin_ns[data], sp.end_ns[data])]


def test_single_process_fetches_of_host_work_run_off_the_recorder():
    n = _fetch_ops(Tokens())
    # the first one seen whole; the others only __next__'s record_function ops
    assert n[0] > 20 and max(n[1:]) <= 2, n
    n = _fetch_ops(OnDevice())  # device work in the fetch: every op recorded
    assert all(k > 8 for k in n[:-1]), n


def test_a_fetch_keeps_its_wait_and_a_faster_host_finds_the_batch_no_sooner():
    # one worker makes a batch in 16 ms; the loop spends 3 ms of Python and
    # ≈ 6 ms of GPU a step: it waits ≈ 7–10 ms in each fetch. Each fetch's
    # span holds its wait, and the replay keeps the batch's ready time:
    # removing the Python gains nothing (the host waits longer for the
    # worker), giving the loader workers gains what the waits cost. All
    # of it on the test's clock (the worker's batches, the Python), so the
    # gains do not depend on how fast or how loaded this machine is.
    from cutimeline.timeline.schema import NONE, SpanKind
    a = torch.empty(4096, 4096, device=META)
    with on_clock(TickClock(2_000), runqueue=lambda: 0) as clock:
        # forked, whatever the platform's default: the worker inherits the clock
        data = DataLoader(Ticking(clock), batch_size=8, num_workers=1,
                          multiprocessing_context="fork")
        with ctl.record(device=ctl.SimGPU("h100", tf32=False, clock=clock),
                        steps="manual") as rec:
            for x, _ in data:
                x = x.to(META)
                a @ a
                clock.advance(3_000_000)  # Python between ops
                a @ a
                rec.step()
    tl = rec.timeline
    sp = tl.spans
    fetch = (sp.kind == SpanKind.DATA) & (tl.decode(sp["name"]) == "next(DataLoader)")
    waits = sp.number[fetch]
    assert (waits != NONE).all() and (waits <= sp.end_ns[fetch] - sp.begin_ns[fetch]).all()
    assert np.median(waits[4:]) > 3e6, waits  # the worker is the bottleneck
    preds = {p.edit.name: p for p in ctl.analyze(tl).what_if()}
    assert preds["host"].gain < 0.05, preds["host"].gain
    assert preds["data"].gain > 0.3, preds["data"].gain
    # without the waits (as an imported trace has it), the Python seemed to cost
    no_waits = tl.replace(spans=sp.replace(number=np.where(fetch, NONE, sp.number)))
    before = {p.edit.name: p for p in ctl.analyze(no_waits).what_if()}
    assert before["host"].gain > 0.1, before["host"].gain
