"""scripts/gpu_check.py: the dry run does every part on a CPU (SimGPU, CPU
overhead, tests/gpu all skipped) and reports each in the table and the JSON;
it leaves at most six files in --out, all named; a part that fails, hangs or
cannot run leaves the others alone; the time budget skips what it cannot
fit."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
VERDICTS = ROOT / "benchmarks" / "bench_verdicts.py"


def script():
    """scripts/gpu_check.py as a module (it imports nothing heavy)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(*args, env=None, timeout=240):
    import os
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_dry_run_does_every_part_on_a_cpu(tmp_path):
    p = run("--dry-run", "--out", tmp_path)
    assert "gpu_check DRY RUN" in p.stdout, p.stdout + p.stderr
    table = p.stdout[p.stdout.index("gpu_check DRY RUN"):].splitlines()
    rows = {line.split()[0]: line.split()[2] for line in table[3:]}
    # the verdict scenarios are judged by their own benchmark (a miss there
    # fails part v and the run's exit code): checked below
    v = rows.pop("v")
    assert rows == dict.fromkeys("bcdea", "ok"), "\n".join(table)
    assert p.returncode == (1 if v == "failed" else 0), p.stdout + p.stderr
    # a device slot brings back few files: six at most, directly in --out
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["check.log", "e_demo.ctl", "e_demo_step2.png", "e_demo_timeline.png",
                     "results.json"], files
    assert all((tmp_path / f).is_file() for f in files)
    allowed = script().OUT_FILES  # what a GPU run may add: d_compare.png
    assert set(files) < set(allowed) and len(allowed) <= 6
    res = json.loads((tmp_path / "results.json").read_text())
    parts = res["parts"]
    assert res["meta"]["dry_run"] and all(parts[k]["status"] == "ok" for k in "abcde")
    log = (tmp_path / "check.log").read_text()  # every part's output, in turn
    for key in "bcdeva":
        assert f"===== {key} {parts[key]['name']} =====" in log
    assert "gpu_check DRY RUN" in log  # and the table
    # v: the verdict scenarios, when this checkout has them
    vn = parts["v"]["numbers"]
    if VERDICTS.exists():
        assert v == ("ok" if vn["exit_code"] == 0 else "failed")
        assert "right in" in vn["table"] and vn["right"].count("/") == 1
    else:
        assert v == "skipped" and "bench_verdicts.py" in parts["v"]["reason"]
    # the goals, judged on the dry run's own numbers (the SimGPU's truth;
    # how close it comes is the simulator's business, not this test's)
    g = res["goals"]
    err = parts["b"]["numbers"]["aligner"]["events"]["every_event_abs_minus_truth_ns"]
    assert g["event_error_median_ns"]["value"] == err["median"]
    assert g["event_error_p99_ns"]["value"] == err["p99"]
    assert g["event_error_median_ns"]["met"] == (err["median"] <= 1000)
    assert g["truth_inside_bound"]["met"] is True
    assert g["gpu_time_median_abs_error"]["met"] is None  # no CUDA: not measured
    assert g["verdicts_all_right"]["met"] == (v == "ok" if VERDICTS.exists() else None)
    # b: the aligner against the simulator's truth, within its own bound
    b = parts["b"]["numbers"]["aligner"]
    assert b["spins"] == 60 and 0 < b["queued"] < 60
    ev = b["events"]
    # the SimGPU's clock readings err by at most the resolution it states, so
    # the fit's bound holds for every event, not most (measured: |error| at
    # most 1.16 µs against a bound of 2.07–2.12 µs over six runs)
    err, bound = ev["every_event_minus_truth_ns"], ev["clock"]["bound_max_ns"]
    assert max(-err["min"], err["max"]) <= bound + 1, (err, bound)
    assert ev["every_event_inside_bound"] == 1.0 and ev["within_bound_of_truth"] == 1.0
    assert ev["brackets_truth"] == 1.0
    # a slope off by Δ moves the ends of the span apart by Δ·span: no more
    # than the band (every event lies within bound_max of the truth)
    c = ev["clock"]
    assert abs(c["slope_ppm"] - ev["true_slope_ppm"]) * 1e-6 * c["span_ns"] <= \
        2 * c["bound_max_ns"] + 1
    assert ev["every_event_minus_truth_ns"]["n"] > 2 * 60
    assert b["stamps"]["status"] == "skipped" and "CUDA" in b["stamps"]["reason"]
    # c: µs per op of every variant, stamps skipped with the reason
    c = parts["c"]["numbers"]
    for workload in ("tiny", "transformer"):
        us = c[workload]["us_per_op"]
        assert set(us) == {"nothing", "bare mode", "cutimeline", "torch.profiler"}
        assert all(v > 0 for v in us.values()) and c[workload]["ops_per_call"] > 100
    assert c["stamps"]["status"] == "skipped"
    # d: the comparison ran; GPU time is n/a on a CPU, and says why
    d = parts["d"]["numbers"]
    assert d["tiny_cpu"]["match"]["fraction"] >= 0.99
    after = d["recorder_after_compare"]  # compare left no profiler on
    assert after["profiler_left_on"] == [] and after["teardown_cupti_env"] is None
    assert 0 < after["ratio"] < 2
    assert d["gpu_time"]["status"] == "n/a" and "CUDA" in d["gpu_time"]["reason"]
    # ... and the compiled MLP: forward and backward graphs, two steps, cut
    # rows (torch < 2.10 recompiles at each call under a mode: new graphs)
    from cutimeline.recording.compiled import _recompiles_under_modes
    comp = d["compiled"]["cutimeline"]
    assert comp["graph_calls"] == 4
    assert len(comp["graphs"]) == (4 if _recompiles_under_modes() else 2)
    assert comp["compiled_rows"] >= 4 and comp["compiled_ns"] > 0 and comp["gpu_busy"] > 0
    # e: the demo on a SimGPU and its timeline PNG
    e = parts["e"]["numbers"]
    assert e["demo"]["simulated"] and e["demo"]["gpu_rows"] > 0
    assert (tmp_path / e["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a: every GPU test was collected and skipped
    a = parts["a"]["numbers"]["counts"]
    assert a["passed"] == a["failed"] == a["errors"] == 0 and a["skipped"] >= 10


FAKE_PARTS = '''
import time

class Skip(Exception):
    pass

def part_b(part):
    part.put("x", 1)
    raise RuntimeError("boom")

def part_c(part):
    part.put("before", 2)
    time.sleep(60)

def part_d(part):
    raise Skip("no GPU here")

def part_e(part):
    return "fine"
'''


def test_a_failing_or_hanging_part_leaves_the_others(tmp_path):
    (tmp_path / "fake_parts.py").write_text(FAKE_PARTS)
    out = tmp_path / "out"
    p = run("--out", out, "--parts", "bcde", "--part-seconds", 2, timeout=60,
            env={"GPU_CHECK_PARTS": "fake_parts", "PYTHONPATH": tmp_path})
    assert p.returncode == 1, p.stdout + p.stderr  # a part failed
    parts = json.loads((out / "results.json").read_text())["parts"]
    assert parts["b"]["status"] == "failed" and "RuntimeError: boom" in parts["b"]["reason"]
    assert parts["b"]["numbers"] == {"x": 1}
    assert parts["c"]["status"] == "failed" and "stopped after" in parts["c"]["reason"]
    assert parts["c"]["numbers"] == {"before": 2}  # kept from before it hung
    assert parts["d"]["status"] == "skipped" and parts["d"]["reason"] == "no GPU here"
    assert parts["e"]["status"] == "ok" and parts["e"]["summary"] == "fine"
    log = (out / "check.log").read_text()
    assert "boom" in log and "Traceback" in log  # the traceback
    assert sorted(p.name for p in out.iterdir()) == ["check.log", "results.json"]
    table = p.stdout.splitlines()[-5:]
    assert [line.split()[2] for line in table[1:]] == ["failed", "failed", "skipped", "ok"]


def test_past_the_budget_parts_are_skipped_with_a_note(tmp_path):
    p = run("--dry-run", "--out", tmp_path, "--budget", 5, timeout=30)
    assert p.returncode == 0, p.stderr
    parts = json.loads((tmp_path / "results.json").read_text())["parts"]
    assert list(parts) == list("bcdeva")
    assert all(v["status"] == "skipped" and "time budget spent" in v["reason"]
               for v in parts.values())
    assert "time budget spent" in p.stdout.splitlines()[-1]


@pytest.mark.parametrize("args, message", [
    (["--parts", "bx"], "choose letters among bcdeva"),
    (["--budget", "0"], "--budget 0.0 must be a positive"),
    (["--part-seconds", "-1"], "--part-seconds -1.0 must be a positive"),
])
def test_bad_arguments_say_what_is_wrong(tmp_path, args, message):
    p = run("--out", tmp_path, *args, timeout=30)
    assert p.returncode == 2 and message in p.stderr


def test_out_must_be_a_folder(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    p = run("--out", f, timeout=30)
    assert p.returncode == 2 and "is a file; give a folder" in p.stderr
