"""Kernel engines: which implementation runs, and the arrays kernels share.

Every kernel comes twice: a Numba version (``@njit(cache=True)``, one pass
over the rows where it can) and a NumPy twin that computes the same result
with whole-array operations. ``engine="numba"`` or ``"numpy"`` picks one;
the tests run both on the same random inputs and demand equal results.
Kernels take their columns as contiguous int64 (``_i64``) and allocate their
per-row outputs with ``empty_i64``/``empty_f64``/``empty_bool``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, objmode

from ..errors import CutimelineError

__all__ = ["ENGINES", "check_engine"]

ENGINES = ("numba", "numpy")
I64_MAX = np.iinfo(np.int64).max


# -- per-row outputs of the kernels --------------------------------------------------
# An array Numba allocates lies on 4 KB pages; NumPy asks the kernel for huge
# pages (madvise) for large ones. Between the allocations and frees of an
# analysis, a fresh 8 MB output then costs ~2 ms of page faults made in a
# kernel and ~0.3 ms made by NumPy, more than many of the passes that fill
# them: kernels take their large outputs from NumPy (one call into Python,
# ~1 µs, so small ones stay Numba's).

_BIG = 1 << 15


@njit(cache=True)
def empty_i64(n):
    if n < _BIG:
        return np.empty(n, np.int64)
    with objmode(out="int64[:]"):
        out = np.empty(n, np.int64)
    return out


@njit(cache=True)
def empty_f64(n):
    if n < _BIG:
        return np.empty(n, np.float64)
    with objmode(out="float64[:]"):
        out = np.empty(n, np.float64)
    return out


@njit(cache=True)
def empty_bool(n):
    if n < _BIG:
        return np.empty(n, np.bool_)
    with objmode(out="boolean[:]"):
        out = np.empty(n, np.bool_)
    return out


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise CutimelineError(f"engine={engine!r} is not known; use 'numba' "
                              f"(compiled) or 'numpy' (its reference twin).")
    return engine


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)
