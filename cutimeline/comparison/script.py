"""A user's training script as ``compare``'s workload
(``ctl.compare("train.py")``, ``cutimeline compare train.py``).

A script is not one step: it sets up and runs its own loop. Each pass of
``compare`` runs the whole script as ``__main__`` and its optimizer steps
are the steps, as ``recording/script.py``'s ``Script`` runs it and finds
them (``cutimeline record`` shares it). At each step's end the pass's
device is synchronized, the boundary timed and the pass's step boundary
called (``rec.step()``, ``prof.step()``). Step k lasts from boundary k-1
to boundary k (the first from the script's start, setup included: a
warm-up step). Once ``warmup + steps`` steps have run the script is
stopped (``Enough``): a script that trains for hours is compared on its
first steps. One that ends before is an error that says how many steps it
ran.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter_ns as _now

import numpy as np

from ..errors import CutimelineError
from ..recording import script

__all__ = ["Script", "Enough"]

Enough = script.Enough


class Script(script.Script):
    """The script at ``path`` run with ``argv``, timed step by step."""

    def timed(self, warmup: int, steps: int, sync: Callable[[], None],
              boundary: Callable[[], object] | None = None) -> np.ndarray:
        """Run the script until ``warmup + steps`` optimizer steps have
        ended; the times (ns) of the last ``steps``."""
        need = warmup + steps
        ends = [0] * (need + 1)
        count = [0]

        def at_step(n: int) -> None:
            if n > need:  # the script caught Enough and went on
                raise Enough
            sync()
            count[0], ends[n] = n, _now()
            if boundary is not None:
                boundary()
            if n == need:
                raise Enough

        sync()
        ends[0] = _now()
        try:
            ran = self.run(at_step)
        except SystemExit as exc:  # the script exits early: say so
            raise CutimelineError(f"{self.name} exited with status {exc.code} after "
                                  f"{count[0]} optimizer steps.") from None
        if ran < need:
            raise CutimelineError(
                f"{self.name} ran {ran} optimizer steps; compare needs warmup + "
                f"steps = {warmup} + {steps} = {need} of them. Lower steps or warmup, "
                f"or let the script train longer.")
        return np.diff(np.array(ends, np.int64))[warmup:]
