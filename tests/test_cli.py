"""The ``cutimeline`` command: every subcommand in process, errors as one line;
one vocabulary of windows and devices for the command line and the Python API."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline import progress
from cutimeline.cli import Progress, main, parse_window
from cutimeline.errors import CutimelineError
from cutimeline.numeric.engines import resolve_engine

ALEXNET = next((Path(__file__).parent / "data" / "kineto" / "critical_path"
                / "alexnet").glob("*.json.gz"))


@pytest.mark.parametrize("text, window", [
    ("3", 3), ("3-5", (3, 5)), ("3:5", (3, 5)), ("0.5s-0.75s", (0.5, 0.75)),
    (" 2 ", 2), (".25s-1s", (0.25, 1.0)),
])
def test_parse_window(text, window):
    assert parse_window(text) == window


@pytest.mark.parametrize("text", ["", "a", "3-", "0.75s-0.5s", "1s", "-3", "5-3", "(3, 5)"])
def test_bad_window_is_a_sentence(text):
    with pytest.raises(CutimelineError, match="not understood") as info:
        parse_window(text)
    assert f"--window {text!r}" in str(info.value) and "0.5s-0.75s" in str(info.value)


# -- one vocabulary: the API takes every spelling --window takes, and more ---------

@pytest.mark.parametrize("window, canonical", [
    (3, 3), ("3", 3), (np.int64(3), 3), ((3, 5), (3, 5)), ("3-5", (3, 5)), ("3:5", (3, 5)),
    (range(3, 6), (3, 5)), ((0.5, 0.75), (0.5, 0.75)), ("0.5s-0.75s", (0.5, 0.75)),
    ((0, 1.5), (0.0, 1.5)), ((np.int64(1), np.int64(2)), (1, 2)),
])
def test_the_api_parser_is_the_clis(window, canonical):
    from cutimeline.timeline.windows import parse_window as api
    got = api(window)
    assert got == canonical and type(got) is type(canonical)
    if isinstance(window, str):
        assert parse_window(window) == got


@pytest.mark.parametrize("window", [
    True, -1, (5, 3), (0.75, 0.5), (1, 2, 3), [3, 5], range(0), range(5, 2, -1), "soon",
    ("3", "5"), None, 2.5,
])
def test_a_bad_window_lists_the_accepted_forms(window):
    from cutimeline.timeline.windows import parse_window as api
    with pytest.raises(CutimelineError, match="not understood") as info:
        api(window)
    for form in ('"3-5"', "(3, 5)", "(0.5, 0.75)", '"0.5s-0.75s"'):
        assert form in str(info.value)


@pytest.fixture(scope="module")
def four_steps():
    import torch
    gpu = ctl.SimGPU(seed=1)
    with ctl.record(device=gpu, steps="manual") as rec:
        a = torch.ones(64, 64, device="meta")
        for _ in range(4):
            a @ a
            gpu.synchronize()
            rec.step()
    return rec.timeline


@pytest.mark.parametrize("text, same", [("2", 2), ("1-2", (1, 2)), ("1:2", range(1, 3))])
def test_window_bounds_and_plot_take_the_clis_spellings(four_steps, text, same, tmp_path):
    tl = four_steps
    assert tl.window_bounds(text) == tl.window_bounds(same)
    ctl.plot(tl, tmp_path / "w.png", window=text)
    assert (tmp_path / "w.png").stat().st_size > 0


def test_a_window_in_seconds_reads_alike_as_text_and_floats(four_steps):
    end_s = (four_steps.end_ns - four_steps.start_ns) / 1e9
    assert four_steps.window_bounds(f"0s-{end_s:.9f}s") == \
        four_steps.window_bounds((0.0, float(end_s)))


@pytest.mark.parametrize("text, same", [("2", 2), ("1-2", (1, 2)), ("0s-1s", (0.0, 1.0))])
def test_analyze_reports_a_text_window_exactly_as_its_canonical_form(four_steps, text, same):
    assert ctl.analyze(four_steps, window=text).to_dict() == \
        ctl.analyze(four_steps, window=same).to_dict()


def test_version_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"cutimeline {ctl.__version__}\n"
    p = subprocess.run([sys.executable, "-m", "cutimeline", "--version"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == f"cutimeline {ctl.__version__}"


@pytest.mark.parametrize("device, words", [
    ("tpu", "--device 'tpu' is not understood; give 'auto', 'cuda', 'cuda:N' or 'sim'"),
    ("cpu", "--device 'cpu' records no GPU"),
    ("cuda:x", "--device 'cuda:x' is not understood"),
])
def test_a_bad_demo_device_is_one_line_exit_2(device, words, tmp_path, capsys):
    assert main(["demo", "--device", device, "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutimeline: error: ") and err.count("\n") == 1
    assert words in err and not (tmp_path / "d").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_demo_on_a_numbered_gpu_without_cuda_says_so(tmp_path, capsys):
    assert main(["demo", "--device", "cuda:1", "--out", str(tmp_path / "d")]) == 2
    assert "--device 'cuda:1' needs CUDA" in capsys.readouterr().err


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "alexnet.ctl"
    assert main(["import", str(ALEXNET), "-o", str(out)]) == 0
    return out


def test_import_writes_a_ctl_that_loads_as_the_trace(imported, capsys):
    tl = ctl.load(imported)
    direct = ctl.load(ALEXNET)
    assert len(tl.ops) == len(direct.ops) and len(tl.gpu) == len(direct.gpu)


def test_summary_of_ctl_and_of_the_trace_itself_agree(imported, capsys):
    assert main(["summary", str(imported)]) == 0
    from_ctl = capsys.readouterr().out
    assert main(["summary", str(ALEXNET)]) == 0
    from_trace = capsys.readouterr().out
    assert from_ctl == from_trace and from_ctl.startswith("Verdict: ")
    assert from_ctl.splitlines()[1].startswith("cutimeline report")
    assert main(["summary", str(imported), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    tl = ctl.load(imported)  # small: the command analyses it with the NumPy twins
    assert d["settings"]["engine"] == resolve_engine("auto", len(tl.ops) + len(tl.gpu))
    assert d == json.loads(json.dumps(ctl.analyze(tl, engine=d["settings"]["engine"])
                                      .to_dict()))


def test_summary_window_narrows_the_report(four_steps, tmp_path, capsys):
    four_steps.save(tmp_path / "four.ctl")
    assert main(["summary", str(tmp_path / "four.ctl"), "--window", "1-2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [s["number"] for s in d["steps"]] == [1, 2]


def test_plot_and_export(imported, tmp_path, capsys):
    png, trace = tmp_path / "t.png", tmp_path / "t.json.gz"
    assert main(["plot", str(imported), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["export", str(imported), "-o", str(trace)]) == 0
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    back = ctl.load(trace)
    assert len(back.gpu) == len(ctl.load(imported).gpu)
    assert capsys.readouterr().out.count("wrote ") == 2


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield 0o644
    os.umask(old)


@pytest.mark.parametrize("spelling", ["sim", " SIM "])
def test_demo_on_the_simulator_writes_its_three_files(spelling, tmp_path, capsys, umask_022):
    out = tmp_path / "demo"
    assert main(["demo", "--device", spelling, "--steps", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SIMULATED GPU" in text and "cutimeline report" in text
    assert {p.name for p in out.iterdir()} == {"demo.ctl", "timeline.png", "demo.json.gz"}
    assert len(ctl.load(out / "demo.ctl").step_numbers()) == 2
    # the .ctl and the figure follow the umask (the trace: test below)
    for name in ("demo.ctl", "timeline.png"):
        assert (out / name).stat().st_mode & 0o777 == umask_022, name


def test_an_export_follows_the_umask(imported, tmp_path, capsys, umask_022):
    trace = tmp_path / "t.json.gz"
    assert main(["export", str(imported), "-o", str(trace)]) == 0
    assert trace.stat().st_mode & 0o777 == umask_022


@pytest.mark.parametrize("argv, words", [
    (["summary", "{tmp}/missing.ctl"], "does not exist"),
    (["summary", "{tmp}/foreign.txt"], "foreign.txt"),
    (["summary", "{tmp}"], "is a folder"),
    (["plot", "{ctl}", "-o", "{tmp}/no/such/dir/t.png"], "no/such/dir"),
    (["export", "{ctl}", "-o", "{tmp}/no/such/dir/t.json.gz"], "no/such/dir"),
    (["import", str(ALEXNET), "-o", "{tmp}/no/such/dir/t.ctl"], "no/such/dir"),
    (["plot", "{ctl}", "-o", "{tmp}/t.png", "--window", "x"], "--window 'x'"),
    (["summary", "{ctl}", "--window", "999"], "999"),
])
def test_errors_are_one_line_and_exit_2(argv, words, imported, tmp_path, capsys):
    (tmp_path / "foreign.txt").write_text("not a trace\n")
    argv = [a.format(tmp=tmp_path, ctl=imported) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutimeline: error: ") and err.count("\n") == 1, err
    assert words in err
    assert "Traceback" not in err


@pytest.mark.parametrize("exc", [ZeroDivisionError("division by zero"),
                                 IndexError("index -2 is out of bounds")])
def test_a_bug_prints_its_traceback_and_asks_for_a_report(exc, monkeypatch, capsys):
    import cutimeline.cli as cli

    def broken(args):
        raise exc
    monkeypatch.setattr(cli, "_cmd_summary", broken)
    assert main(["summary", "x.ctl"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "in broken" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"cutimeline: internal error: {type(exc).__name__}: {exc}")
    assert f"cutimeline {ctl.__version__}" in last and "please report it" in last


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import cutimeline.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_cmd_summary", interrupted)
    assert main(["summary", "x.ctl"]) == 130
    assert capsys.readouterr().err == "cutimeline: interrupted\n"


def test_usage_errors_exit_2_through_argparse(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plot", "x.ctl"])  # -o is required
    assert e.value.code == 2


def test_python_dash_m_runs_the_same_command():
    p = subprocess.run([sys.executable, "-m", "cutimeline", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "demo" in p.stdout and "merge" in p.stdout


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_draws_on_a_terminal_only():
    tty = _Tty()
    bar = Progress("importing x", stream=tty, after_s=0.0, width=10)
    bar("parsing", 0.5)
    bar("linking", 1.0)
    bar.done()
    text = tty.getvalue()
    assert "[#####.....]  50% parsing" in text and "[##########] 100% linking" in text
    assert text.endswith("\n") and "done in" in text
    plain = io.StringIO()
    quiet = Progress("importing x", stream=plain, after_s=0.0)
    quiet("parsing", 0.5)
    quiet.done()
    assert plain.getvalue() == ""


def test_progress_bar_waits_before_showing_short_work():
    tty = _Tty()
    bar = Progress("x", stream=tty, after_s=60.0)
    bar("parsing", 0.5)
    bar.done()
    assert tty.getvalue() == ""


def _fetch_bound(tmp_path):
    """Three 10 ms steps, each a 7 ms DataLoader fetch then 3 ms of GPU work,
    saved as a .ctl."""
    from cutimeline.timeline.schema import SpanKind

    from handmade import timeline
    spans = [(SpanKind.DATA, "next(DataLoader)", 10_000_000 * k, 10_000_000 * k + 7_000_000)
             for k in range(3)]
    gpu = [(0, 10_000_000 * k + 8_000_000, 10_000_000 * k + 9_000_000,
            10_000_000 * k + 11_000_000) for k in range(3)]
    path = tmp_path / "fetch.ctl"
    timeline(gpu=gpu, spans=spans, steps=[(k, 10_000_000 * k, 10_000_000 * (k + 1))
                                          for k in range(3)]).save(path)
    return path


def test_whatif_prints_the_ranked_edits_and_json(tmp_path, capsys):
    path = _fetch_bound(tmp_path)
    assert main(["whatif", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the verdict first, in the summary's words; then the ranking, the
    # verdict's fix marked
    assert lines[0].startswith("Verdict: input-bound — batches ready when the step asks")
    assert lines[1].startswith("what if") and lines[2].split()[0] == "*data"
    assert "num_workers" in lines[2] and lines[2].split()[1].startswith("-")
    assert lines[-1] == "(* the verdict's fix: the complete fix that gains most)"
    assert main(["whatif", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d[0]["edit"] == "data" and d[0]["steps"][1]["predicted_ns"] == 3_000_000


def test_whatif_plot_draws_the_top_fix_or_the_edit_named(tmp_path, capsys):
    path = _fetch_bound(tmp_path)
    png = tmp_path / "whatif.png"
    assert main(["whatif", str(path), "--plot", str(png)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert png.read_bytes()[:4] == b"\x89PNG" and last.startswith(f"wrote {png}: DataLoader(")
    assert main(["whatif", str(path), "--plot", str(png), "--edit", "data", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["edit"] == "data" and "per step" in out.err
    assert main(["whatif", str(path), "--edit", "data"]) == 2
    assert "give -o/--out too" in capsys.readouterr().err
    assert main(["whatif", str(path), "--plot", str(png), "--edit", "nope"]) == 2
    assert "the edits are data, " in capsys.readouterr().err


def test_whatif_without_gpu_rows_is_one_line_exit_2(tmp_path, capsys):
    from handmade import timeline
    path = tmp_path / "host.ctl"
    timeline(ops=[("aten::add", 0, 10, 0)], steps=[(0, 0, 20)]).save(path)
    assert main(["whatif", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutimeline: error: ") and "no what-if predictions" in err


# -- progress on a terminal, --quiet, the compile notice ----------------------------

@pytest.fixture
def terminal(monkeypatch):
    """Progress shown at once; the test makes stderr this terminal (pytest
    puts its own stderr back after the fixtures ran)."""
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)
    return _Tty()


def test_quiet_anywhere_on_the_line_hides_the_progress_bar(terminal, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal)
    out = str(tmp_path / "x.ctl")
    assert main(["import", str(ALEXNET), "-o", out]) == 0
    # tqdm's bar or the plain one ("done in" is the plain one's): shown
    assert "importing " in terminal.getvalue()
    for argv in (["--quiet", "import", str(ALEXNET), "-o", out],
                 ["import", str(ALEXNET), "-o", out, "--quiet"],
                 ["-q", "summary", out]):
        terminal.seek(0)
        terminal.truncate()
        assert main(argv) == 0
        assert terminal.getvalue() == ""


def test_a_long_stage_shows_its_name_until_it_ends(terminal, imported, monkeypatch, capsys):
    import threading
    shown = threading.Event()
    real = ctl.analyze

    class Watch(_Tty):
        def write(self, s):
            if "analysing…" in s:
                shown.set()
            return super().write(s)
    monkeypatch.setattr(sys, "stderr", Watch())

    def slow(*args, **kw):
        assert shown.wait(60), "no progress line while analysing"
        return real(*args, **kw)
    monkeypatch.setattr(ctl, "analyze", slow)
    assert main(["summary", str(imported)]) == 0
    assert capsys.readouterr().out.startswith("Verdict: ")
    assert sys.stderr.getvalue().endswith("\r")  # the line is cleared at the end
    shown.clear()
    monkeypatch.setattr(ctl, "analyze", real)
    assert main(["--quiet", "summary", str(imported)]) == 0


def test_merge_reports_progress(terminal, tmp_path, monkeypatch, capsys):
    from fakeranks import fake_ranks
    monkeypatch.setattr(sys, "stderr", terminal)
    for tl in fake_ranks(1, world=2, n=8):
        tl.save(tmp_path / f"rank-{tl.meta['rank']}.ctl")
    seen = []
    ctl.merge(tmp_path, progress=lambda stage, f: seen.append((stage, f)))
    fractions = [f for _, f in seen]
    assert seen[0][0] == "rank 0" and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert main(["merge", str(tmp_path), "-o", str(tmp_path / "m.ctl")]) == 0
    assert f"merging {tmp_path.name}" in terminal.getvalue()


def _fake_compile(module="cutimeline.numeric.intervals"):
    from types import SimpleNamespace

    from numba.core import event
    data = {"dispatcher": SimpleNamespace(py_func=SimpleNamespace(__module__=module))}
    event.start_event("numba:compile", data=data)
    event.end_event("numba:compile", data=data)


@pytest.mark.parametrize("quiet", [False, True])
def test_compiling_is_said_at_most_once_and_not_with_quiet(quiet, imported, monkeypatch,
                                                          capsys):
    import cutimeline.cli as cli
    real = ctl.analyze

    def compiling(*args, **kw):  # as a first run on a cold cache: two kernels compile
        _fake_compile()
        _fake_compile("cutimeline.analysis.idle.queues")
        return real(*args, **kw)
    monkeypatch.setattr(cli, "COMPILE_NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(ctl, "analyze", compiling)
    assert main((["--quiet"] if quiet else []) + ["summary", str(imported)]) == 0
    err = capsys.readouterr().err
    assert err.count("compiling cutimeline's kernels (once, up to ~") == (0 if quiet else 1)
    _fake_compile()  # after the command: nobody listens
    assert capsys.readouterr().err == ""


def test_tqdm_draws_the_bars_when_it_is_installed(terminal, tmp_path, monkeypatch):
    import types
    calls = []

    class FakeTqdm:
        def __init__(self, **kw):
            calls.append(("new", kw["desc"], kw["file"] is terminal, kw["leave"]))
            self.n = 0

        def set_postfix_str(self, s, refresh=True):
            calls.append(("stage", s))

        def update(self, k):
            self.n += k

        def close(self):
            calls.append(("close", self.n))
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    monkeypatch.setattr(sys, "stderr", terminal)
    out = str(tmp_path / "x.ctl")
    assert main(["import", str(ALEXNET), "-o", out]) == 0
    assert calls[0] == ("new", f"importing {ALEXNET.name}", True, False)
    assert ("stage", "parsing") in calls and calls[-1] == ("close", 950)  # 95%: building
    calls.clear()
    assert main(["--quiet", "import", str(ALEXNET), "-o", out]) == 0
    assert calls == [] and terminal.getvalue() == ""


def test_a_stage_without_a_fraction_shows_its_name_and_time():
    tty = _Tty()
    bar = Progress("analysing", stream=tty, after_s=0.0)
    bar("3 s", None)
    bar.clear()
    assert tty.getvalue().startswith("\ranalysing… 3 s") and tty.getvalue().endswith("\r")
    quiet = Progress("analysing", stream=_Tty(), after_s=0.0, quiet=True)
    quiet("3 s", None)
    assert quiet.stream.getvalue() == ""


def test_capture_asks_an_armed_process_for_its_next_steps(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "import time, torch, cutimeline as ctl\n"
        f"ctl.arm(steps=2, signal=None, options={{'device': 'cpu', 'measure': False}}, "
        f"out_dir={str(tmp_path)!r})\n"
        "print('ready', flush=True)\n"
        "m = torch.nn.Linear(4, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "x = torch.randn(3, 4); t = time.time()\n"
        "while time.time() - t < 60:\n"
        "    m(x).sum().backward(); opt.step(); opt.zero_grad(); time.sleep(0.01)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(ctl.__file__).parents[1])}
    child = subprocess.Popen([sys.executable, str(job)], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        out = tmp_path / "cap.ctl"
        assert main(["capture", str(child.pid), "--steps", "2", "--out", str(out),
                     "--timeout", "50"]) == 0
        tl = ctl.load(out)
        assert len(tl.step_numbers()) == 2 and len(tl.ops)
    finally:
        child.kill()
        child.wait()


def test_capture_of_a_process_that_is_not_armed_is_an_error(capsys):
    assert main(["capture", str(os.getpid()), "--steps", "1", "--timeout", "0"]) == 2
    assert "not armed" in capsys.readouterr().err


def test_running_out_of_memory_is_one_line_naming_the_file_exit_2(imported, monkeypatch,
                                                                   capsys):
    def starved(*a, **k):
        raise MemoryError
    monkeypatch.setattr(ctl, "analyze", starved)
    assert main(["-q", "summary", str(imported)]) == 2
    err = capsys.readouterr().err
    size = os.path.getsize(imported)
    assert err == (f"cutimeline: error: {imported} ({size:,} bytes) needs more memory than "
                   f"this process could get (MemoryError); run on a machine with more memory, "
                   f"or look at a window of it (--window).\n")


def test_a_window_past_the_end_is_one_line_exit_2(four_steps, tmp_path, capsys):
    four_steps.save(tmp_path / "r.ctl")
    assert main(["-q", "summary", str(tmp_path / "r.ctl"), "--window", "9s-10s"]) == 2
    err = capsys.readouterr().err
    assert "Window 9–10 s lies outside the Timeline's work and selects nothing" in err
    assert err.count("\n") == 1


# -- record: a training script run unedited (ctl.record_script) ----------------------

# argv: steps [raise@K | exit@K | interrupt@K]; PATH.started first, "finished" last
TRAIN = """
import sys
import torch
from torch import nn
open(__file__ + ".started", "w").close()
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(16, 4).to(device)
opt = torch.optim.AdamW(model.parameters())

def fail(i):
    raise ValueError(f"boom at step {i}")

for i in range(int(sys.argv[1])):
    loss = model(torch.randn(8, 16, device=device)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.3f}")
    if sys.argv[2:] == [f"raise@{i}"]:
        fail(i)
    if sys.argv[2:] == [f"exit@{i}"]:
        sys.exit(3)
    if sys.argv[2:] == [f"interrupt@{i}"]:
        raise KeyboardInterrupt
print("finished")
"""


@pytest.fixture
def train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # the default -o lands here
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path / "train.py"


def test_record_runs_a_cuda_script_on_the_simulated_device_and_says_the_verdict(
        train, capsys):
    assert main(["record", "--device", "sim", "--steps", "3", "train.py", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3] == ("recorded 3 optimizer steps of train.py (steps 1–3) on SimGPU h100 "
                       "(simulated)")
    assert out[-2].startswith("Verdict: ") and out[-1] == "wrote cutimeline-train.ctl"
    assert out[2].startswith("step 2 loss") and "finished" not in out   # stopped
    tl = ctl.load(train.parent / "cutimeline-train.ctl")
    assert len(tl.gpu) > 0 and tl.step_numbers().tolist() == [1, 2, 3]


def test_record_continue_lets_the_script_finish(train, capsys):
    assert main(["record", "--device", "cpu", "--skip", "0", "--steps", "2", "--continue",
                 "-o", "run.ctl", "train.py", "5"]) == 0
    out = capsys.readouterr().out
    assert "step 4 loss" in out and "finished" in out and "wrote run.ctl" in out
    assert ctl.load(train.parent / "run.ctl").step_numbers().tolist() == [0, 1]


def test_record_a_script_that_raises_shows_its_traceback_and_keeps_the_recording(
        train, capsys):
    assert main(["record", "--device", "sim", "train.py", "100", "raise@2"]) == 1
    err = capsys.readouterr().err
    # Python's own traceback of the script, from its first line: no frame of ours
    assert err.startswith("Traceback (most recent call last):\n  File \"train.py\", line ")
    assert "in fail\n" in err and "ValueError: boom at step 2" in err
    assert "cutimeline/" not in err and "internal error" not in err
    assert err.splitlines()[-1] == ("cutimeline: train.py raised ValueError after 3 optimizer "
                                    "steps; wrote cutimeline-train.ctl: what was recorded up "
                                    "to there")
    assert ctl.load(train.parent / "cutimeline-train.ctl").step_numbers().tolist() == [1, 2]


@pytest.mark.parametrize("ending, status, words", [
    ("exit@1", 3, "exited with status 3 after 2 optimizer steps"),
    ("interrupt@1", 130, "interrupted after 2 optimizer steps"),
])
def test_record_exits_with_the_scripts_status(train, capsys, ending, status, words):
    assert main(["record", "--device", "cpu", "train.py", "100", ending]) == status
    assert words in capsys.readouterr().err
    assert ctl.load(train.parent / "cutimeline-train.ctl").step_numbers().tolist() == [1]


def test_record_a_script_with_no_optimizer_step_records_it_whole(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "infer.py").write_text("import torch\nx = torch.ones(8, 8).cuda()\n"
                                       "print(float((x @ x).sum()))\n")
    assert main(["record", "--device", "sim", "infer.py"]) == 0
    out = capsys.readouterr().out
    assert ("recorded the whole run of infer.py (no optimizer step ended) on SimGPU h100 "
            "(simulated)") in out and "wrote cutimeline-infer.ctl" in out
    assert len(ctl.load(tmp_path / "cutimeline-infer.ctl").gpu) > 0


def test_record_a_script_that_ends_in_its_warmup_is_exit_2(train, capsys):
    assert main(["record", "--device", "cpu", "--skip", "3", "train.py", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutimeline: error: train.py ran 2 optimizer steps and ended "
                          "before the first recorded one: skip=3 (--skip)")
    assert not (train.parent / "cutimeline-train.ctl").exists()


def test_record_a_module_with_its_arguments(train, capsys):
    (train.parent / "loop.py").write_text(TRAIN)
    assert main(["record", "--device", "cpu", "--steps", "2", "-m", "loop", "4"]) == 0
    out = capsys.readouterr().out
    assert "recorded 2 optimizer steps of -m loop (steps 1–2)" in out
    assert ctl.load(train.parent / "cutimeline-loop.ctl").step_numbers().tolist() == [1, 2]
    sys.modules.pop("loop", None)


@pytest.mark.parametrize("argv, words", [
    (["missing.py"], "'missing.py' is not a Python script (.py) that exists"),
    (["notes.txt"], "'notes.txt' is not a Python script (.py) that exists"),
    (["-m", "no_such_module_here"], "No module named 'no_such_module_here' to run"),
    (["-m"], "-m needs the module to run"),
    ([], "record needs a script to run"),
    (["--steps", "0", "train.py"], "steps=0 (--steps) must be a whole number of steps ≥ 1"),
    (["--skip", "-1", "train.py"], "skip=-1 (--skip) must be a whole number of steps ≥ 0"),
    (["--seconds", "0", "train.py"], "seconds=0.0 (--seconds) must be a number of seconds"),
    (["--device", "sim:b200", "train.py"], "device='sim:b200' (--device) names no simulated"),
    (["-o", "no/such/folder.ctl", "train.py"], "does not exist"),
])
def test_record_bad_input_is_one_line_exit_2_and_runs_nothing(train, capsys, argv, words):
    (train.parent / "notes.txt").write_text("")
    assert main(["record", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutimeline: error: ") and err.count("\n") == 1 and words in err
    assert sorted(p.name for p in train.parent.iterdir()) == ["notes.txt", "train.py"]


def test_python_m_cutimeline_record_is_the_same_command(train):
    p = subprocess.run([sys.executable, "-m", "cutimeline", "record", "--device", "cpu",
                        "train.py", "100", "exit@1"], capture_output=True, text=True,
                       timeout=120, cwd=train.parent)
    assert p.returncode == 3 and "step 1 loss" in p.stdout
    assert "exited with status 3 after 2 optimizer steps" in p.stderr
    assert (train.parent / "cutimeline-train.ctl").exists()


@pytest.mark.parametrize("options, said", [
    (["--steps", "10"], "recorded 3 optimizer steps of train.py (steps 1–3) (host rows only: "
     "no GPU here; device 'sim' simulates one); the script ended after 4, 3 of the 10 asked "
     "for"),
    (["--seconds", "1e-9"], "recorded 1 optimizer step of train.py (step 1) (host rows "
     "only: no GPU here; device 'sim' simulates one); seconds=1e-09 (--seconds) reached"),
])
def test_record_says_why_it_recorded_fewer_steps(train, capsys, options, said):
    assert main(["record", "--device", "cpu", *options, "train.py", "4"]) == 0
    assert said in capsys.readouterr().out.splitlines()
