"""Clock alignment: each device's event clock joined to the host clock,
with a bound on every aligned time (``aligner``: a Timeline's bound points
and the fit applied to its events), one clock line fitted between lower and
upper bounds (``clockfit``), by convex hulls of the clock-bound points
(``hull``: Numba kernels and their NumPy twins)."""
