"""Engines: "auto" runs the NumPy twins below the size threshold (no kernel
runs, so none compiles) and the Numba kernels from it, with equal results."""

import os
import subprocess
import sys

import numpy as np
import pytest

from cutimeline.errors import CutimelineError
from cutimeline.numeric import engines, ids, intervals as iv, ordering, quantiles, runs
from cutimeline.timeline.schema import NONE


def test_resolve_engine_by_size(monkeypatch):
    monkeypatch.setattr(engines, "AUTO_NUMBA_ROWS", 100)
    monkeypatch.setattr(engines, "WARM_NUMBA_ROWS", 10)
    for warm, medium in ((False, "numpy"), (True, "numba")):
        monkeypatch.setattr(engines, "kernels_warm", lambda: warm)
        assert engines.resolve_engine("auto", 9) == "numpy"
        assert engines.resolve_engine("auto", 10) == engines.resolve_engine("auto", 99) == medium
        assert engines.resolve_engine("auto", 100) == "numba"
    for engine in engines.ENGINES:  # as asked, whatever the size
        assert engines.resolve_engine(engine, 0) == engine
        assert engines.resolve_engine(engine, 10**9) == engine
    with pytest.raises(CutimelineError, match="engine='fast' is not known; use 'auto'"):
        engines.resolve_engine("fast", 5)
    assert engines.check_engine("auto") == "auto"


def _rows(n=300, seed=0):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, n)
    begin = rng.integers(0, 5000, n)
    end = begin + rng.integers(0, 80, n)
    launch = np.where(rng.random(n) < 0.2, NONE, begin - rng.integers(0, 50, n))
    order, starts = ordering.group_order(group, begin, 3, engine="numpy")
    return group, begin, end, launch, order, starts


# (module, its kernels, a call through the public function with engine=e)
def _calls():
    group, begin, end, launch, order, starts = _rows()
    sb, se = iv.union(begin, end, engine="numpy")
    t = np.sort(begin)
    v = begin[order]
    return [
        (iv, ["_merge_nb"], lambda e: iv.merge(begin, end, launch, order, starts, 0, 6000, e)),
        (iv, ["_merge_nb"], lambda e: iv.merge_lean(begin, end, launch, order, starts, 0, 6000,
                                                    e)),
        (iv, ["_union_nb", "is_sorted_nb"], lambda e: iv.union(begin, end, e)),
        (iv, ["_union_nb"], lambda e: iv.union(begin, end, e, rows=order[:50])),
        (iv, ["_count_le_nb"], lambda e: iv.count_le(sb, t, e)),
        (iv, ["_count_le_nb"], lambda e: iv.coverage(sb, se, t, t + 40, e)),
        (ordering, ["group_order_nb", "is_sorted_nb"],
         lambda e: ordering.group_order(group, begin, 3, e)),
        (ordering, ["is_sorted_nb"], lambda e: ordering.sorted_copy(begin, e)),
        (runs, ["_kway_nb"], lambda e: runs.merge_runs(v, order, starts, [0, 2], e)),
        (runs, ["_kway_nb"], lambda e: runs.merge_rows(begin, order, starts, [0, 1, 2], e)),
        (runs, ["_runs_sorted_nb"], lambda e: runs.runs_sorted(begin, order, starts, [1], e)),
        (runs, ["_kway_values_nb"], lambda e: runs.merge_values(v, starts, [0, 1], e)),
        (runs, ["_gather_sorted_nb"], lambda e: runs.gather_sorted(begin, order, starts, e)),
        (ids, ["_dense_nb"], lambda e: ids.dense_ids(begin, e)),
        (ids, ["_bounds_nb", "_pairs_table_nb", "_pairs_nb"],
         lambda e: ids.pair_ids(group, begin % 3, e)),
        (ids, ["_bounds_nb", "_pairs_nb"], lambda e: ids.pair_ids(group, begin * 10**9, e)),
        (quantiles, ["_quantiles_nb"],
         lambda e: quantiles.group_quantiles(end - begin, group, 3, [0.5, 0.9], e)),
    ]


def _same(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _forbid(monkeypatch, module, names):
    def ran(*args, **kw):
        raise AssertionError("a Numba kernel ran")
    for name in names:
        monkeypatch.setattr(module, name, ran)


@pytest.mark.parametrize("k", range(len(_calls())))
def test_auto_below_the_threshold_runs_no_kernel_and_equals_both(k, monkeypatch):
    module, kernels, call = _calls()[k]
    numba_result = call("numba")
    numpy_result = call("numpy")
    _same(numba_result, numpy_result)
    _forbid(monkeypatch, module, kernels)
    _same(call("auto"), numpy_result)       # 300 rows: the twins
    monkeypatch.setattr(engines, "AUTO_NUMBA_ROWS", 1)
    with pytest.raises(AssertionError, match="a Numba kernel ran"):
        call("auto")                        # past the threshold: the kernel


def test_the_default_engine_is_auto(monkeypatch):
    group, begin, end, launch, order, starts = _rows()
    _forbid(monkeypatch, iv, ["_merge_nb", "_union_nb"])
    _forbid(monkeypatch, ordering, ["group_order_nb", "is_sorted_nb"])
    _same(iv.merge(begin, end, launch, order, starts, 0, 6000),
          iv.merge(begin, end, launch, order, starts, 0, 6000, engine="numpy"))
    _same(ordering.group_order(group, begin, 3), (order, starts))
    _same(iv.union(begin, end), iv.union(begin, end, engine="numpy"))


def test_kernels_see_read_only_inputs_and_leave_callers_arrays_writable():
    group, begin, end, launch, order, starts = _rows()
    ro = engines.readonly(begin)
    assert not ro.flags.writeable and np.shares_memory(ro, begin) and begin.flags.writeable
    assert engines.readonly(ro) is ro
    assert engines.readonly([1.5], np.float64).dtype == np.float64
    for a in (begin, begin.copy()):  # a Timeline's (read-only) column or a computed one
        a.flags.writeable = a is begin
        out = iv.merge(a, end, launch, order, starts, 0, 6000, engine="numba")
        assert all(x.flags.writeable for x in out)
    assert len(iv._merge_nb.signatures) == 1  # one compile serves both


def test_a_small_run_compiles_nothing_in_a_fresh_process(tmp_path):
    # a fresh process and cache: no dispatcher has a signature until it runs
    code = """if True:
        import numpy as np
        from cutimeline.alignment import hull
        from cutimeline.numeric import intervals as iv, ordering, runs
        rng = np.random.default_rng(0)
        b = np.sort(rng.integers(0, 10**6, 5000)); e = b + 100
        o, s = ordering.group_order(np.zeros(5000, np.int64), b, 1)
        iv.merge(b, e, b - 5, o, s, 0, 2 * 10**6); iv.union(b, e); iv.count_le(b, e)
        runs.merge_values(b, s, [0])
        hull.upper_hull(b, b + 7, 0, 0, 1.0)
        hull.host_times(b, np.zeros(5000, np.int16), np.zeros(5000), b, [0], [0], [1.0],
                        np.array([4999]), np.array([0]), np.array([-1]), np.array([10**7]))
        from numba.core.registry import CPUDispatcher
        import gc
        ours = [d for d in gc.get_objects() if isinstance(d, CPUDispatcher)
                and d.py_func.__module__.startswith("cutimeline.")]
        assert ours, "no kernels found"
        from cutimeline.numeric.engines import kernels_warm
        print(sum(len(d.signatures) for d in ours), kernels_warm())
        import sys
        if sys.argv[1:] == ["compile"]:
            iv.merge(b, e, b - 5, o, s, 0, 2 * 10**6, engine="numba")
            print(kernels_warm())
    """
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run(*argv):
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                           text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()
    assert run() == ["0", "False"]
    assert not any(tmp_path.rglob("*.nbi"))  # and nothing was cached
    assert run("compile") == ["0", "False", "True"]  # compiled here: warm
    assert any(tmp_path.rglob("*.nbi"))
    assert run() == ["0", "True"]  # cached for the next process: warm at once
