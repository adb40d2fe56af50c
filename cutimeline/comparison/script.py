"""A user's training script as ``compare``'s workload
(``ctl.compare("train.py")``, ``cutimeline compare train.py``).

A script is not one step: it sets up and runs its own loop. Each pass of
``compare`` runs the whole script as ``__main__`` (``runpy``, with
``sys.argv`` set to the script and its arguments), and its optimizer steps
are the steps: a global optimizer step post hook marks each boundary, times
it (after the pass's device sync) and calls the pass's step boundary
(``rec.step()``, ``prof.step()``). Step k lasts from boundary k-1 to
boundary k (the first from the script's start, setup included: a warm-up
step). Once ``warmup + steps`` steps have run the hook stops the script by
raising ``Enough`` (a ``BaseException``, so that the script's own ``except
Exception`` does not catch it): a script that trains for hours is compared
on its first steps. One that ends before is an error that says how many
steps it ran.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable, Sequence
from time import perf_counter_ns as _now

import numpy as np
import torch.optim.optimizer as optim

from ..errors import CutimelineError

__all__ = ["Script", "Enough"]


class Enough(BaseException):
    """Raised by the boundary hook once the pass has all its steps."""


class Script:
    """The script at ``path`` run with ``argv`` (see the module doc)."""

    def __init__(self, path: str | os.PathLike, argv: Sequence[str] = ()):
        self.path = os.fspath(path)
        if not self.path.endswith(".py") or not os.path.isfile(self.path):
            raise CutimelineError(
                f"compare({self.path!r}): give a training step function, or the path "
                f"of a Python script (.py) that exists; its optimizer steps are the "
                f"steps compared.")
        if isinstance(argv, (str, bytes)) or not all(isinstance(a, str) for a in argv):
            raise CutimelineError(f"compare(argv={argv!r}) must be a list of str: the "
                                  f"script's command-line arguments.")
        self.argv = list(argv)

    def __repr__(self) -> str:
        return f"Script({self.path!r})"

    def timed(self, warmup: int, steps: int, sync: Callable[[], None],
              boundary: Callable[[], object] | None = None) -> np.ndarray:
        """Run the script until ``warmup + steps`` optimizer steps have
        ended; the times (ns) of the last ``steps``."""
        need = warmup + steps
        ends = [0] * (need + 1)
        count = [0]

        def at_step(opt: object, args: object, kwargs: object) -> None:
            sync()
            count[0] += 1
            ends[count[0]] = _now()
            if boundary is not None:
                boundary()
            if count[0] == need:
                raise Enough

        handle = optim.register_optimizer_step_post_hook(at_step)
        saved_argv, saved_path = sys.argv, list(sys.path)
        sys.argv = [self.path, *self.argv]
        sys.path.insert(0, os.path.dirname(os.path.abspath(self.path)))
        try:
            sync()
            ends[0] = _now()
            runpy.run_path(self.path, run_name="__main__")
        except Enough:
            pass
        except SystemExit as exc:   # the script exits early: say so below
            if exc.code not in (None, 0):
                raise CutimelineError(f"{self.path} exited with status {exc.code} "
                                      f"after {count[0]} optimizer steps.") from None
        finally:
            handle.remove()
            sys.argv, sys.path[:] = saved_argv, saved_path
        if count[0] < need:
            raise CutimelineError(
                f"{self.path} ran {count[0]} optimizer steps; compare needs warmup + "
                f"steps = {warmup} + {steps} = {need} of them. Lower steps or warmup, "
                f"or let the script train longer.")
        return np.diff(np.array(ends, np.int64))[warmup:]
