"""Clock alignment: each device's event clock joined to the host clock,
with a bound on every aligned time (``aligner``), by convex hulls of the
clock-bound points (``hull``: Numba kernels and their NumPy twins)."""
