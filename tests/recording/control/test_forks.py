"""A process forked while recording: DataLoader workers and plain forks
record nothing, run untouched, and leave the parent's recording whole."""

import multiprocessing
import os
import threading

import pytest
import torch
import torch.nn.modules.module as nn_module
import torch.utils.data as tud

import cutimeline as ctl

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")


def _untouched() -> list[int]:
    """What a process shows of a recorder: 0 everywhere when none is there
    (modes on this thread's dispatch stack, global module hooks, patched
    DataLoader and Thread methods)."""
    from cutimeline.recording import recorder
    return [torch._C._len_torch_dispatch_stack(), len(nn_module._global_forward_pre_hooks),
            int(tud.dataloader._BaseDataLoaderIter.__dict__["__next__"] is not _NEXT),
            int(threading.Thread.__dict__["start"] is not _START),
            int(recorder._ACTIVE is not None)]


_NEXT = tud.dataloader._BaseDataLoaderIter.__dict__["__next__"]
_START = threading.Thread.__dict__["start"]


class Items(tud.Dataset):
    """Items made with torch ops, erfinv among them, which nothing else in
    these tests runs; each also says what its worker saw of a recorder."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.special.erfinv(torch.tanh(torch.rand(8, generator=g) * 1.01 + 0.1))
        with ctl.span("in a worker"):  # nothing there to record it
            x = x.clamp(-3, 3) * 2
        return x, torch.tensor(_untouched())


def _epoch():
    loader = tud.DataLoader(Items(), batch_size=4, num_workers=2,
                            multiprocessing_context="fork")
    return [(x, seen) for x, seen in loader]


def test_dataloader_workers_record_nothing_and_their_items_are_unchanged():
    ref = _epoch()
    with ctl.record(device="cpu", measure=False) as rec:
        got = _epoch()
        torch.stack([x for x, _ in got]).sum()  # the parent's own ops
    assert len(got) == len(ref) == 4
    for (x, seen), (x_ref, seen_ref) in zip(got, ref):
        assert torch.equal(x, x_ref)
        assert seen.tolist() == seen_ref.tolist() == [[0] * 5] * 4  # no recorder in a worker
    tl = rec.timeline
    names = list(tl.decode(tl.ops["name"]))
    assert "aten::erfinv" not in names and "aten::clamp" not in names
    assert "aten::sum" in names  # the parent still records
    spans = tl.to_pandas("spans")
    assert "in a worker" not in set(spans.name)
    assert list(spans.name).count("next(DataLoader)") == 5  # 4 batches + StopIteration


def _in_child(check) -> None:
    """In a forked child: leave with status 0 if ``check()`` holds, 1 if
    not, 2 if it raised (never return into the test runner)."""
    try:
        code = 0 if check() else 1
    except BaseException:
        code = 2
    os._exit(code)


def _status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_fork_that_leaves_the_recorded_block_gets_an_empty_timeline():
    parent = os.getpid()
    pid = None
    try:
        with ctl.record(device="cpu", measure=False) as rec:
            x = torch.ones(3) + 1
            pid = os.fork()
            y = torch.special.erfinv(x / 4)  # both processes run it
            with ctl.span("after the fork"):
                rec.step()
    finally:
        if os.getpid() != parent:  # the child, out of the block it forked in
            def check():
                tl = rec.timeline
                own = ctl.record(device="cpu", measure=False)
                with own:  # recording anew in the child works
                    torch.ones(2) * 3
                return (tl.meta.get("forked") and len(tl.ops) == len(tl.spans) == 0
                        and _untouched() == [0] * 5
                        and len(own.timeline.ops) == 2 and not own.timeline.meta.get("forked")
                        and torch.equal(y, torch.special.erfinv(torch.full((3,), 0.5))))
            _in_child(check)
    assert _status(pid) == 0
    tl = rec.timeline
    names = list(tl.decode(tl.ops["name"]))
    assert names[-2:] == ["aten::div.Tensor", "aten::erfinv"] and "forked" not in tl.meta
    assert "after the fork" in set(tl.to_pandas("spans").name)
    assert _untouched() == [0] * 5


def _report():
    os._exit(10 + sum(_untouched()))


def test_a_process_forked_from_a_recorded_thread_is_untouched():
    ctx = multiprocessing.get_context("fork")
    codes = []

    def work():
        torch.ones(2) + 1  # this thread records
        p = ctx.Process(target=_report)
        p.start()
        p.join(30)
        codes.append(p.exitcode)

    with ctl.record(device="cpu", measure=False) as rec:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert codes == [10]  # nothing of the recorder in the child
    assert "aten::add.Tensor" in list(rec.timeline.decode(rec.timeline.ops["name"]))
