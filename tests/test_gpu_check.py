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
    assert list(parts) == list("bcdegva")
    assert all(v["status"] == "skipped" and "time budget spent" in v["reason"]
               for v in parts.values())
    assert "time budget spent" in p.stdout.splitlines()[-1]


@pytest.mark.parametrize("args, message", [
    (["--parts", "bx"], "choose letters among bcdegva"),
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
