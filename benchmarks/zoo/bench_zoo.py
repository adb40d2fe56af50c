"""Third-party model code on SimGPU: does every model and loop run to the end?

    python benchmarks/zoo/bench_zoo.py [--only NAME[,NAME]] [--modes train,no_grad,inference]
                                   [--repeats N] [--timeout S] [--list]

Runs every entry of the model zoo (``zoo.py``: Hugging Face
``transformers``, ``timm``, ``torchvision`` and loops in the structure of
the ``pytorch/examples`` scripts, built without weights on ``meta``
tensors) under ``ctl.SimGPU("h100")`` in each grad mode it is meaningful
in (``train``; the evaluation loop under ``torch.no_grad()``; the same
under ``torch.inference_mode()``), each run in a subprocess of its own
with a timeout, so that a crash or a hang is a result and not the end of
the benchmark. The libraries are the ``zoo`` extra
(``pip install cutimeline[zoo]``).

The table: the entry, the mode, the outcome (``ok``; ``crash``, ``hang``
or ``skip`` with the exception line), the seconds the subprocess took
(build, record, analyze; the median over repeats), SimGPU's step time
(the median over the steps after the first of
``ctl.analyze(tl).steps["duration_ns"]``), the mean GPU busy fraction
over those steps, and the verdict most of them got. Below it, each
failure with the frame that raised it and the last frame in the model's
or the loop's own code. Exit status 1 when any run did not finish.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "ZOO-RESULT "
ZOO_MODULES = ("zoo_hf", "zoo_vision", "zoo_examples")


def load_zoo() -> dict:
    """The registry with every zoo module's entries in it."""
    import importlib

    from zoo import ZOO
    for m in ZOO_MODULES:
        importlib.import_module(m)
    return ZOO


# -- the child: one entry, one mode, one seed ----------------------------------

def frames(tb) -> tuple[str, str]:
    """(where it raised, the last frame in model or loop code): the
    innermost frame, and the innermost one in transformers, timm,
    torchvision or these benchmarks."""
    stack = traceback.extract_tb(tb)
    if not stack:
        return "", ""

    own = [f for f in stack if is_own(f.filename)]
    return (where(stack[-1].filename, stack[-1].lineno, stack[-1].name),
            where(own[-1].filename, own[-1].lineno, own[-1].name) if own else "")


def is_own(path: str) -> bool:
    """A frame in the model's or the loop's code."""
    return any(k in path for k in ("transformers/", "timm/", "torchvision/", "benchmarks/zoo"))


def where(path: str, line: int, func: str) -> str:
    """'pkg/module.py:123 in func: the source line', the path cut to its package."""
    import linecache
    text = linecache.getline(path, line).strip()
    for root in ("site-packages/", "/cutimeline/", "/benchmarks/"):
        if root in path:
            path = path.rsplit(root, 1)[1] if root == "site-packages/" else \
                root.strip("/") + "/" + path.rsplit(root, 1)[1]
            break
    return f"{path}:{line} in {func}: {text}"


def stuck_at(text: str) -> tuple[str, str]:
    """(innermost frame, the outermost frames in model or loop code) of the
    main thread in a faulthandler dump (most recent call first)."""
    import re
    blocks = text.split("most recent call first):")[1:] if "Timeout (" in text else []
    # the thread running the entry: the one in child(), or, where faulthandler
    # cut a deep stack at 100 frames (transformers' are deeper), the longest
    main = [b for b in blocks if " in child" in b] or sorted(blocks, key=lambda b: b.count(
        'File "'))[-1:]
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main[0] if main else "")
    if not frames:
        return "", ""
    # the loop that does not end is in the outer frames: the library calls the
    # entry made, outermost first, without decorators' wrappers (short form)
    wrappers = ("wrapper", "wrapped_func", "decorate_context", "_wrapped_call_impl",
                "_call_impl", "inner")
    own = [where(p, int(n), f).split(": ", 1)[0] for p, n, f in reversed(frames)
           if is_own(p) and "benchmarks/" not in p and f not in wrappers]
    return (where(frames[0][0], int(frames[0][1]), frames[0][2]),
            " → ".join(own[:4]) + (" → …" if len(own) > 4 else ""))


def child(name: str, mode: str, seed: int, timeout: float) -> int:
    """Run one entry and print its result as one JSON line after MARK;
    shortly before the parent's timeout, dump the stacks and exit (so a
    hang says where it hangs)."""
    import faulthandler
    faulthandler.dump_traceback_later(max(timeout - 5, 0.9 * timeout), exit=True)
    sys.path.insert(0, HERE)
    out: dict = {"name": name, "mode": mode, "seed": seed}
    t0 = time.perf_counter()
    try:
        import numpy as np

        import cutimeline as ctl
        from zoo import Skip
        entry = load_zoo()[name]
        try:
            tl = entry.run(seed, mode)
        except Skip as e:
            out.update(outcome="skip", error=str(e))
            print(MARK + json.dumps(out), flush=True)
            return 0
        steps = ctl.analyze(tl).steps
        out["seconds"] = time.perf_counter() - t0
        n = len(steps)
        rows = list(range(1, n)) if n > 1 else list(range(n))
        dur = np.asarray(steps["duration_ns"])[rows] if n else np.array([])
        verdicts = [str(v) for v in steps["verdict"]]
        out.update(outcome="ok", steps=n,
                   step_ms=float(np.median(dur)) / 1e6 if len(dur) else None,
                   busy=float(np.mean(np.asarray(steps["busy_frac"])[rows])) if n else None,
                   verdicts=verdicts,
                   verdict=collections.Counter(verdicts[i] for i in rows).most_common(1)[0][0]
                   if rows else "")
    except Exception as e:  # noqa: BLE001 -- a crash is a result, reported by its line
        line = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()[0]
        raised, own = frames(e.__traceback__)
        out.update(outcome="crash", error=line[:300], raised_at=raised, own_at=own,
                   seconds=time.perf_counter() - t0)
    print(MARK + json.dumps(out), flush=True)
    return 0


# -- the parent: subprocesses, a table ----------------------------------------

@dataclass
class Run:
    name: str
    mode: str
    outcome: str = "crash"
    error: str = ""
    seconds: float = float("nan")
    step_ms: float | None = None
    busy: float | None = None
    verdict: str = ""
    raised_at: str = ""
    own_at: str = ""
    tail: list[str] = field(default_factory=list)


def run_child(name: str, mode: str, seed: int, timeout: float) -> Run:
    """One subprocess; a timeout kills its whole process group (the
    DataLoader workers with it) and is reported as a hang."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, mode, str(seed),
           str(timeout)]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, cwd=HERE)
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the child's own group: it and its workers
        text, _ = p.communicate()
        lines = text.splitlines()
        return Run(name, mode, "hang", f"no result after {timeout:.0f} s",
                   time.perf_counter() - t0, tail=lines[-5:])
    lines = text.splitlines()
    res = next((json.loads(ln[len(MARK):]) for ln in reversed(lines) if ln.startswith(MARK)),
               None)
    if res is None and "Timeout (" in text:  # the child's own stack dump before the timeout
        r = Run(name, mode, "hang", f"no result after {timeout:.0f} s",
                time.perf_counter() - t0)
        r.raised_at, r.own_at = stuck_at(text)
        return r
    if res is None:
        return Run(name, mode, "crash", f"exit status {p.returncode}, no result",
                   time.perf_counter() - t0, tail=lines[-5:])
    r = Run(name, mode, res["outcome"], res.get("error", ""),
            res.get("seconds", time.perf_counter() - t0), res.get("step_ms"),
            res.get("busy"), res.get("verdict", ""), res.get("raised_at", ""),
            res.get("own_at", ""))
    return r


def outcome_text(r: Run) -> str:
    if r.outcome == "ok":
        return "ok"
    return f"{r.outcome}: {r.error}"


def table(rows: list[list[Run]]) -> str:
    head = ("model", "mode", "outcome", "s", "step ms", "busy %", "verdict")
    lines = [head]
    for runs in rows:
        r = runs[0]
        outs = {outcome_text(x) for x in runs}
        out = outcome_text(r) if len(outs) == 1 else " | ".join(sorted(outs))
        secs = statistics.median(x.seconds for x in runs)
        oks = [x for x in runs if x.outcome == "ok"]
        step = statistics.median(x.step_ms for x in oks if x.step_ms is not None) \
            if any(x.step_ms is not None for x in oks) else None
        busy = statistics.mean(x.busy for x in oks if x.busy is not None) \
            if any(x.busy is not None for x in oks) else None
        verdicts = sorted({x.verdict for x in oks})
        lines.append((r.name, r.mode, out if len(out) < 90 else out[:87] + "...",
                      f"{secs:.1f}", "" if step is None else f"{step:.2f}",
                      "" if busy is None else f"{100 * busy:.0f}", "/".join(verdicts)))
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    for runs in rows:
        r = runs[0]
        if r.outcome in ("ok", "skip"):
            continue
        text.append(f"\n{r.name} [{r.mode}]: {r.outcome}: {r.error}")
        if r.raised_at:
            text.append(f"    {'stuck at  ' if r.outcome == 'hang' else 'raised at '} "
                        f"{r.raised_at}")
        if r.own_at:
            text.append(f"    model code {r.own_at}")
        text += [f"    | {ln}" for ln in r.tail]
    return "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2], int(argv[3]), float(argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="NAME[,NAME]: these entries only")
    ap.add_argument("--modes", default="train,no_grad,inference",
                    help="grad modes to run, comma-separated")
    ap.add_argument("--repeats", type=int, default=1, help="runs per entry and mode "
                    "(SimGPU seeds 0..N-1)")
    ap.add_argument("--timeout", type=float, default=240,
                    help="seconds before a run counts as a hang")
    ap.add_argument("--list", action="store_true", help="list the entries")
    a = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    zoo = load_zoo()
    names = list(zoo)
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in zoo]
        if unknown:
            ap.error(f"--only: no zoo entry named {', '.join(unknown)}; "
                     f"there are {', '.join(zoo)}.")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("train", "no_grad", "inference")]
    if bad:
        ap.error(f"--modes: {', '.join(bad)} is not one of train, no_grad, inference.")
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats} must be at least 1.")
    if a.list:
        for n in names:
            print(f"{n:22s} {','.join(zoo[n].modes):24s} {zoo[n].about}")
        return 0
    import torch
    print(f"torch {torch.__version__}, SimGPU h100, {a.repeats} repeat(s), "
          f"timeout {a.timeout:.0f} s", flush=True)
    rows, t0 = [], time.perf_counter()
    for n in names:
        for m in (m for m in modes if m in zoo[n].modes):
            runs = [run_child(n, m, seed, a.timeout) for seed in range(a.repeats)]
            rows.append(runs)
            print(f"  {n} [{m}]: {outcome_text(runs[0])[:100]} "
                  f"({runs[0].seconds:.1f} s)", file=sys.stderr, flush=True)
    print(table(rows))
    bad = [f"{r[0].name}[{r[0].mode}]" for r in rows
           if any(x.outcome not in ("ok", "skip") for x in r)]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} ran to the end in "
          f"{time.perf_counter() - t0:.0f} s" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
