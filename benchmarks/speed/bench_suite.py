"""The README's test command, timed, with the machine loaded as CI's may be.

    python benchmarks/speed/bench_suite.py [--runs 5] [--burn 1] [--args "-q -p no:cacheprovider"]

Runs ``python -m pytest`` (the README's command, ``-p no:cacheprovider``
so runs do not share pytest's cache; pyproject's addopts put it on two
pytest-xdist workers, a test file to each) ``--runs`` times in a row while
``--burn`` other processes each spin one CPU core, and prints one row per
run: exit code, wall-clock seconds, the 1-minute load average before and
after it, passed/failed/skipped counts and the failed tests' ids. A run is
green when pytest exits 0. The Numba cache is left as the first run made
it (a fresh clone's first run compiles; the next ones load), so the first
row is the one CI's cold run resembles. Exit status 1 when any run is not
green.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _spin() -> None:
    while True:
        pass


def run_once(args: list[str]) -> dict:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.M)
    return {"rc": done.returncode, "s": seconds, "counts": counts, "failed": failed,
            "load": (load, os.getloadavg()[0])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--burn", type=int, default=1, help="processes spinning a core each")
    ap.add_argument("--args", default="-q -p no:cacheprovider",
                    help="pytest's arguments (the README's command: -q)")
    a = ap.parse_args(argv)
    burners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(a.burn)]
    for b in burners:
        b.start()
    rows = []
    try:
        print("| run | exit | seconds | load before, after | passed | failed | skipped "
              "| failed tests |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        for i in range(a.runs):
            r = run_once(a.args.split())
            rows.append(r)
            c = r["counts"]
            print(f"| {i + 1} | {r['rc']} | {r['s']:.0f} | {r['load'][0]:.1f}, "
                  f"{r['load'][1]:.1f} | {c.get('passed', 0)} | "
                  f"{c.get('failed', 0) + c.get('error', 0)} | {c.get('skipped', 0)} | "
                  f"{', '.join(r['failed']) or '—'} |", flush=True)
    finally:
        for b in burners:
            b.terminate()
    green = sum(r["rc"] == 0 for r in rows)
    print(f"\n{green}/{len(rows)} green with {a.burn} core(s) burning; "
          f"slowest {max(r['s'] for r in rows):.0f} s")
    return 0 if green == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
