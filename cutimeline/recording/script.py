"""A user's script run unedited, as ``python train.py ARG ...`` runs it, and
its steps; ``record_script`` records some of them (``cutimeline record``).

    tl = ctl.record_script("train.py", ["--lr", "0.1"], device="sim", steps=5)

``Script`` runs a script as ``__main__`` (``runpy``: ``sys.argv`` the
script and its arguments, the script's folder first on ``sys.path``), or a
module as ``python -m`` does (``run_module`` with ``alter_sys``, the
working folder first on ``sys.path``), and puts ``sys.argv`` and
``sys.path`` back after. Its steps: each ``optimizer.step()`` ends one
(a ``StepWatch``, whose global post hook runs after every other), or with
``steps_from=NAME`` each end of a ``record_function`` range named NAME or
NAME#... (``ctl.load(steps_from=)``'s rule), seen by wrapping
``record_function.__exit__`` for the run: a cost per range, none per op.
``ctl.compare("train.py")`` times the same steps (``comparison/script.py``).

``record_script`` records the script's first steps after a warm-up
(``control/firststeps.py``): from its start, so that a script with no
step at all is recorded whole; at the end of step ``skip`` (default 1)
that recording is dropped and a fresh one records the next ``steps``
steps, or fewer when ``seconds`` have passed at a step's end. Then the
script is stopped by raising ``Enough`` from the step's hook — a
``BaseException``, which the script's ``except Exception`` does not catch
— or, with ``keep_going``, runs on unrecorded. A script that ends after
``skip`` steps or fewer (at least one) is an error that says how many it
ran; one that ends inside the window gives the steps it held. On a
``SimGPU`` the whole run is inside ``gpu.as_cuda()``: the script's CUDA
code runs on the simulated GPU, and its reads (``loss.item()``) work
outside the window too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..devices.sim import SimGPU
from ..errors import CutimelineError
from ..timeline.timeline import Timeline
from .control.firststeps import FirstSteps
from .control.stepwatch import StepWatch
from .devicespec import recording_device
from .hooks.installer import is_compiling
from .ranks import RANK_FILE, rank_meta, write_rank
from .recorder import record

__all__ = ["record_script", "run_recorded", "Recorded", "Script", "Enough", "ranked",
           "saved_path"]


class Enough(BaseException):
    """Raised by a step's hook to stop the script: its steps are recorded."""


class Script:
    """The script at ``path`` (or the module ``module``) run with ``argv``,
    whose steps end at optimizer steps or at the ends of the ranges named
    ``steps_from`` (see the module doc)."""

    def __init__(self, path: str | os.PathLike | None = None, argv: Sequence[str] = (), *,
                 module: str | None = None, steps_from: str | None = None):
        self.path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
        self.module = module
        if (path is None) == (module is None):
            raise CutimelineError(
                "Give a script to run: the path of a Python script (.py), or module="
                "'pkg.mod' to run a module as `python -m pkg.mod` does (on the command "
                "line: SCRIPT.py or -m MODULE), not both.")
        if self.path is not None and (not isinstance(self.path, str)
                                      or not self.path.endswith(".py")
                                      or not os.path.isfile(self.path)):
            raise CutimelineError(
                f"{self.path!r} is not a Python script (.py) that exists; give the "
                f"path of one.")
        if module is not None:
            self._find(module)
        if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
            raise CutimelineError(f"argv={argv!r} must be a list of str: the script's "
                                  f"command-line arguments.")
        if steps_from is not None and (not isinstance(steps_from, str)
                                       or not steps_from.strip()):
            raise CutimelineError(f"steps_from={steps_from!r} must name the "
                                  f"record_function ranges that end each step: a "
                                  f"non-empty str such as 'train_step'.")
        self.argv, self.steps_from = list(argv), steps_from
        self.name = self.path if module is None else f"-m {module}"

    def __repr__(self) -> str:
        return f"Script({self.name!r})"

    def steps(self, n: int) -> str:
        """``n`` steps in words: "1 optimizer step", "3 steps (ends of 'fwd')"."""
        if self.steps_from is None:
            return f"{n} optimizer step{'s' * (n != 1)}"
        return f"{n} step{'s' * (n != 1)} (ends of {self.steps_from!r})"

    def _folder(self) -> str:
        """What Python puts first on ``sys.path`` for this script."""
        if self.module is not None:
            return os.getcwd()
        return os.path.dirname(os.path.abspath(self.path))

    def _find(self, module: str) -> None:
        """Check that ``python -m module`` would find something to run
        (importing its parent packages, as ``python -m`` does)."""
        if not isinstance(module, str) or not module.strip() or module.startswith("."):
            raise CutimelineError(f"module={module!r} must name a module to run as "
                                  f"`python -m` does, such as 'pkg.train'.")
        sys.path.insert(0, self._folder())
        try:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.submodule_search_locations is not None:
                spec = importlib.util.find_spec(module + ".__main__")  # a package
        except (ImportError, ValueError):
            spec = None
        finally:
            sys.path.pop(0)
        if spec is None:
            raise CutimelineError(
                f"No module named {module!r} to run (or, for a package, no "
                f"{module}.__main__); check the name, and run from the folder that "
                f"holds it or put that folder on PYTHONPATH.")

    def run(self, on_step: Callable[[int], None],
            mark: Callable[[], None] | None = None) -> int:
        """Run the script to its end, calling ``on_step(n)`` when its step
        ``n`` (from 1) has ended, and ``mark()`` before, at the end of a
        ``steps_from`` range (the recorder's step there); how many steps
        ended. ``on_step`` may stop the script by raising ``Enough``. What
        the script raises propagates, but ``SystemExit`` with status 0."""
        watch = StepWatch("optimizer" if self.steps_from is None else "manual",
                          lambda: on_step(watch.number))
        saved_argv, saved_path = sys.argv, list(sys.path)
        sys.argv = [self.path or self.module, *self.argv]
        sys.path.insert(0, self._folder())
        try:
            with self._range_ends(watch, mark):
                watch.install()
                if self.module is None:
                    runpy.run_path(self.path, run_name="__main__")
                else:
                    runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        except Enough:
            pass
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
        finally:
            watch.remove()
            sys.argv, sys.path[:] = saved_argv, saved_path
        return watch.number

    @staticmethod
    def frames(tb: Any) -> Any:
        """The frames of traceback ``tb`` below runpy's, where the script's
        own begin (as Python would show them); ``tb`` when runpy is not in it."""
        def in_runpy(at: Any) -> bool:  # its file may be "<frozen runpy>"
            return at.tb_frame.f_globals.get("__name__") == "runpy"

        at = tb
        while at is not None and not in_runpy(at):
            at = at.tb_next
        if at is None:
            return tb
        while at is not None and in_runpy(at):
            at = at.tb_next
        return at

    @contextlib.contextmanager
    def _range_ends(self, watch: StepWatch, mark: Callable[[], None] | None) -> Iterator[None]:
        """With ``steps_from``: a step ends as each range of that name ends
        (``record_function.__exit__`` wrapped, and put back after)."""
        name = self.steps_from
        if name is None:
            yield
            return
        from torch.autograd.profiler import record_function
        leave = record_function.__dict__["__exit__"]

        def __exit__(rf: Any, exc_type: Any, *rest: Any) -> Any:
            out = leave(rf, exc_type, *rest)
            label = getattr(rf, "name", None)
            if exc_type is None and isinstance(label, str) and (
                    label == name or label.startswith(name + "#")) and not is_compiling():
                if mark is not None:
                    mark()
                watch.step()
            return out

        record_function.__exit__ = __exit__
        try:
            yield
        finally:
            record_function.__exit__ = leave


def ranked() -> bool:
    """Whether this process is one rank of several (torchrun's ``WORLD_SIZE``)."""
    return rank_meta()["world_size"] > 1


def saved_path(out: str | os.PathLike) -> str:
    """The file ``record_script(out=out)`` writes: ``out``, or under
    torchrun ``out/rank-<r>.ctl``."""
    out = os.fspath(out)
    return os.path.join(out, RANK_FILE.format(rank=rank_meta()["rank"])) if ranked() \
        else out


def _checked_out(out: Any) -> str | None:
    """``out`` checked before the script starts (its folder made under torchrun)."""
    if out is None:
        return None
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise CutimelineError(f"record_script(out={out!r}) must be a path: a str or "
                              f"os.PathLike.")
    out = os.fspath(out)
    if ranked():
        if os.path.exists(out) and not os.path.isdir(out):
            raise CutimelineError(f"{out!r} is a file; under torchrun each rank writes "
                                  f"rank-<r>.ctl into a folder: give one.")
        return out
    folder = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out) or not os.path.isdir(folder):
        raise CutimelineError(
            f"{out!r} cannot take the recording: " + (
                "it is a folder" if os.path.isdir(out) else
                f"its folder {folder!r} does not exist") +
            "; give the path of a .ctl file in a folder that exists.")
    return out


def _whole_number(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        flag = "--" + name.replace("_", "-")
        raise CutimelineError(f"{name}={value!r} ({flag}) must be a whole number of "
                              f"steps ≥ {least}.")


def record_script(path: str | os.PathLike | None = None, argv: Sequence[str] = (), *,
                  module: str | None = None, device: Any = "auto", skip: int = 1,
                  steps: int = 10, steps_from: str | None = None, stack: bool = False,
                  memory: bool = False, keep_going: bool = False,
                  seconds: float | None = None,
                  out: str | os.PathLike | None = None) -> Timeline:
    """Run a training script unedited and record ``steps`` of its steps
    (see the module doc); the Timeline (meta ``steps`` [first, last],
    ``script``, ``script_argv``; a script with no step: the whole run).

    ``path``: the script (.py), run with ``argv`` as its arguments; or
    ``module``: a module run as ``python -m module`` runs it. ``device``:
    as ``record(device=)`` takes it — "auto", "cpu", "cuda", "cuda:N",
    "sim" (a simulated H100), "sim:PROFILE" ("sim:a100") or a Device; on
    a SimGPU the script's CUDA code runs on it (``SimGPU.as_cuda``).
    ``skip``: steps run unrecorded first (≥ 0). ``steps``: steps recorded
    (≥ 1). ``steps_from``: a step ends where a
    ``torch.profiler.record_function(steps_from)`` range ends, instead of
    at ``optimizer.step()``. ``stack``, ``memory``: as ``record``'s.
    ``keep_going``: after the recorded steps the script runs to its end
    (else it is stopped there). ``seconds``: stop recording at the first
    step's end after this long (seconds > 0, from the recording's start
    after the skipped steps). ``out``: save the Timeline there (a ``.ctl``
    file; under torchrun, ``WORLD_SIZE`` > 1, a folder that gets this
    rank's ``rank-<r>.ctl``, as ``ctl.merge`` reads them) — also when
    the script fails: what was recorded up to the failure is saved before
    its exception propagates, unchanged (a ``SystemExit`` with a status
    other than 0 and ``KeyboardInterrupt`` too). A script that ends after
    its first ``skip`` steps or fewer, but at least one, is a
    ``CutimelineError`` and nothing is saved. Everything is checked before
    the script starts. With ``CUTIMELINE_DISABLE=1`` the script runs
    unrecorded, the Timeline is empty and nothing is saved.
    """
    run = run_recorded(path, argv, module=module, device=device, skip=skip, steps=steps,
                       steps_from=steps_from, stack=stack, memory=memory,
                       keep_going=keep_going, seconds=seconds, out=out)
    if run.error is not None:
        raise run.error
    return run.timeline


@dataclass(frozen=True)
class Recorded:
    """What ``run_recorded`` gives: the ``timeline`` (saved to ``saved``,
    a path, when ``out`` was given), the ``error`` the script raised (None:
    it ended or was stopped), the ``script`` and its ``recording``."""

    timeline: Timeline
    error: BaseException | None
    script: Script
    recording: FirstSteps
    saved: str | None

    def said(self) -> str:
        """What was recorded, in a line: "recorded 10 optimizer steps of
        train.py (steps 1–10) on SimGPU h100 (simulated)"."""
        tl, s, run = self.timeline, self.script, self.recording
        where = f" on {tl.meta['device_name']}" if tl.meta.get("device_name") else \
            " (host rows only: no GPU here; device 'sim' simulates one)"
        if "steps" not in tl.meta:
            none = "no optimizer step" if s.steps_from is None else \
                f"no range named {s.steps_from!r}"
            return f"recorded the whole run of {s.name} ({none} ended){where}"
        numbers = tl.step_numbers()  # whole steps: not the one running at the end
        k, first, last = len(numbers), numbers[0], numbers[-1]
        why = "" if run.stopped_by == "steps" else \
            f"; seconds={run.limit_ns / 1e9:g} (--seconds) reached" \
            if run.stopped_by == "seconds" else \
            f"; the script ended after {run.ended}, {k} of the {run.steps} asked for"
        held = f"step {first}" if first == last else f"steps {first}–{last}"
        return f"recorded {s.steps(k)} of {s.name} ({held}){where}{why}"

    def ending(self) -> tuple[int, str]:
        """How the script failed: the exit status Python would give (130
        on Ctrl-C) and a line that says so, and where what was recorded went."""
        exc, name = self.error, self.script.name
        after = f"after {self.script.steps(self.recording.ended)}" + (
            f"; wrote {self.saved}: what was recorded up to there" if self.saved else "")
        if isinstance(exc, KeyboardInterrupt):
            return 130, f"interrupted {after}"
        if isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else 1
            return code, f"{name} exited with status {code} {after}"
        return 1, f"{name} raised {type(exc).__name__} {after}"


def run_recorded(path: str | os.PathLike | None = None, argv: Sequence[str] = (), *,
                 module: str | None = None, device: Any = "auto", skip: int = 1,
                 steps: int = 10, steps_from: str | None = None, stack: bool = False,
                 memory: bool = False, keep_going: bool = False,
                 seconds: float | None = None,
                 out: str | os.PathLike | None = None) -> Recorded:
    """``record_script``'s work, with what the script raised returned, not
    raised (``cutimeline record`` reports it as the script's)."""
    script = Script(path, argv, module=module, steps_from=steps_from)
    _whole_number("skip", skip, 0)
    _whole_number("steps", steps, 1)
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(
            seconds, (int, float)) or not 0 < seconds < float("inf")):
        raise CutimelineError(f"seconds={seconds!r} (--seconds) must be a number of "
                              f"seconds > 0, or None for no limit.")
    for name, flag in (("stack", stack), ("memory", memory), ("keep_going", keep_going)):
        if not isinstance(flag, bool):
            raise CutimelineError(f"record_script({name}={flag!r}) must be True or False.")
    target = _checked_out(out)
    dev = recording_device(device, resolve=True, where="device=... (--device)")
    mode = "optimizer" if steps_from is None else "manual"
    run = FirstSteps(lambda: record(device="cpu" if dev is None else dev, steps=mode,
                                    stack=stack, memory=memory), skip, steps, seconds)

    def at_step(n: int) -> None:
        if run.step(n) and not keep_going:  # recorded: the script is stopped
            raise Enough

    meta: dict[str, Any] = {"script": script.name, "script_argv": script.argv}
    if steps_from is not None:  # as ctl.load(steps_from=) says it
        meta.update(steps_from=steps_from, steps_rule="steps_from")
    error: BaseException | None = None
    # (the mapping's entry measures its own cost per call: the first call of
    # a function mode imports torch._dynamo, about 2 s, there and not later)
    with dev.as_cuda() if isinstance(dev, SimGPU) else contextlib.nullcontext():
        run.open()
        try:
            script.run(at_step, run.mark)
        except BaseException as exc:  # the script's
            error = exc
        tl = run.finish(error)
    if tl is None:
        raise CutimelineError(
            f"{script.name} ran {script.steps(run.ended)} and ended before the first "
            f"recorded one: skip={skip} (--skip) leaves the first {skip} unrecorded. "
            f"Give a smaller skip, or let the script run longer.")
    saved = None
    if target is not None and ranked():
        meta.update(rank_meta())
    tl = tl.replace(meta={**tl.meta, **meta})
    if target is not None and not tl.meta.get("disabled"):
        if ranked():
            os.makedirs(target, exist_ok=True)
            tl = write_rank(tl, target, error)
        else:
            tl.save(target)
        saved = saved_path(target)
    return Recorded(tl, error, script, run, saved)
