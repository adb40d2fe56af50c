"""Numeric kernels any stage may use: intervals (grouping, union, gaps,
lookups), sorted runs, quantiles per group, dense ids. Every Numba kernel
has a NumPy twin that gives equal results."""
