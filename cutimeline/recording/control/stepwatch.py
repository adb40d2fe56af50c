"""Step boundaries seen without a recording, and the window recordings that
schedules (``schedule.py``) and on-demand captures (``ondemand.py``) run
between them.

``StepWatch`` counts the steps ``record(steps=...)`` means — every
``optimizer.step()`` ("optimizer"), every ``step()`` call ("manual"), or
optimizer steps until ``step()`` is first called ("auto") — with one
global optimizer step pre hook and one post hook: a cost per step, none per
op, and no dispatch mode. A window's ``Recorder`` is started and stopped
from inside that post hook, which installs and removes the recorder's own
optimizer hooks. torch iterates the global post hooks' OrderedDict while it
calls them, and a change to it raises on the iterator's next step unless the
hook making it was the last one; so the pre hook moves the watch's post hook
to the end (after the window's, and after any a user added meanwhile) before
every step's post hooks run. The window's post hook then ends its STEP span
before the watch stops it.

``Window`` is one ordinary recording (``Recorder``) whose STEP spans carry
the user's absolute step numbers and which reuses the first window's
self-cost model (``selfcost.measure`` costs a few ms of the user's loop; it
runs once per scheduled recording or armed trigger, not per window).
``cut`` trims a window's Timeline to its active steps.
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import CutimelineError
from ...timeline.timeline import Timeline
from ..hooks.installer import is_compiling

__all__ = ["StepWatch", "Window", "cut"]


class StepWatch:
    """The step running now (``number``, from 0) and a call of ``on_step()``
    after each boundary; installed with ``install()``, gone after ``remove()``."""

    def __init__(self, steps: str, on_step: Callable[[], None]):
        self.steps, self.on_step = steps, on_step
        self.number = 0  # the step running now: how many steps have ended
        self.manual = False  # steps="auto": step() was called, it rules from now on
        self._pre: Any = None
        self._post: Any = None

    def install(self) -> "StepWatch":
        if self.steps != "manual" and self._post is None:
            import torch.optim.optimizer as optim
            self._pre = optim.register_optimizer_step_pre_hook(self._opt_pre)
            self._post = optim.register_optimizer_step_post_hook(self._opt_post)
        return self

    def remove(self) -> None:
        for h in (self._pre, self._post):
            if h is not None:
                h.remove()
        self._pre = self._post = None

    def step(self) -> None:
        """A step ends here (``rec.step()``)."""
        self._boundary(manual=True)

    # -- the optimizer hooks --------------------------------------------------------
    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        """Keep the post hook last among the global ones (see the module doc)."""
        import torch.optim.optimizer as optim
        post = self._post
        hooks = optim._global_optimizer_post_hooks
        if post is not None and next(reversed(hooks), None) != post.id:
            post.remove()
            self._post = optim.register_optimizer_step_post_hook(self._opt_post)

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not is_compiling():
            self._boundary(manual=False)

    def _boundary(self, *, manual: bool) -> None:
        # the rules of Session.boundary, so window and watch count alike
        if self.steps == "manual" and not manual or self.steps == "optimizer" and manual:
            return
        if manual:
            self.manual = True
        elif self.manual:
            return
        self.number += 1
        self.on_step()


class Window:
    """One recording from the start of step ``first`` (made by ``make``, a
    fresh ``Recorder`` each time), its steps numbered from there. ``reuse``:
    an earlier window's self-cost meta (``Window.reuse``), or None to
    measure it at start."""

    def __init__(self, make: Callable[[], Any], first: int, *, manual: bool,
                 reuse: dict | None):
        rec = make()
        rec._first_step, rec._manual, rec._reuse = first, manual, reuse
        self.rec, self.first = rec.start(), first

    def stop(self, error: BaseException | None = None) -> Timeline:
        """The window's Timeline; ``error``: what the user's block raised
        (the recorder stops as it does under ``with``; the error is not
        raised here)."""
        if error is None:
            self.rec.stop()
        else:
            self.rec.__exit__(type(error), error, error.__traceback__)
        return self.rec.timeline

    @staticmethod
    def reuse(tl: Timeline) -> dict | None:
        """What a later window of the same recording takes instead of
        measuring the recorder's cost again (None when it measured nothing)."""
        model, entry = tl.meta.get("overhead_model"), tl.meta.get("recorder_left")
        if entry:  # a simulator's host: the prices of what no clock saw
            return {"recorder_left": dict(entry)}
        return None if not model else {
            "overhead_model": dict(model),
            "overhead_ns_per_launch": tl.meta.get("overhead_ns_per_launch")}


def cut(tl: Timeline, first: int, active: int, ended: int, meta: dict) -> Timeline | None:
    """``tl``, recorded from the start of step ``first`` until ``ended``
    steps had ended, from the start of step ``active`` on (the steps before
    are warmup), with meta ``steps`` [``active``, last step it holds]: the
    step running at the end counts when an op of it was recorded. None when
    no step from ``active`` on was recorded."""
    numbers = set(tl.step_numbers().tolist())
    last = ended - 1
    # an op after the last boundary: the step running at stop was recorded in part
    tail_from = tl.step_bounds(last)[1] if last in numbers else (
        tl.start_ns - 1 if ended == first and len(tl.ops) else None)
    partial = False
    if tail_from is not None:  # not the closing record_function op of optimizer.step()
        names = tl.decode(tl.ops["name"][tl.ops.host_begin_ns > tail_from])
        partial = any(not str(n).startswith("profiler::") for n in names)
    last += partial
    if last < active:
        return None
    if active > first:  # the warmup steps off: rows from the end of the last one on
        try:
            begin = tl.step_bounds(active - 1)[1] + 1
        except CutimelineError:  # max_ops cut the recording in warmup: nothing active
            return None
        tl = tl.slice_time(begin, max(tl.end_ns, begin) + 1)
    return tl.replace(meta={**tl.meta, "steps": [active, last], "partial_step": partial,
                            **meta})
