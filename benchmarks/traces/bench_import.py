"""Kineto import speed: ``ctl.load`` of a trace (``formats.kineto.import_chrome``)
against HolisticTraceAnalysis loading the same trace, side by side in one run;
then, per shared trace, what cutimeline says beside what HTA says.

    python benchmarks/traces/bench_import.py [--trace PATH] [--reps 5]
                                      [--hta-python /work/hta-venv/bin/python]
                                      [--traces DIR]
                                      [--synthetic N] [--before DIR] [--rounds 2]

``--synthetic N`` loads a generated trace of about N events instead of
``--trace``: steps of aten ops, each with its launch call, kernel, ac2g flow
and three nested ``python_function`` frames (``with_stack=True``), and an
``aten::item`` that waits in ``cudaStreamSynchronize`` every 500 ops (so
the sources lookup runs over the Python frames). ``--before DIR`` runs the
same load with the ``cutimeline`` package found in DIR beside today's (make
DIR with ``git archive <commit> cutimeline | tar -x -C DIR``); the two sides
alternate over ``--rounds`` fresh interpreters each and their medians are
compared.

Each side runs in a fresh interpreter of its own (so peak RSS is its own):
it imports its package (timed), loads the trace once to warm the file
cache, then ``--reps`` timed loads; the medians are compared. HTA's load is
``TraceAnalysis(trace_files={0: path})``, which parses the trace into its
DataFrame and aligns and filters it (in-process for a single rank; a
forked worker's peak RSS, if any, would be reported apart). HTA is never a
dependency of cutimeline: install it into a venv of its own, e.g.

    python3 -m venv /work/hta-venv
    /work/hta-venv/bin/pip install torch==2.13.0   # first, so no CUDA torch
    /work/hta-venv/bin/pip install holistictraceanalysis==0.5.0

and pass that interpreter with ``--hta-python``; without it only our side
runs.

The per-trace table (every trace of ``bench_traces.TRACES`` under
``--traces``, by default ``../shared/traces/kineto``): cutimeline's idle %
over its own window (the whole trace; for a trace without steps, first to
last device activity), the idle time by cause and the verdict
(``bench_traces.one``), beside HTA 0.5.0's idle / compute / non-compute %
as the traces' README publishes them (where it lists none: our
HTA-compatible figures, marked †), the difference in idle points, and the
median ``ctl.load`` time (with ``--hta-python``, HTA's load time too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TRACE = os.path.join(ROOT, "tests", "data", "kineto", "nccl_parser_config",
                             "nccl_data.json.gz")

# Both child scripts print one JSON line: package import s, the warm-up
# load s, the timed loads s, and peak RSS in KiB (self, children).
_COMMON = """
import json, resource, statistics, sys, time
path, reps = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
{import_}
import_s = time.perf_counter() - t
def load():
    t = time.perf_counter()
    {load}
    return time.perf_counter() - t
first = load()
times = [load() for _ in range(reps)]
rss = [resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF,
                                                   resource.RUSAGE_CHILDREN)]
print(json.dumps({{"import_s": import_s, "first_s": first, "times": times,
                  "rss_kib": rss, "check": {check}}}))
"""

OURS = _COMMON.format(
    import_="from cutimeline.formats.kineto import import_chrome",
    load="global tl; tl = import_chrome(path)",
    check="[len(tl.ops), len(tl.gpu), __import__('cutimeline').__file__]")


def synthetic_trace(path: str, n_events: int) -> None:
    """A Kineto-shaped trace of about ``n_events`` events (see the module
    doc), written event by event so that making it costs little memory."""
    per_op = 9   # op, launch call, kernel, flow start and end, 3 frames, 1/1000 step
    frames = ("train.py(57): main", "torch/nn/modules/module.py(1751): _call_impl",
              "model.py(30): forward")
    with open(path, "w") as fh:
        fh.write('{"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000, '
                 '"traceEvents": [\n')
        first = True
        for i in range(max(1, n_events // per_op)):
            t = 20.0 * i + 0.125
            evs = []
            if i % 1000 == 0:
                evs.append({"ph": "X", "cat": "user_annotation", "name":
                            f"ProfilerStep#{i // 1000}", "pid": 1, "tid": 1, "ts": t - 0.1,
                            "dur": 20000 - 0.2, "args": {}})
            evs += [{"ph": "X", "cat": "python_function", "name": f, "pid": 1, "tid": 1,
                     "ts": t + 0.01 * k, "dur": 15 - 0.02 * k,
                     "args": {"Python id": 3 * i + k, "Python parent id": 3 * i + k - 1}}
                    for k, f in enumerate(frames)]
            item = i % 500 == 499
            evs += [{"ph": "X", "cat": "cpu_op", "name": "aten::item" if item else "aten::mm",
                     "pid": 1, "tid": 1, "ts": t + 1, "dur": 12,
                     "args": {"External id": i, "Input Dims": [[64, 64], [64, 64]],
                              "Input type": ["float", "float"]}},
                    {"ph": "X", "cat": "cuda_runtime",
                     "name": "cudaStreamSynchronize" if item else "cudaLaunchKernel",
                     "pid": 1, "tid": 1, "ts": t + 2, "dur": 3,
                     "args": {"cbid": 211, "correlation": i + 1}},
                    {"ph": "s", "id": i + 1, "pid": 1, "tid": 1, "ts": t + 2, "cat": "ac2g",
                     "name": "ac2g"},
                    {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0,
                     "tid": 7, "ts": t + 9, "dur": 10,
                     "args": {"device": 0, "stream": 7, "correlation": i + 1,
                              "grid": [64, 1, 1], "block": [256, 1, 1]}},
                    {"ph": "f", "id": i + 1, "pid": 0, "tid": 7, "ts": t + 9, "cat": "ac2g",
                     "name": "ac2g", "bp": "e"}]
            for e in evs:
                fh.write(("" if first else ",\n") + json.dumps(e))
                first = False
        fh.write('\n], "traceName": "synthetic"}\n')

HTA = _COMMON.format(
    import_=("import logging; logging.disable(logging.WARNING)\n"
             "from hta.trace_analysis import TraceAnalysis"),
    load=("global an; an = TraceAnalysis(trace_files={0: path}, "
          "trace_dir=__import__('os').path.dirname(path))"),
    check="len(an.t.get_trace(0))")


def run_side(python: str, script: str, trace: str, reps: int,
             fatal: bool = True, cwd: str = ROOT) -> dict | None:
    proc = subprocess.run([python, "-c", script, trace, str(reps)],
                          capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        if not fatal:  # a trace HTA refuses is a cell of the table, not the end
            return None
        sys.exit(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare_before(trace: str, before: str, reps: int, rounds: int) -> dict:
    """Today's import and the one in ``before``, alternating over ``rounds``
    fresh interpreters each (the order turns each round); each side's loads
    pooled, its import and first-load times and RSS the rounds' medians and
    maximum."""
    runs: dict[str, list[dict]] = {"cutimeline import_chrome": [], "before: import_chrome": []}
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for name in order:
            cwd = ROOT if name.startswith("cutimeline") else before
            runs[name].append(run_side(sys.executable, OURS, trace, reps, cwd=cwd))
    return {name: {"import_s": median([x["import_s"] for x in rs]),
                   "first_s": median([x["first_s"] for x in rs]),
                   "times": [t for x in rs for t in x["times"]],
                   "rss_kib": [max(x["rss_kib"][0] for x in rs),
                               max(x["rss_kib"][1] for x in rs)],
                   "check": rs[0]["check"]}
            for name, rs in runs.items()}


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def per_trace(path: str, reps: int, hta_python: str | None) -> dict:
    """One row of the per-trace table (see the module doc)."""
    import time

    from bench_traces import one

    import cutimeline as ctl
    ctl.load(path)  # warms the file cache and the lazily imported stages
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        tl = ctl.load(path)
        times.append(time.perf_counter() - t)
    rep = ctl.analyze(tl)
    w0, w1 = rep.window
    row = {**one(path), "load_s": median(times), "window": rep.settings["window"],
           "window_ns": w1 - w0, "before_ns": w0 - tl.start_ns, "after_ns": tl.end_ns - w1,
           "hta_span_ns": rep.hta["temporal_breakdown"]["span_ns"] if rep.hta else None,
           "hta_window": rep.hta["window"] if rep.hta else None}
    if hta_python:
        h = run_side(hta_python, HTA, path, reps, fatal=False)
        row["hta_load_s"] = None if h is None else median(h["times"])
    return row


def trace_table(folder: str, reps: int, hta_python: str | None) -> None:
    """Print the per-trace table as Markdown, then for each idle % more
    than 2 points from HTA's the two windows, so the difference can be
    read off them."""
    from bench_traces import TRACES

    from cutimeline.text import fmt_ns
    print(f"\nper trace (under {folder}; median of {reps} ctl.load after one warm-up):")
    print("| trace | steps | our window | idle % | idle by cause | verdict (steady steps) "
          "| HTA idle / compute / non-compute % | Δ idle | ctl.load s |"
          + (" HTA load s |" if hta_python else ""))
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if hta_python else ""))
    notes = []
    for name, (rel, peer) in TRACES.items():
        path = os.path.join(folder, rel)
        if not os.path.exists(path):
            print(f"| {name} | missing: {path} |")
            continue
        r = per_trace(path, reps, hta_python)
        idle = 100 * (1 - r["busy"]) if r["busy"] is not None else None
        theirs, mark = (peer, "") if peer is not None else (r["hta"], "†")
        delta = None if idle is None or theirs is None else idle - theirs[0]
        window = f"{r['window']} ({fmt_ns(r['window_ns'])})"
        if r["window"] == "first to last device activity":
            window += (f"; {fmt_ns(r['before_ns'])} host-only before, "
                       f"{fmt_ns(r['after_ns'])} after, not counted")
        causes = ", ".join(f"{c} {v:.0%}" for c, v in sorted(r["idle"].items(),
                                                             key=lambda kv: -kv[1]))
        cells = [name, str(r["steps"]), window, "—" if idle is None else f"{idle:.2f}",
                 causes or "—", r["verdict"],
                 "—" if theirs is None else " / ".join(f"{v:.2f}" for v in theirs) + mark,
                 "—" if delta is None else f"{delta:+.2f}", f"{r['load_s']:.3f}"]
        if hta_python:
            cells.append("failed" if r["hta_load_s"] is None else f"{r['hta_load_s']:.3f}")
        print("| " + " | ".join(cells) + " |")
        if delta is not None and abs(delta) > 2:
            notes.append(f"{name}: ours over {r['window']} ({fmt_ns(r['window_ns'])}), "
                         f"HTA's over {r['hta_window']} ({fmt_ns(r['hta_span_ns'])} "
                         f"span, first to last GPU work)")
    print("† HTA published no numbers for this trace: our HTA-compatible ones "
          "(analysis/hta.py, equal to HTA's where it published them).")
    for n in notes:
        print(f"Δ idle over 2 points — {n}.")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=DEFAULT_TRACE, help="a Kineto .json(.gz) trace")
    p.add_argument("--reps", type=int, default=5, help="timed loads per side")
    p.add_argument("--hta-python", help="interpreter with holistictraceanalysis")
    p.add_argument("--traces", default=os.path.join(os.path.dirname(ROOT), "shared",
                                                    "traces", "kineto"),
                   help="folder of the shared traces for the per-trace table "
                        "('' to skip the table)")
    p.add_argument("--synthetic", type=int, help="load a generated trace of ~N events")
    p.add_argument("--before", help="folder holding an earlier cutimeline package")
    p.add_argument("--rounds", type=int, default=2,
                   help="with --before: fresh interpreters per side, alternating")
    args = p.parse_args(argv)
    trace = os.path.abspath(args.trace)
    if args.synthetic:
        import tempfile
        trace = os.path.join(tempfile.mkdtemp(), f"synthetic_{args.synthetic}.json")
        synthetic_trace(trace, args.synthetic)
        args.traces = ""

    if args.before:
        sides = compare_before(trace, os.path.abspath(args.before), args.reps, args.rounds)
    else:
        sides = {"cutimeline import_chrome": run_side(sys.executable, OURS, trace,
                                                      args.reps)}
    if args.hta_python:
        sides["HTA TraceAnalysis load"] = run_side(args.hta_python, HTA, trace, args.reps)

    print(f"trace: {trace if args.synthetic else os.path.relpath(trace, ROOT)} ({os.path.getsize(trace) / 1e6:.1f} MB); "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"median of {args.reps} loads after one warm-up"
          + (f", in each of {args.rounds} fresh interpreters per side, alternating"
             if args.before else ""))
    print(f"{'':28} {'package import s':>16} {'first load s':>12} {'load s':>8} "
          f"{'peak RSS MB':>11} {'worker RSS MB':>13}")
    for name, r in sides.items():
        worker = f"{r['rss_kib'][1] / 1024:.0f}" if r["rss_kib"][1] else "-"
        print(f"{name:28} {r['import_s']:16.3f} {r['first_s']:12.3f} "
              f"{median(r['times']):8.3f} {r['rss_kib'][0] / 1024:11.0f} {worker:>13}")
    ours = sides["cutimeline import_chrome"]
    print(f"cutimeline: {ours['check'][0]:,} ops, {ours['check'][1]:,} gpu rows")
    if args.before:
        before = sides["before: import_chrome"]
        assert before["check"][2] != ours["check"][2], "both sides loaded one package"
        ratio = median(before["times"]) / median(ours["times"])
        print(f"before ({before['check'][2]}): {before['check'][0]:,} ops, "
              f"{before['check'][1]:,} gpu rows; before ÷ today: {ratio:.2f}×")
    if args.hta_python:
        hta = sides["HTA TraceAnalysis load"]
        print(f"HTA: {hta['check']:,} rows in its trace DataFrame")
        ratio = median(hta["times"]) / median(ours["times"])
        print(f"HTA load ÷ cutimeline import: {ratio:.2f}× "
              f"({'faster' if ratio > 1 else 'SLOWER'} than HTA)")
    if args.traces:
        trace_table(args.traces, args.reps, args.hta_python)


if __name__ == "__main__":
    main()
