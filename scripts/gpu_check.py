"""Check cutimeline's CUDA path on a real GPU in one run (about 4 minutes).

    python scripts/gpu_check.py --out benchmarks/gpu/h200       # on a GPU
    python scripts/gpu_check.py --dry-run --out /tmp/check      # CPU, SimGPU

Parts, run in this order:

  b  aligner    spin kernels of known duration (``kernels.spin``, as a custom
                op the recorder brackets), recorded with ``timing="both"``;
                truth is the globaltimer the spin itself read, put on the
                host clock by the stamps' fit. Per timing: how far each
                spin's BEGIN/END lies from its truth, how often within the
                reported bound, duration errors (queued and idle spins);
                every event's events-vs-stamps host time; the clock fits;
                globaltimer's update step.
  c  overhead   µs per op: nothing, a bare TorchDispatchMode, cutimeline
                (events; stamps), torch.profiler (CPU+CUDA, record_shapes) on
                a tiny-op loop and a transformer training step; rounds
                interleaved, medians.
  d  agreement  ``ctl.compare`` on CUDA: each op's GPU time against the
                profiler's kernels, op-stream match, overheads; last, with
                25 s left, a torch.compile'd MLP: its COMPILED rows (an upper
                bound) against the Triton kernels the profiler lists, and
                GPU busy against GPU busy.
  e  demo       ``run_demo(device="cuda")``, its analysis and ``ctl.plot`` PNG.
  a  tests      the tests/gpu suite (pytest), with what time is left; counts
                are written after every test, so a cut run keeps them.

The parts are in ``gpu_check_parts.py``. Each runs in its own process with a deadline (``--budget`` in all), so
one that fails, hangs or breaks its CUDA context leaves the others alone;
past the budget the remaining parts are skipped with a note. Everything goes
to ``--out``: ``results.json`` (rewritten after every part), ``<part>.json``
(rewritten as a part goes), ``<part>.log``, PNGs, the demo's .ctl. A short
table is printed last; the exit code is 1 if a part failed.

Needs torch with CUDA and, for stamps and spins, CuPy (without it those
parts say what to install). It changes no GPU setting and needs no network.
``--dry-run`` runs every part on a CPU machine: tests/gpu (all skipped),
the aligner against a ``SimGPU``'s true event times with simulated spins,
overhead on CPU, the profiler comparison on CPU (GPU time: n/a), the demo
on a SimGPU; small sizes, for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: key -> (name, at most this many seconds on a GPU, in a dry run)
PARTS = {"b": ("aligner", 45, 60), "c": ("overhead", 60, 60),
         "d": ("agreement", 45, 60), "e": ("demo", 40, 90), "a": ("tests", 170, 60)}
ORDER = "bcdea"
MIN_PART_S = 8      # a part is not started with less than this left


# -- the parent: one child process per part --------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for results (made if missing)")
    ap.add_argument("--dry-run", action="store_true", help="CPU and SimGPU, small sizes")
    ap.add_argument("--budget", type=float, default=225.0,
                    help="seconds for all parts together (default 225)")
    ap.add_argument("--parts", default=ORDER, help=f"which parts, in order (default {ORDER})")
    ap.add_argument("--part-seconds", type=float,
                    help="at most this many seconds per part (default: each part's own cap)")
    ap.add_argument("--part", help=argparse.SUPPRESS)        # child: run one part
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out} is a file; give a folder (it is made if missing)")
    bad = sorted(set(a.parts) - set(PARTS))
    if bad or not a.parts:
        ap.error(f"--parts {a.parts!r}: choose letters among {ORDER}")
    for opt, value in (("--budget", a.budget), ("--part-seconds", a.part_seconds)):
        if value is not None and not value > 0:
            ap.error(f"{opt} {value} must be a positive number of seconds")
    out.mkdir(parents=True, exist_ok=True)
    if a.part:
        return child(a.part, out, a.seconds or 60.0, a.dry_run)
    return parent(a, out)


def parent(a: argparse.Namespace, out: Path) -> int:
    t0 = time.monotonic()
    results = {"meta": {"dry_run": a.dry_run, "budget_s": a.budget, "parts": a.parts,
                        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "python": sys.version.split()[0], "host": os.uname().nodename},
               "parts": {}}
    for key in a.parts:
        name, cap_gpu, cap_dry = PARTS[key]
        left = a.budget - (time.monotonic() - t0)
        if left < MIN_PART_S:
            res = {"status": "skipped", "reason": f"time budget spent ({a.budget:.0f} s in "
                                                  f"all, {max(left, 0):.0f} s left)"}
        else:
            cap = a.part_seconds or (cap_dry if a.dry_run else cap_gpu)
            res = run_part(key, out, min(cap, left), a.dry_run)
        env = res.pop("env", None)  # every part reports it; keep the first
        if env and not results["meta"].get("env"):
            results["meta"]["env"] = env
        results["parts"][key] = {"name": name, **res}
        results["meta"]["elapsed_s"] = round(time.monotonic() - t0, 1)
        write_json(out / "results.json", results)
        print(f"[{key} {name}] {res['status']} {res.get('seconds', 0):.1f} s: "
              f"{res.get('summary') or res.get('reason', '')}", flush=True)
    print("\n" + table(results))
    return 1 if any(p["status"] == "failed" for p in results["parts"].values()) else 0


def run_part(key: str, out: Path, share: float, dry: bool) -> dict:
    """Run part ``key`` in a child process that is stopped after ``share``
    seconds; it is told a deadline a little earlier, to finish in time."""
    name = PARTS[key][0]
    (out / f"{key}_{name}.json").unlink(missing_ok=True)
    grace = min(10.0, max(1.0, share / 10))  # to finish its last write, free the GPU
    seconds = share - grace
    cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out),
           "--part", key, "--seconds", f"{seconds:.1f}"] + (["--dry-run"] if dry else [])
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUTIMELINE_DISABLE", None)  # the checks record
    t0 = time.monotonic()
    timed_out, rc = False, None
    with open(out / f"{key}_{name}.log", "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(share)
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
                try:
                    rc = p.wait(5)
                    break
                except subprocess.TimeoutExpired:
                    continue
    res = read_json(out / f"{key}_{name}.json")
    res["seconds"] = round(time.monotonic() - t0, 1)
    if timed_out:
        res["status"] = "failed"
        res["reason"] = (f"stopped after {share:.0f} s (its share of the "
                         f"budget); numbers so far are kept")
    elif rc != 0 or "status" not in res:
        res["status"] = "failed"
        res.setdefault("reason", f"exit code {rc}; see {key}_{name}.log")
    return res


def table(results: dict) -> str:
    rows = [("part", "status", "s", "result")]
    for key, p in results["parts"].items():
        rows.append((f"{key} {p['name']}", p["status"], f"{p.get('seconds', 0):.0f}",
                     p.get("summary") or p.get("reason", "")))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]}" for r in rows]
    lines.insert(1, "-" * min(100, max(len(x) for x in lines)))
    what = "DRY RUN (CPU, SimGPU)" if results["meta"]["dry_run"] else "GPU"
    return (f"gpu_check {what}, {results['meta'].get('elapsed_s', 0):.0f} s of "
            f"{results['meta']['budget_s']:.0f} s budget\n" + "\n".join(lines))


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_plain))
    os.replace(tmp, path)  # a reader never sees half a file


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _plain(x):
    import numpy as np
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return None if not np.isfinite(x) else float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


# -- the child: one part ---------------------------------------------------------------

class Part:
    """What a running part knows: its folder, its deadline, its results
    (written to ``<key>_<name>.json`` on every ``put``)."""

    def __init__(self, key: str, out: Path, seconds: float, dry: bool):
        self.key, self.out, self.dry = key, out, dry
        self.deadline = time.monotonic() + seconds
        self.path = out / f"{key}_{PARTS[key][0]}.json"
        self.res: dict = {"status": "running", "numbers": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def put(self, name: str, value) -> None:
        self.res["numbers"][name] = value
        write_json(self.path, self.res)

    def finish(self, status: str, summary: str = "", reason: str = "") -> None:
        self.res.update(status=status, summary=summary)
        if reason:
            self.res["reason"] = reason
        write_json(self.path, self.res)


def child(key: str, out: Path, seconds: float, dry: bool) -> int:
    sys.path.insert(0, str(ROOT))  # the checkout is what is checked
    part = Part(key, out, seconds, dry)
    write_json(part.path, part.res)
    # scripts/ is on sys.path (the script's folder); tests name a stand-in
    impl = importlib.import_module(os.environ.get("GPU_CHECK_PARTS", "gpu_check_parts"))
    try:
        part.res["env"] = impl.environment() if hasattr(impl, "environment") else {}
        summary = getattr(impl, f"part_{key}")(part)
    except impl.Skip as why:
        part.finish("skipped", reason=str(why))
    except Exception as exc:
        traceback.print_exc()
        part.finish("failed", reason=f"{type(exc).__name__}: {exc}"[:300])
        return 1
    else:
        part.finish("ok", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
