"""The deep fuzz: damaged files driven through every stage, never a traceback.

Mutants of ``.ctl`` files (``tests/timeline/test_ctl_fuzz.py``'s generator,
on the checked-in files of format versions 1-3) and of torch.profiler
traces (``tests/formats/kineto/test_kineto_fuzz.py``'s, on a real trace and
its export), and the adversarial cases of ``adversarial.py``, each go
through ``ctl.load`` → ``Timeline.warnings`` → ``ctl.analyze`` →
``summary()``/``to_dict()`` → ``ctl.plot`` → ``ctl.export_chrome`` → the
command ``cutimeline summary FILE`` (in process, its exit status and
stderr read). Each must either pass every stage or raise
``CutimelineError`` (the command: exit 2 with one line), and the work runs
in a worker process whose address space is capped at 1 GiB past what its
imports took (``fuzzsweep``): an allocation past it is a MemoryError,
counted (cutimeline's own "ran out of memory" sentence counts as one too).

The suite runs a sample (``N`` mutants, a fixed seed, a plot of every
``PLOT_EVERY``-th one that loads), within ~20 s; ``CUTIMELINE_FUZZ_N=1200
CUTIMELINE_FUZZ_PLOT_EVERY=1`` runs a larger sample in the suite's tests;
``CUTIMELINE_FUZZ_FULL=1 pytest -m bench -s tests/test_deep_fuzz.py`` the
full sweep (``test_full_sweep``: 1,200 mutants, the bombs at the issues'
sizes, every mutant that loads plotted), which prints the numbers.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import resource
import subprocess
import sys

import pytest

import adversarial
from fuzzsweep import Timeout, sweep as run_sweep, work

TESTS = pathlib.Path(__file__).resolve().parent
N = int(os.environ.get("CUTIMELINE_FUZZ_N", 160))
PLOT_EVERY = int(os.environ.get("CUTIMELINE_FUZZ_PLOT_EVERY", 8))
SEED = int(os.environ.get("FUZZ_SEED", 20250115))
MEMORY_CAP = 1 << 30     # bytes of address space the worker may add after its imports
TIME_LIMIT_S = 30        # per mutant
OOM = "ran out of memory"   # budgets.out_of_memory's words


def _module(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mutants(n: int = N, seed: int = SEED, scale: str = "suite") -> list[tuple[str, bytes, str]]:
    """(label, bytes, suffix): half ``.ctl`` mutants, half trace mutants,
    then every adversarial case (at the suite's scale, or the issues')."""
    ctl_fuzz = _module(TESTS / "timeline" / "test_ctl_fuzz.py", "deep_ctl_fuzz")
    kineto_fuzz = _module(TESTS / "formats" / "kineto" / "test_kineto_fuzz.py",
                          "deep_kineto_fuzz")
    data = TESTS / "data" / "ctl"
    bases = {v: (data / f"{v}.ctl").read_bytes() for v in ("v1", "v2", "v3")}
    out = [(f"ctl {label}", raw, ".ctl")
           for label, raw in ctl_fuzz.mutants(bases, n // 2, seed)]
    out += [(f"trace {label}", raw, suffix)
            for label, raw, suffix in kineto_fuzz.mutants(n - n // 2, seed)]
    big = scale == "issues"
    cases = dict(adversarial.CASES)
    cases.update({   # the bombs (and the streams) at a size that keeps the suite quick
        "10^8 rows in 100 KB": (lambda: adversarial.ctl_claimed_rows(
            10 ** 8 if big else 10 ** 7), ".ctl"),
        "meta.json inflating 64 MB": (lambda: adversarial.ctl_meta_bomb(
            (3 << 30) if big else (24 << 20)), ".ctl"),
        ".json.gz inflating 128 MB": (lambda: adversarial.trace_gzip_bomb(
            (1 << 30) if big else (80 << 20)), ".json.gz"),
        # analyze takes 5 s at 4,000 streams, 0.5 s at 1,000 (and runs twice
        # here: the CLI too); the memory the streams took is
        # tests/analysis/idle/test_overlap.py's test, at 400
        "4,000 one-kernel streams": (lambda: adversarial.as_ctl(adversarial.many_streams(
            4000 if big else 1000)), ".ctl")})
    out += [(f"case {name}", make(), suffix) for name, (make, suffix) in cases.items()]
    return out


# -- the worker ------------------------------------------------------------------------
def _cli(path: str) -> tuple[int, str]:
    from cutimeline.cli import main
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["--quiet", "summary", path])
    return rc, err.getvalue()


def _outcome(path: str, out_dir: str, plot: bool) -> dict:
    import cutimeline as ctl
    from cutimeline import CutimelineError
    stage, res = "load", {}
    try:
        tl = ctl.load(path)
        stage = "warnings"
        assert all(isinstance(w, str) for w in tl.warnings)
        repr(tl)
        stage = "analyze"
        rep = ctl.analyze(tl)
        stage = "summary"
        rep.summary()
        json.dumps(rep.to_dict(), allow_nan=False)
        if plot:
            stage = "plot"
            fig = ctl.plot(tl, os.path.join(out_dir, "plot.png"), report=rep, width=8,
                           dpi=30)
            w, h = fig.get_size_inches() * fig.dpi
            res["pixels"] = int(w * h)
        stage = "export"
        ctl.export_chrome(tl, os.path.join(out_dir, "export.json.gz"))
        res["outcome"] = "ok"
    except CutimelineError as exc:
        res.update(outcome="MemoryError" if OOM in str(exc) else "CutimelineError",
                   message=str(exc)[:300])
    except (Exception, Timeout) as exc:
        import traceback
        res.update(outcome=type(exc).__name__, message=str(exc)[:300],
                   traceback=traceback.format_exc()[-3000:])
    res["stage"] = stage
    if res["outcome"] not in ("Timeout", "MemoryError"):
        try:
            stage = "cli"
            rc, err = _cli(path)
            res["cli"] = rc
            if rc not in (0, 2) or "Traceback" in err or err.count("\n") > 1 and rc == 2:
                res.update(outcome="CLI traceback" if "Traceback" in err else "CLI",
                           message=err[-1500:], stage="cli")
        except (Exception, Timeout) as exc:
            res.update(outcome=type(exc).__name__, stage="cli", message=str(exc)[:300])
    res["max_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return res


def _work(folder: str, plot_every: int) -> None:
    import matplotlib

    import cutimeline as ctl
    matplotlib.use("Agg")
    # imports, the first analysis and plot are not the mutants' memory
    warm = ctl.load(TESTS / "data" / "ctl" / "v3.ctl")
    ctl.plot(warm, os.path.join(folder, "warm.png"), report=ctl.analyze(warm), width=8, dpi=30)
    work(folder, lambda path, ok: _outcome(path, folder, plot=plot_every > 0
                                           and ok % plot_every == 0),
         memory_cap=MEMORY_CAP, time_limit_s=TIME_LIMIT_S)


def sweep(folder: pathlib.Path, items, plot_every: int = PLOT_EVERY,
          timeout: float = 3600) -> list[dict]:
    return run_sweep(folder, items, __file__, str(plot_every), timeout=timeout)


def tally(results: list[dict]) -> dict:
    """The numbers a run reports: mutants, outcomes by type, stages reached,
    the largest RSS, the largest figure."""
    return {"mutants": len(results),
            "outcomes": dict(collections.Counter(r["outcome"] for r in results)),
            "refused at": dict(collections.Counter(r["stage"] for r in results
                                                   if r["outcome"] == "CutimelineError")),
            "cli exit": dict(collections.Counter(r.get("cli") for r in results)),
            "max_rss_mb": max(r["max_rss_kb"] for r in results) // 1024,
            "largest_figure_px": max([r.get("pixels", 0) for r in results])}


def _crashes(results: list[dict]) -> list[dict]:
    return [r for r in results if r["outcome"] not in ("ok", "CutimelineError")]


def _explain(crashes: list[dict]) -> str:
    return "\n\n".join(f"{r['label']}: {r['outcome']} in {r['stage']}: {r.get('message')}\n"
                       f"{r.get('traceback', '')}" for r in crashes[:5])


# -- the tests ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deepfuzz")
    return sweep(folder, mutants())


@pytest.mark.slow
def test_no_mutant_crashes_or_allocates_past_1_gib(swept):
    crashes = _crashes(swept)
    assert not crashes, f"{len(crashes)} of {len(swept)}: {tally(swept)}\n{_explain(crashes)}"


@pytest.mark.slow
def test_the_sweep_reaches_every_stage(swept):
    n = collections.Counter(r["outcome"] for r in swept)
    assert n["ok"] >= len(swept) // 5 and n["CutimelineError"] >= len(swept) // 5, n
    assert any(r.get("pixels") for r in swept)
    assert {r.get("cli") for r in swept} == {0, 2}
    # the adversarial cases: every one refused or read, none a crash
    cases = [r for r in swept if r["label"].startswith("case ")]
    assert len(cases) == len(adversarial.CASES)


@pytest.mark.slow
def test_figures_stay_bounded(swept):
    # 3,000 host threads drew 1400 x 126,509 px; lanes fold past a budget now
    # (the fuzz plots 8 in wide at 30 dpi; lanes take 100 in at most)
    assert max(r.get("pixels", 0) for r in swept) <= (8 * 30) * (120 * 30)


@pytest.mark.bench
@pytest.mark.skipif("CUTIMELINE_FUZZ_FULL" not in os.environ,
                    reason="the full sweep takes minutes: CUTIMELINE_FUZZ_FULL=1 -m bench")
def test_full_sweep(tmp_path):
    """The full run: ``CUTIMELINE_FUZZ_N`` (default 1,200) mutants and the
    adversarial cases at the issues' scale, every one that loads plotted."""
    n = int(os.environ.get("CUTIMELINE_FUZZ_N", 1200))
    results = sweep(tmp_path, mutants(n, scale="issues"), plot_every=1)
    numbers = tally(results)
    print(json.dumps(numbers, indent=1))
    crashes = _crashes(results)
    assert not crashes, f"{numbers}\n{_explain(crashes)}"


@pytest.mark.parametrize("name", ["/dev/zero", "/dev/urandom", "/dev/null", "folder"])
def test_a_path_that_is_no_regular_file_is_one_line_and_exit_2(tmp_path, name):
    path = adversarial.special_paths(str(tmp_path))[name]
    rc, err = _cli(path)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert path in err and ("regular files only" in err or "is a folder" in err)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = adversarial.special_paths(str(tmp_path))["FIFO"]
    proc = subprocess.run([sys.executable, "-m", "cutimeline", "summary", path],
                          capture_output=True, text=True, timeout=30, cwd=TESTS.parent)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{path} is a FIFO (named pipe); cutimeline reads regular files only" in proc.stderr


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _work(sys.argv[2], int(sys.argv[3]))
