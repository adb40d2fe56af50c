"""Step boundaries without a recording: the steps= rules, the post hook kept
last among torch's global ones, hooks removed; windows cut to active steps."""

import pytest
import torch
import torch.optim.optimizer as optim

import cutimeline as ctl
from cutimeline.recording.recorder import Recorder
from cutimeline.recording.control.stepwatch import StepWatch, Window, cut


def opt():
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    return torch.optim.SGD([p], lr=0.1)


@pytest.mark.parametrize("steps, want", [("optimizer", [1, 2, 2, 3]), ("manual", [0, 0, 1, 1]),
                                         ("auto", [1, 2, 3, 3])])
def test_boundaries_follow_the_steps_option(steps, want):
    seen = []
    watch = StepWatch(steps, lambda: seen.append(watch.number)).install()
    o = opt()
    try:
        got = []
        o.step()
        got.append(watch.number)
        o.step()
        got.append(watch.number)
        watch.step()       # "auto": from here only step() counts
        got.append(watch.number)
        o.step()
        got.append(watch.number)
    finally:
        watch.remove()
    assert got == want and seen == sorted(set(want) - {0})


def test_post_hook_kept_last_and_removed():
    before = (len(optim._global_optimizer_pre_hooks), len(optim._global_optimizer_post_hooks))
    watch = StepWatch("optimizer", lambda: None).install()
    later = optim.register_optimizer_step_post_hook(lambda *a: None)
    try:
        assert next(reversed(optim._global_optimizer_post_hooks)) == later.id
        opt().step()   # its pre hook moves the watch's post hook to the end
        assert next(reversed(optim._global_optimizer_post_hooks)) == watch._post.id
        assert watch.number == 1
    finally:
        later.remove()
        watch.remove()
    assert (len(optim._global_optimizer_pre_hooks),
            len(optim._global_optimizer_post_hooks)) == before


def test_window_numbers_steps_from_first_and_cut_drops_warmup():
    w = Window(lambda: Recorder(None, disabled=False, **_options()), 7, manual=True,
               reuse=None)
    for _ in range(3):
        torch.ones(3).mul(2)
        w.rec.step()           # steps 7 (warmup), 8, 9
    tl = w.stop()
    assert tl.step_numbers().tolist() == [7, 8, 9]
    kept = cut(tl, 7, 8, 10, {"note": 1})
    assert kept.step_numbers().tolist() == [8, 9] and kept.meta["steps"] == [8, 9]
    assert kept.meta["note"] == 1 and not kept.meta["partial_step"]
    assert len(kept.ops) == 2 * len(tl.ops) // 3
    assert cut(tl, 7, 10, 10, {}) is None  # no active step was recorded


def _options():
    return dict(max_ops=10_000, modules=True, threads=True, steps="auto", measure=False,
                timing="events", out_dir=None, stack=False, memory=False)


def test_reuse_copies_the_model():
    assert Window.reuse(ctl.Timeline()) is None
    model = {"op_ns": 100}
    got = Window.reuse(ctl.Timeline(meta={"overhead_model": model,
                                          "overhead_ns_per_launch": 5}))
    assert got == {"overhead_model": model, "overhead_ns_per_launch": 5}
    assert got["overhead_model"] is not model
