"""Check cutimeline's CUDA path on a real GPU in one run (at most 6 minutes).

    PYTHONPATH=. python3 scripts/gpu_check.py --out $OUT          # on a GPU
    PYTHONPATH=. python3 scripts/gpu_check.py --dry-run --out /tmp/check   # CPU, SimGPU

How to read what it writes: benchmarks/gpu/README.md.

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
                profiler's kernels, op-stream match, overheads; a recording's
                per-op cost before and after compare (no profiler state left
                behind); last, with 25 s left, a torch.compile'd MLP: its
                COMPILED rows (an upper bound) against the Triton kernels the
                profiler lists, and GPU busy against GPU busy.
  e  demo       ``run_demo(device="cuda")``, its analysis and ``ctl.plot`` PNGs.
  g  gpu-side   the GPU-side what-if edits (tf32, bf16, fused_optimizer)
                predicted from a GPU-bound script's recording and set against
                the script run with each fix, every run through
                ``ctl.record_script`` (``cutimeline record``) on CUDA as written.
  v  verdicts   ``benchmarks/verdicts/bench_verdicts.py --fast --repeats 1`` (SimGPU
                scenarios whose right verdict is known), when the checkout
                has it: its exit code and table.
  a  tests      the tests/gpu suite (pytest), with what time is left; counts
                are written after every test, so a cut run keeps them.

The parts are in ``gpu_check_parts.py``. Each runs in its own process with a
deadline (``--budget`` in all), so one that fails, hangs or breaks its CUDA
context leaves the others alone; past the budget the remaining parts are
skipped with a note. A device slot brings back few files, so ``--out`` gets
at most six, all directly in it (``OUT_FILES``): ``results.json``
(rewritten after every part, with every part's numbers and the ``goals``),
``check.log`` (every part's output in turn), at most three PNGs and the
demo's .ctl. The parts' own progress files live in a temporary folder. A
short table is printed last; the exit code is 1 if a part failed.

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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: key -> (name, at most this many seconds on a GPU, in a dry run)
PARTS = {"b": ("aligner", 45, 60), "c": ("overhead", 60, 60),
         "d": ("agreement", 50, 60), "e": ("demo", 40, 90), "g": ("gpu-side", 45, 90),
         "v": ("verdicts", 60, 150), "a": ("tests", 170, 60)}
ORDER = "bcdegva"
MIN_PART_S = 8      # a part is not started with less than this left
#: every file a run may leave in --out (d_compare.png on a GPU only)
OUT_FILES = ("results.json", "check.log", "e_demo.ctl", "e_demo_timeline.png",
             "e_demo_step2.png", "d_compare.png")
LOG_TAIL = 2 << 20  # bytes of a part's output kept in check.log


# -- the parent: one child process per part --------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for results (made if missing)")
    ap.add_argument("--dry-run", action="store_true", help="CPU and SimGPU, small sizes")
    ap.add_argument("--budget", type=float, default=330.0,
                    help="seconds for all parts together (default 330)")
    ap.add_argument("--parts", default=ORDER, help=f"which parts, in order (default {ORDER})")
    ap.add_argument("--part-seconds", type=float,
                    help="at most this many seconds per part (default: each part's own cap)")
    ap.add_argument("--part", help=argparse.SUPPRESS)        # child: run one part
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)        # child: its progress folder
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
        return child(a.part, out, Path(a.work or out), a.seconds or 60.0, a.dry_run)
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    try:
        return parent(a, out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parent(a: argparse.Namespace, out: Path, work: Path) -> int:
    t0 = time.monotonic()
    results = {"meta": {"dry_run": a.dry_run, "budget_s": a.budget, "parts": a.parts,
                        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "python": sys.version.split()[0], "host": os.uname().nodename},
               "goals": {}, "parts": {}}
    log = out / "check.log"
    log.write_text(f"gpu_check {'DRY RUN ' if a.dry_run else ''}started "
                   f"{results['meta']['started']}, budget {a.budget:.0f} s\n")
    for key in a.parts:
        name, cap_gpu, cap_dry = PARTS[key]
        left = a.budget - (time.monotonic() - t0)
        if left < MIN_PART_S:
            res = {"status": "skipped", "reason": f"time budget spent ({a.budget:.0f} s in "
                                                  f"all, {max(left, 0):.0f} s left)"}
        else:
            cap = a.part_seconds or (cap_dry if a.dry_run else cap_gpu)
            res = run_part(key, out, work, min(cap, left), a.dry_run)
        env = res.pop("env", None)  # every part reports it; keep the first
        if env and not results["meta"].get("env"):
            results["meta"]["env"] = env
        results["parts"][key] = {"name": name, **res}
        results["meta"]["elapsed_s"] = round(time.monotonic() - t0, 1)
        results["goals"] = goals(results["parts"], a.dry_run)
        write_json(out / "results.json", results)
        line = (f"[{key} {name}] {res['status']} {res.get('seconds', 0):.1f} s: "
                f"{res.get('summary') or res.get('reason', '')}")
        append_log(log, key, name, work / f"{key}.log", line)
        print(line, flush=True)
    text = table(results)
    with open(log, "a") as f:
        f.write("\n" + text + "\n")
    print("\n" + text)
    return 1 if any(p["status"] == "failed" for p in results["parts"].values()) else 0


def append_log(log: Path, key: str, name: str, part_log: Path, line: str) -> None:
    """Add a part's output (its last ``LOG_TAIL`` bytes) and its result line
    to check.log."""
    try:
        data = part_log.read_bytes()
    except OSError:
        data = b""
    cut = len(data) > LOG_TAIL
    with open(log, "ab") as f:
        f.write(f"\n===== {key} {name} =====\n".encode())
        if cut:
            f.write(f"[... first {len(data) - LOG_TAIL:,} bytes left out ...]\n".encode())
        f.write(data[-LOG_TAIL:])
        f.write(f"\n{line}\n".encode())


def run_part(key: str, out: Path, work: Path, share: float, dry: bool) -> dict:
    """Run part ``key`` in a child process that is stopped after ``share``
    seconds; it is told a deadline a little earlier, to finish in time."""
    (work / f"{key}.json").unlink(missing_ok=True)
    grace = min(10.0, max(1.0, share / 10))  # to finish its last write, free the GPU
    seconds = share - grace
    cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--work",
           str(work), "--part", key, "--seconds", f"{seconds:.1f}"] + \
        (["--dry-run"] if dry else [])
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUTIMELINE_DISABLE", None)  # the checks record
    t0 = time.monotonic()
    timed_out, rc = False, None
    with open(work / f"{key}.log", "w") as log:
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
    res = read_json(work / f"{key}.json")
    res["seconds"] = round(time.monotonic() - t0, 1)
    if timed_out:
        res["status"] = "failed"
        res["reason"] = (f"stopped after {share:.0f} s (its share of the "
                         f"budget); numbers so far are kept")
    elif rc != 0 or "status" not in res:
        res["status"] = "failed"
        res.setdefault("reason", f"exit code {rc}; see check.log")
    return res


def goals(parts: dict, dry: bool) -> dict:
    """The check's goals (benchmarks/gpu/README.md), each with the number it
    is judged on and ``met`` (None: not measured in this run). On a GPU the
    truth of an event is the globaltimer stamp beside it; in a dry run the
    SimGPU's true time."""
    def get(*path):
        x = parts
        for k in path:
            x = x.get(k) if isinstance(x, dict) else None
        return x

    b = ("b", "numbers", "aligner")
    if dry:
        err = get(*b, "events", "every_event_abs_minus_truth_ns")
        inside = get(*b, "events", "every_event_inside_bound")
    else:
        err = get(*b, "every_event_events_minus_stamps_abs_ns")
        inside = get(*b, "every_event_inside_both_bounds")
    gpu = get("d", "numbers", "big_ops", "gpu") or {}
    v = get("v", "numbers") or {}
    pairs = get("g", "numbers", "pairs") or {}
    out: dict = {}

    def goal(name, value, target, ok):
        out[name] = {"value": value, "goal": target, "met": None if value is None else ok}

    med = err.get("median") if isinstance(err, dict) else None
    p99 = err.get("p99") if isinstance(err, dict) else None
    goal("event_error_median_ns", med, "<= 1000", med is not None and med <= 1000)
    goal("event_error_p99_ns", p99, "<= 3000", p99 is not None and p99 <= 3000)
    goal("truth_inside_bound", inside, ">= 0.99", inside is not None and inside >= 0.99)
    m = gpu.get("median_abs_error")
    goal("gpu_time_median_abs_error", m, "<= 0.05", m is not None and m <= 0.05)
    rc = v.get("exit_code")
    goal("verdicts_all_right", v.get("right"), "every scenario", rc == 0)
    errs = [abs(r["error"]) for r in pairs.values() if r.get("error") is not None]
    worst = max(errs) if errs else None
    goal("gpu_side_worst_abs_error", worst, "<= 0.15", worst is not None and worst <= 0.15)
    return out


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

    def __init__(self, key: str, out: Path, work: Path, seconds: float, dry: bool):
        self.key, self.out, self.dry, self.work = key, out, dry, work
        self.deadline = time.monotonic() + seconds
        self.path = work / f"{key}.json"
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


def child(key: str, out: Path, work: Path, seconds: float, dry: bool) -> int:
    sys.path.insert(0, str(ROOT))  # the checkout is what is checked
    part = Part(key, out, work, seconds, dry)
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
