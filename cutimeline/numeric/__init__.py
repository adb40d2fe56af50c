"""Numeric kernels any stage may use: engines (the Numba/NumPy switch and
kernel outputs), row orders (grouping, sortedness), intervals (union, gaps,
coverage), sorted runs, quantiles per group, dense ids, what a time
column holds (``columns``: min, max, NONE, sorted, read once a Table), and
the notice that kernels compile. Every Numba kernel has a NumPy twin that gives equal
results; engine "auto" runs the twins for small inputs."""
