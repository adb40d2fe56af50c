"""Kernel engines: which implementation runs, and the arrays kernels share.

Every kernel comes twice: a Numba version (``@njit(cache=True)``, one pass
over the rows where it can) and a NumPy twin that computes the same result
with whole-array operations. ``engine="numba"`` or ``"numpy"`` picks one;
the tests run both on the same random inputs and demand equal results.
``engine="auto"`` (``resolve_engine``) picks by size: the NumPy twin below
``AUTO_NUMBA_ROWS`` rows, where a kernel saves milliseconds but compiling
it costs about a second the first time (Numba caches what it compiles,
next to the module or, in a read-only install, under ~/.cache/numba;
``NUMBA_CACHE_DIR`` moves it), so a small or medium Timeline compiles
nothing; once the kernels are compiled or cached (``kernels_warm``), from
``WARM_NUMBA_ROWS`` rows on.
Kernels take their columns as contiguous int64 (``as_i64``) and allocate their
per-row outputs with ``empty_i64``/``empty_f64``/``empty_bool``.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit, objmode

from ..errors import CutimelineError

__all__ = ["ENGINES", "AUTO", "AUTO_NUMBA_ROWS", "WARM_NUMBA_ROWS", "check_engine",
           "resolve_engine", "kernels_warm", "warm_probe"]

ENGINES = ("numba", "numpy")  # the two implementations of every kernel
AUTO = "auto"                 # either, by size (resolve_engine)
# Rows (ops + gpu rows, for an analysis) from which "auto" runs the compiled
# kernels on a cold cache. The twins take ~4x the kernels' time (an analysis
# of bench_analyze's Timelines: 0.44 s against 0.11 s at 10^5 ops and 10^5
# gpu rows, 1.5 s against 0.33 s at 3·10^5), while a cold start compiles for
# 17-25 s (bench_coldstart.py): below this, the twins finish first; above
# it the compile pays for itself within a few runs and is cached for all.
AUTO_NUMBA_ROWS = 1 << 19
# With the kernels compiled or cached already, from here: loading them costs
# milliseconds, and they save more than that.
WARM_NUMBA_ROWS = 1 << 15
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
    if not isinstance(engine, str) or engine not in ENGINES and engine != AUTO:
        raise CutimelineError(f"engine={engine!r} is not known; use 'auto' (by "
                              f"size), 'numba' (compiled) or 'numpy' (its "
                              f"reference twin).")
    return engine


def resolve_engine(engine: str, rows: int) -> str:
    """The engine that runs for ``rows`` rows: "numba" or "numpy" as given;
    "auto": "numba" from ``AUTO_NUMBA_ROWS`` rows, or from
    ``WARM_NUMBA_ROWS`` when the kernels are warm, else "numpy". Both give
    equal results, so the choice changes only the time taken."""
    if isinstance(engine, str) and engine == AUTO:
        big = rows >= AUTO_NUMBA_ROWS or (rows >= WARM_NUMBA_ROWS and kernels_warm())
        return "numba" if big else "numpy"
    return check_engine(engine)


_PROBE: list = []  # the kernel that stands for all (see warm_probe)


def warm_probe(kernel):
    """Decorator: ``kernel`` stands for all in ``kernels_warm`` (the interval
    merge, which every analysis runs: a run with the kernels compiled it)."""
    _PROBE[:] = [kernel]
    return kernel


def kernels_warm() -> bool:
    """Whether the kernels look compiled: the probe kernel is compiled in
    this process, or Numba's cache holds it (the others then load in
    milliseconds each, not a second)."""
    if not _PROBE:
        return False
    if _PROBE[0].signatures:
        return True
    try:
        return os.path.exists(_PROBE[0]._cache._cache_file._index_path)
    except AttributeError:  # a Numba that keeps its cache otherwise: cold
        return False


def as_i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def readonly(a, dtype=np.int64) -> np.ndarray:
    """``a`` as a contiguous read-only array (a view: no copy) for a kernel
    that only reads it. A Timeline's columns are read-only and computed
    arrays writable, and Numba compiles a kernel once per mix of the two
    (a second or more each); read-only always, it compiles once."""
    x = np.ascontiguousarray(a, dtype=dtype)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x
