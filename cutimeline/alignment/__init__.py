"""Clock alignment: each device's event clock joined to the host clock,
with a bound on every aligned time (``aligner``: a Timeline's bound points
and the fit applied to its events, ``align``), one clock line fitted between
lower and upper bounds (``clockfit``), by convex hulls of the clock-bound
points (``hull``: Numba kernels and their NumPy twins).

``align(tl)`` aligns a Timeline that is not yet (``ctl.record`` aligns at
stop; a torch.profiler trace is on the host clock already)."""

from .aligner import align

__all__ = ["align"]
