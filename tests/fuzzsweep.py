"""The fuzz tests' sweep: mutants run in a worker process under a memory cap and a time limit.

``sweep`` writes the mutants to a folder with a manifest and runs the test
file itself as the worker (``python <test file> --worker <folder> ...``),
which calls ``work`` with its own ``outcome`` function: one JSON line per
mutant on stdout. A mutant that makes the worker die (a memory blow-up
past the cap, a crash in C) fails the test with the mutant's label.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest

__all__ = ["Timeout", "sweep", "work"]

TESTS = pathlib.Path(__file__).resolve().parent


class Timeout(BaseException):   # not an Exception: cutimeline must not catch it
    pass


def work(folder: str, outcome: Callable[[str, int], dict], *, memory_cap: int,
         time_limit_s: float) -> None:
    """Run every mutant of ``folder`` (listed in its manifest.json) through
    ``outcome(path, ok_so_far)``, one JSON line of its result each on
    stdout. Whatever the worker loaded before the call is not counted
    against ``memory_cap`` bytes of address space."""
    import resource
    import signal

    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (used + memory_cap, resource.RLIM_INFINITY))

    def timeout(signum, frame):
        raise Timeout(f"took over {time_limit_s} s")
    signal.signal(signal.SIGALRM, timeout)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    ok = 0
    for label, name in manifest:
        signal.setitimer(signal.ITIMER_REAL, time_limit_s)
        try:
            res = outcome(os.path.join(folder, name), ok)
        except MemoryError:   # even the report needs memory
            res = {"outcome": "MemoryError", "message": ""}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        ok += res["outcome"] == "ok"
        print(json.dumps({"label": label, "file": name, **res}), flush=True)


def sweep(folder: pathlib.Path, items: list[tuple[str, bytes, str]], worker: str,
          *args: str, timeout: float = 300) -> list[dict]:
    """Write the mutants ``(label, data, suffix)`` to ``folder`` and run them
    in a worker process: ``worker`` (a test file) with ``--worker folder
    *args``. Its results, one dict per mutant."""
    manifest = []
    for i, (label, data, suffix) in enumerate(items):
        name = f"mutant{i:03d}{suffix}"
        (folder / name).write_bytes(data)
        manifest.append((label, name))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, worker, "--worker", str(folder), *args],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=TESTS.parent, env=env)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(results) < len(manifest):
        died = manifest[len(results)][0]
        pytest.fail(f"the worker died (status {proc.returncode}) at mutant {died!r}:\n"
                    f"{proc.stderr[-3000:]}")
    return results
