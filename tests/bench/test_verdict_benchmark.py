"""benchmarks/verdicts/bench_verdicts.py: the verdict scenarios of known answer.

The benchmark runs in a subprocess: it sets torch to one thread and starts
DataLoader workers, neither of which should touch the test process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "verdicts" / "bench_verdicts.py"


def _bench(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CUTIMELINE_DISABLE", None)  # the scenarios need a real recording
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def test_the_benchmark_lists_at_least_twenty_scenarios_and_a_fast_subset():
    every = _bench("--list", timeout=120)
    fast = _bench("--list", "--fast", timeout=120)
    assert every.returncode == 0 and fast.returncode == 0, every.stderr + fast.stderr
    names = [line.split()[0] for line in every.stdout.splitlines() if line.strip()]
    quick = [line.split()[0] for line in fast.stdout.splitlines() if line.strip()]
    assert len(names) >= 40 and len(set(names)) == len(names)
    assert quick and set(quick) < set(names)
    # each names its expected verdict and a reason
    assert all(len(line.split()) >= 3 for line in every.stdout.splitlines() if line.strip())


_TABLE = """
import json, sys, sets
print(json.dumps({n: [s.expect if isinstance(s.expect, str) else list(s.expect),
                      s.run.__module__, s.run.__doc__ or "", s.fast]
                  for n, s in sets.scenarios().items()}))
"""


def test_every_scenario_names_known_verdicts_and_derives_them_in_its_docstring():
    from cutimeline.analysis.verdicts.margins import VERDICTS
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    done = subprocess.run([sys.executable, "-c", _TABLE], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    third = {n for n, (_, mod, _, _) in table.items() if mod == "loop_kinds"}
    assert len(third) >= 8, sorted(third)
    assert sum(table[n][3] for n in third) <= 2  # the test suite's fast subset stays small
    for name, (expect, _, doc, _) in table.items():
        steps = [expect] if isinstance(expect, str) else [v for v in expect if v]
        assert steps and set(steps) <= set(VERDICTS), (name, expect)
        # the expectation is derived by arithmetic: the docstring shows numbers
        assert len(doc) > 120 and any(ch.isdigit() for ch in doc), name
