"""Cold start: the first ``cutimeline demo`` and the first ``ctl.analyze``
on a fresh Numba cache against the same on a warm one.

    python benchmarks/speed/bench_coldstart.py [--reps 3] [--ops 100000]
                                         [--engines auto numba]

Each measurement runs in a fresh process against this checkout
(PYTHONPATH), with its own ``NUMBA_CACHE_DIR``: "cold" is the first run
on an empty cache (every kernel a call needs compiles), "warm" the run
after it on the same cache (kernels load from disk). Times are medians of
``--reps`` cold/warm pairs. "demo" is the wall time of ``python -m
cutimeline demo`` (import, record 8 steps on the simulated GPU, save,
analyse, plot, export); "analyze" the time of one ``ctl.analyze(tl)
.summary()`` call on a Timeline loaded from a file (the demo's, and a
synthetic one of ``--ops`` ops from bench_analyze.py), by each engine
in ``--engines`` ("auto": the NumPy twins below
``numeric.engines.AUTO_NUMBA_ROWS`` rows, the kernels from there, chosen
as the command chooses, by ``resolve_engine``).
"compiled" counts the compiles of cutimeline kernels (Numba's
``numba:compile`` events; cache loads are not compiles) and their seconds.
Goals (issue 25/22): the first analyze of a small or medium Timeline
≤ 3 s, the first demo ≤ 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Counts the compiles of cutimeline's kernels in the process it runs in.
_COUNT = """
import time
from numba.core import event
class Count(event.Listener):
    n, s, t0, depth = 0, 0.0, 0.0, 0
    def on_start(self, ev):
        if ev.data["dispatcher"].py_func.__module__.startswith("cutimeline."):
            if self.depth == 0:
                self.t0 = time.perf_counter()
            self.depth += 1
            self.n += 1
    def on_end(self, ev):
        if ev.data["dispatcher"].py_func.__module__.startswith("cutimeline."):
            self.depth -= 1
            if self.depth == 0:
                self.s += time.perf_counter() - self.t0
COUNT = Count()
event.register("numba:compile", COUNT)
"""

_ANALYZE = _COUNT + """
import json, sys
import cutimeline as ctl
tl = ctl.load(sys.argv[1])
engine = sys.argv[2]
if engine == "auto":  # as the command resolves it
    from cutimeline.numeric.engines import resolve_engine
    engine = resolve_engine(engine, len(tl.ops) + len(tl.gpu))
t = time.perf_counter()
ctl.analyze(tl, engine=engine).summary()
print(json.dumps({"s": time.perf_counter() - t, "compiles": COUNT.n,
                  "compile_s": COUNT.s, "rows": len(tl.ops) + len(tl.gpu)}))
"""


def _env(cache: str) -> dict:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "NUMBA_CACHE_DIR": cache,
            "PYTHONPATH": ROOT + (os.pathsep + path if path else "")}


def _demo(cache: str, out: str) -> dict:
    code = _COUNT + (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps({'compiles': COUNT.n, "
        "'compile_s': COUNT.s}), file=sys.stderr))\n"
        "from cutimeline.cli import main\n"
        f"sys.exit(main(['demo', '--out', {out!r}]))\n")
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], env=_env(cache), capture_output=True,
                       text=True, timeout=900)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"the demo failed:\n{p.stderr}")
    return {"s": wall, **json.loads(p.stderr.strip().splitlines()[-1])}


def _analyze(cache: str, path: str, engine: str) -> dict:
    p = subprocess.run([sys.executable, "-c", _ANALYZE, path, engine], env=_env(cache),
                       capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise SystemExit(f"analyze failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _pair(run) -> tuple[dict, dict]:
    """A cold run on a fresh cache, then a warm one on the same cache."""
    with tempfile.TemporaryDirectory(prefix="ctl-numba-") as cache:
        return run(cache), run(cache)


def _median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _row(name: str, pairs: list[tuple[dict, dict]]) -> None:
    cold, warm = _median([c for c, _ in pairs]), _median([w for _, w in pairs])
    print(f"{name:<34} {cold['s']:7.2f} s {warm['s']:7.2f} s   "
          f"{cold['compiles']:4.0f} in {cold['compile_s']:5.1f} s "
          f"{warm['compiles']:4.0f} in {warm['compile_s']:4.1f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ops", type=float, default=1e5)
    ap.add_argument("--engines", nargs="+", default=["auto", "numba"])
    a = ap.parse_args()
    sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks", "speed")]
    import cutimeline as ctl
    from cutimeline.numeric import engines

    from bench_analyze import synthetic
    print(f"cutimeline {ctl.__version__} from {os.path.dirname(ctl.__file__)}; "
          f"{os.cpu_count()} CPUs; medians of {a.reps}; AUTO_NUMBA_ROWS="
          f"{getattr(engines, 'AUTO_NUMBA_ROWS', None)}")  # None: before "auto" existed
    print(f"{'':<34} {'cold':>9} {'warm':>9}   {'compiled (cold, warm)':>28}")
    with tempfile.TemporaryDirectory(prefix="ctl-coldstart-") as tmp:
        demo_out = os.path.join(tmp, "demo")
        _row("cutimeline demo", [_pair(lambda c: _demo(c, demo_out)) for _ in range(a.reps)])
        files = {"demo": os.path.join(demo_out, "demo.ctl"),
                 f"synthetic {a.ops:.0e} ops": os.path.join(tmp, "synthetic.ctl")}
        synthetic(int(a.ops)).save(files[f"synthetic {a.ops:.0e} ops"])
        for name, path in files.items():
            for engine in a.engines:
                _row(f"analyze {name}, {engine}",
                     [_pair(lambda c: _analyze(c, path, engine)) for _ in range(a.reps)])


if __name__ == "__main__":
    main()
