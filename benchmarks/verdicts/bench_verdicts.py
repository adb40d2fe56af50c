"""Verdicts on training loops whose right verdict is known by construction.

    python benchmarks/verdicts/bench_verdicts.py [--repeats 3] [--load] [--fast]
                                                 [--only NAME[,NAME]] [--list]

The scenarios are in sets by topic, listed in their order in ``sets.py``
(the first ones and the pieces they share in ``scenarios.py``). Each scenario is a realistic training loop recorded on a simulated H100
(``ctl.SimGPU("h100")``) over ``meta`` tensors, written as a user would
write it, whose verdict follows from arithmetic on the H100's roofline
(fp32: 67 TFLOP/s without TF32, 494.5 TFLOP/s for convolutions, which
cuDNN runs on TF32 by default; 3.35 TB/s; 2 µs per kernel at least; 4 µs
launch latency) against a CUDA dispatch cost of about 5–10 µs per op.
Each states the verdict its steady-state steps must get (every step but
the first, which holds the recorder's start), or a verdict per step, and
the arithmetic in its docstring (``--list`` prints the one-line reasons).

The table: the scenario, the expected verdict, the steps' verdicts (the
verdict of more than half the checked steps; steps that differ are named
after it), the run's one verdict (``rep.overall["verdict"]``, which every
surface says; several where repeats differ), the fix it names with its
predicted gain (the first repeat's; a GPU-bound run names its GPU-side
fix, ``analysis/replay/gpuside.py``), the mean GPU busy
fraction over those steps (without the
recorder's own cost, as the verdicts read it), the margin (the smallest
``(gain − runner_gain) ÷ gain`` of the step's fix over the runner-up's,
over those of them that name a fix), how many repeats agreed with the first ("~": they
agreed, but some single step's verdict varied), and the seconds a run
took (build, record and analyze; the median over repeats). A scenario is
missed when the run's verdict is not the expected one (with a per-step
expectation: when any checked step's differs), when repeats disagree, or
when it raises (reported by its exception line), or when a surface
(summary, repr, HTML repr, ``to_dict``, the figure's title) does not say
the run's verdict and fix in the words of the others; a scenario that
cannot run here (``Skip``) is reported and is not a miss. Exit status 1
on any miss.

``--repeats N`` runs each scenario N times (SimGPU seeds 0..N-1: other
device clocks, the same program); verdicts must match across repeats.
``--load`` runs everything while another process burns one CPU core:
the verdicts must still be the expected ones. ``--fast`` is the subset
the test suite runs (under about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import collections
import html
import itertools
import math
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch
# SlowBatches .. train_steps: accuracy/bench_whatif.py takes these pieces from here
from scenarios import (Scenario, Skip, SlowBatches, busy,  # noqa: F401
                       medium_mlp, meta_batches, mlp, train_steps)
from sets import scenarios

import cutimeline as ctl

#: every set's scenarios, in ``sets.SETS``' order
SCENARIOS = scenarios()

# -- the harness -------------------------------------------------------------

@dataclass
class Outcome:
    verdicts: tuple[str, ...] | None  # every step's verdict; None when it raised or skipped
    busy: float = math.nan            # mean busy fraction over the checked steps (no recorder)
    margin: float = math.nan          # smallest (gain − runner-up's) ÷ gain over them
    surfaces: str = ""                # the first surface that disagrees with the verdict
    run: str = ""                     # the run's one verdict (headline.py: every surface's)
    fix: str = ""                     # the fix it names, with its predicted gain
    seconds: float = math.nan
    error: str = ""                   # the exception line, or the Skip reason
    skipped: bool = False


def checked(sc: Scenario, n: int) -> list[int]:
    """The step rows a scenario's expectation covers."""
    if isinstance(sc.expect, str):
        return list(range(1, n))
    return [i for i, v in enumerate(sc.expect[:n]) if v is not None]


def expected_at(sc: Scenario, i: int) -> str:
    return sc.expect if isinstance(sc.expect, str) else sc.expect[i]


def run_once(sc: Scenario, seed: int) -> Outcome:
    t0 = time.perf_counter()
    try:
        tl = sc.run(seed)
        rep = ctl.analyze(tl)
        steps = rep.steps
        disagree = surfaces(rep)
    except Skip as e:
        return Outcome(None, error=str(e), skipped=True)
    except Exception as e:  # noqa: BLE001 -- a crash is a miss, reported by its line
        line = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()[0]
        return Outcome(None, error=line, seconds=time.perf_counter() - t0)
    v = rep.to_dict()["verdict"]
    fix = f"{v['fix']['edit']} −{100 * v['gain']:.0f}%" if v.get("fix") else ""
    out = Outcome(tuple(str(v) for v in steps["verdict"]),
                  seconds=time.perf_counter() - t0, surfaces=disagree,
                  run=str(rep.overall["verdict"]), fix=fix)
    rows = checked(sc, len(steps))
    if rows:
        busy = steps["predicted_busy_frac"][rows] if rep.compensation is not None \
            else steps["busy_frac"][rows]
        out.busy = float(np.mean(busy))
        gain = steps["gain"][rows].astype(float)
        named = steps["verdict"][rows] != "GPU-bound"  # GPU-bound names no fix
        m = (gain - steps["runner_gain"][rows].astype(float)) / np.where(gain > 0, gain, 1)
        m = m[named & (gain > 0)]
        out.margin = float(np.nanmin(m)) if len(m) and np.isfinite(m).any() else math.nan
    return out


def surfaces(rep: ctl.Report) -> str:
    """"" when every surface gives the run's verdict and its fix in the
    same words (summary's first line, repr, the HTML repr, to_dict, the
    figure's title), else the first that does not."""
    from cutimeline.analysis.headline import headline
    from cutimeline.rendering.strip import verdict_line
    h = headline(rep)
    first = rep.summary().splitlines()[0]
    d = rep.to_dict()
    checks = {"summary": first.startswith(f"Verdict: {h['text']} ({h['steps']}). "),
              "repr": repr(rep).endswith(f", {h['short']}>"),
              "html": html.escape(first) in rep._repr_html_(),
              "to_dict": d["overall"]["verdict"] == h["verdict"] == d["verdict"]["verdict"],
              "figure": rep.lanes is None or
              verdict_line(rep) == f"Verdict: {h['short']} ({h['steps']})"}
    return next((k for k, ok in checks.items() if not ok), "")


def majority(sc: Scenario, verdicts: tuple[str, ...]) -> str:
    """The verdict of more than half the checked steps ("no majority" if none)."""
    rows = checked(sc, len(verdicts))
    if not rows:
        return "(no steps)"
    top, count = collections.Counter(verdicts[i] for i in rows).most_common(1)[0]
    return top if 2 * count > len(rows) else "no majority"


def answer(sc: Scenario, o: Outcome) -> str | tuple[str, ...] | None:
    """What a run said, in the form the scenario expects: the run's
    verdict (the one answer every surface gives), or the checked steps'
    verdicts. Until issue 35 a run had no verdict of its own and the
    steps' majority was judged; a loop whose steps alternate (a worker
    delivering batches in pairs) has no majority that means anything."""
    if o.verdicts is None:
        return None
    if isinstance(sc.expect, str):
        return o.run
    return tuple(o.verdicts[i] for i in checked(sc, len(o.verdicts)))


def misses(sc: Scenario, o: Outcome) -> list[str]:
    """What is wrong with one run ([] when right): its exception, a wrong
    run verdict, or (per-step expectations) each wrong step."""
    if o.skipped:
        return []
    if o.verdicts is None:
        return [o.error]
    if o.surfaces:
        return [f"the {o.surfaces} disagrees with the run's verdict"]
    n = len(o.verdicts)
    if not isinstance(sc.expect, str):
        if n != len(sc.expect):
            return [f"{n} steps recorded, {len(sc.expect)} expected"]
        return [f"step {i}: {o.verdicts[i]}" for i in checked(sc, n)
                if o.verdicts[i] != sc.expect[i]]
    if n < 2:
        return [f"{n} steps recorded; at least 2 expected"]
    said = ", ".join(f"step {i} {o.verdicts[i]}" for i in checked(sc, n))
    return [] if o.run == sc.expect else [f"run {o.run}; steps: {said}"]


def runs(values: list[str]) -> str:
    """'a, a, b' -> 'a×2, b'."""
    out = []
    for v, g in ((v, len(list(g))) for v, g in itertools.groupby(values)):
        out.append(v if g == 1 else f"{v}×{g}")
    return ", ".join(out)


@dataclass
class Row:
    scenario: Scenario
    outcomes: list[Outcome]

    @property
    def skipped(self) -> bool:
        return self.outcomes[0].skipped

    @property
    def stable(self) -> bool:
        """Every repeat gave the same answer (the run's verdict, or per-step list)."""
        return len({answer(self.scenario, o) for o in self.outcomes}) == 1

    def stability(self) -> str:
        """'3/3': repeats agreeing with the first; '~' where they agree but
        some step's own verdict varied."""
        if self.skipped:
            return ""
        first = answer(self.scenario, self.outcomes[0])
        same = sum(answer(self.scenario, o) == first for o in self.outcomes)
        steps_vary = len({o.verdicts for o in self.outcomes}) > 1
        return f"{same}/{len(self.outcomes)}" + ("~" if steps_vary and same == len(
            self.outcomes) else "")

    @property
    def problems(self) -> list[str]:
        """Every distinct miss, with the repeats that had it where not all
        did, and any disagreement between repeats."""
        seen: dict[str, list[int]] = {}
        for r, o in enumerate(self.outcomes):
            for m in misses(self.scenario, o):
                seen.setdefault(m, []).append(r)
        n = len(self.outcomes)
        out = [m if len(rs) == n else f"{m} (repeat {', '.join(map(str, rs))})"
               for m, rs in seen.items()]
        if not self.skipped and not self.stable:
            out.append("the verdict differs across repeats")
        return out

    @property
    def ok(self) -> bool:
        return self.skipped or not self.problems

    def expected(self) -> str:
        e = self.scenario.expect
        return e if isinstance(e, str) else runs(["-" if v is None else v for v in e])

    def got(self) -> str:
        worst = next((o for o in self.outcomes if misses(self.scenario, o)), self.outcomes[0])
        if worst.skipped:
            return "skipped"
        if worst.verdicts is None:
            return "error"
        sc, v = self.scenario, worst.verdicts
        rows = checked(sc, len(v))
        if not isinstance(sc.expect, str):
            return runs(["-" if i not in rows else v[i] for i in range(len(v))])
        top = majority(sc, v)
        odd = [f"{i}:{v[i]}" for i in rows if v[i] != top]
        return top + (f" (step {', '.join(odd)})" if odd else "")


def run(names: list[str], repeats: int, *, log=print) -> list[Row]:
    rows = []
    for name in names:
        sc = SCENARIOS[name]
        outcomes = []
        for r in range(repeats):
            o = run_once(sc, seed=r)
            outcomes.append(o)
            if o.skipped:
                break
        rows.append(Row(sc, outcomes))
        log(f"  {name}: {'ok' if rows[-1].ok else 'MISS'} "
            f"({statistics.median(o.seconds for o in outcomes):.1f} s)"
            if not rows[-1].skipped else f"  {name}: skipped", file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    head = ("scenario", "expected", "steps", "run", "fix", "busy %", "margin", "stable", "s",
            "")
    lines = [head]
    for row in rows:
        os_ = [o for o in row.outcomes if not o.skipped]
        busy_ = statistics.mean(o.busy for o in os_) if os_ else math.nan
        margins = [o.margin for o in os_ if not math.isnan(o.margin)]
        secs = [o.seconds for o in os_ if not math.isnan(o.seconds)]
        lines.append((row.scenario.name, row.expected(), row.got(),
                      runs(sorted(o.run for o in os_)) if os_ else "",
                      os_[0].fix if os_ else "",
                      "" if math.isnan(busy_) else f"{100 * busy_:.0f}",
                      f"{100 * min(margins):.0f}" if margins else "",
                      row.stability(),
                      f"{statistics.median(secs):.1f}" if secs else "",
                      "" if row.ok else "MISS"))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines]
    text.insert(1, "  ".join("-" * w for w in widths).rstrip())
    for row in rows:
        if row.skipped:
            text.append(f"{row.scenario.name}: skipped: {row.outcomes[0].error}")
        text += [f"{row.scenario.name}: {p}" for p in row.problems]
    return "\n".join(text)


def burner() -> subprocess.Popen:
    """Another process keeping one CPU core busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--load", action="store_true",
                    help="run with another process burning one CPU core")
    ap.add_argument("--only", default="", help="NAME[,NAME]: these scenarios only")
    ap.add_argument("--fast", action="store_true", help="the quick subset (tests)")
    ap.add_argument("--list", action="store_true", help="list scenarios and their reasons")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats} must be at least 1.")
    names = list(SCENARIOS)
    if a.only:
        names = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            ap.error(f"--only: no scenario named {', '.join(unknown)}; "
                     f"there are {', '.join(SCENARIOS)}.")
    if a.fast:
        names = [n for n in names if SCENARIOS[n].fast]
    if a.list:
        for n in names:
            sc = SCENARIOS[n]
            e = sc.expect if isinstance(sc.expect, str) else runs(
                ["-" if v is None else v for v in sc.expect])
            print(f"{n:22s} {e:27s} {sc.why}")
        return 0
    print(f"torch {torch.__version__}, SimGPU h100, {a.repeats} repeat(s)"
          f"{', one core loaded' if a.load else ''}", flush=True)
    hog = burner() if a.load else None
    try:
        t0 = time.perf_counter()
        rows = run(names, a.repeats)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    print(table(rows))
    bad = [r.scenario.name for r in rows if not r.ok]
    print(f"{len(rows) - len(bad)}/{len(rows)} right in {time.perf_counter() - t0:.0f} s"
          + (f"; missed: {', '.join(bad)}" if bad else ""))
    one = [r for r in rows if isinstance(r.scenario.expect, str) and not r.skipped]
    right = [r for r in one if all(o.verdicts is not None and
                                   majority(r.scenario, o.verdicts) == r.scenario.expect
                                   for o in r.outcomes)]
    print(f"the steps' majority is the expected verdict, every repeat, "
          f"in {len(right)}/{len(one)} scenarios with one expected verdict"
          + (f"; not in: {', '.join(r.scenario.name for r in one if r not in right)}"
             if len(right) < len(one) else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
