"""commands.py: one vocabulary for the command line and the Python API. Every option
of every command has a Python twin (a keyword of the function it sets), -o/--out is
the file each command writes (the old spellings still parse), and the commands the
vocabulary added: plot's --overview/--memory/--what-if, export --format, --steps-from,
compare SCRIPT.py, record SCRIPT.py."""

from __future__ import annotations

import argparse
import gzip
import inspect
import json

import pytest

import cutimeline as ctl
from cutimeline.analysis.report import Report
from cutimeline.cli import export_format, main
from cutimeline.commands import command_parser
from cutimeline.comparison.result import Comparison
from cutimeline.comparison.runner import compare
from cutimeline.demo import run_demo
from cutimeline.errors import CutimelineError
from cutimeline.formats.chrome import export_chrome
from cutimeline.formats.files import load
from cutimeline.recording.ondemand import send_capture
from cutimeline.recording.script import record_script
from cutimeline.timeline.timeline import Timeline

# command -> the functions whose keywords its options set
TWINS = {
    "demo": (run_demo,),
    "plot": (ctl.plot, load),
    "summary": (ctl.analyze, load),
    "whatif": (ctl.analyze, Report.what_if, load),
    "export": (export_chrome, Timeline.to_parquet, load),
    "import": (load, Timeline.save),
    "merge": (ctl.merge, Timeline.save),
    "compare": (compare, Comparison.plot),
    "record": (record_script,),
    "capture": (send_capture,),
}
# options with no keyword of their own, and why
NO_TWIN = {
    "out": "the file or folder written: the path argument of ctl.plot(tl, path), "
           "export_chrome(tl, path), Timeline.save(path), Timeline.to_parquet(folder), "
           "Comparison.plot(path) (send_capture's out=); the demo's folder",
    "json": "the output's format: Python returns the objects (Report.to_dict(), "
            "Comparison.to_dict())",
    "format": "which writer runs: export_chrome or Timeline.to_parquet",
    "quiet": "no progress bars: the Python API draws none",
}


def subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen = {}
    for name, sub in action.choices.items():
        seen.setdefault(id(sub), (name, sub))
    return list(seen.values())


def options(sub):
    return [a for a in sub._actions if a.option_strings
            and not isinstance(a, argparse._HelpAction)]


def test_every_option_has_its_python_twin():
    parser = command_parser()
    commands = subparsers(parser)
    assert {name for name, _ in commands} == set(TWINS)
    missing = []
    for name, sub in commands:
        keywords = {k for f in TWINS[name] for k in inspect.signature(f).parameters}
        for action in options(sub):
            if action.help == argparse.SUPPRESS:   # an old spelling: of a shown option
                assert any(a.dest == action.dest and a.help != argparse.SUPPRESS
                           for a in options(sub)), (name, action.option_strings)
                continue
            # spelled as the keyword: --what-if is what_if= (--no-memory: memory=False)
            long = [o for o in action.option_strings if o.startswith("--")
                    and not o.startswith("--no-")]
            assert action.dest == long[0][2:].replace("-", "_"), action.option_strings
            if action.dest not in keywords and action.dest not in NO_TWIN:
                missing.append(f"{name} {'/'.join(action.option_strings)}")
    assert missing == [], f"options with no Python twin: {missing}"


def test_out_is_o_everywhere_and_the_old_spellings_parse():
    parser = command_parser()
    for name, sub in subparsers(parser):
        outs = [a for a in options(sub) if a.dest == "out"]
        if name == "summary":   # prints, writes nothing
            assert outs == []
            continue
        shown = [a for a in outs if a.help != argparse.SUPPRESS]
        assert len(shown) == 1 and shown[0].option_strings == ["-o", "--out"], name
        assert "--output" in {s for a in outs for s in a.option_strings}, name
    for argv in (["plot", "f.ctl", "--output", "x.png"], ["plot", "f.ctl", "-o", "x.png"],
                 ["whatif", "f.ctl", "--plot", "x.png"], ["what-if", "f.ctl", "--out", "x.png"],
                 ["export", "f.ctl", "--output=x.json.gz"]):
        assert parser.parse_args(argv).out.startswith("x."), argv


def test_a_required_out_left_out_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", "f.ctl"])
    assert e.value.code == 2 and "required: -o/--out" in capsys.readouterr().err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    import torch
    gpu = ctl.SimGPU(seed=1)
    with ctl.record(device=gpu, steps="manual", memory=True) as rec:
        a = torch.ones(256, 256, device="meta")
        for _ in range(4):
            b = a @ a
            b.sum().item()
            rec.step()
    path = tmp_path_factory.mktemp("rec") / "run.ctl"
    rec.timeline.save(path)
    return path


def test_plot_takes_plots_keywords(recorded, tmp_path, capsys):
    png = tmp_path / "t.png"
    assert main(["plot", str(recorded), "-o", str(png), "--no-overview", "--memory",
                 "--window", "1-2"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.strip() == f"wrote {png}"
    assert main(["plot", str(recorded), "-o", str(png), "--what-if", "--no-memory"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {png}: ")
    assert main(["plot", str(recorded), "-o", str(png), "--what-if", "sync",
                 "--no-memory"]) == 0
    assert main(["plot", str(recorded), "-o", str(png), "--what-if", "nope"]) == 2
    assert "the edits are" in capsys.readouterr().err


def test_export_writes_chrome_or_parquet(recorded, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    trace = tmp_path / "t.json.gz"
    assert main(["export", str(recorded), "-o", str(trace)]) == 0
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    folder = tmp_path / "pq"
    assert main(["export", str(recorded), "-o", str(folder)]) == 0
    assert (folder / "ops.parquet").exists() and (folder / "meta.json").exists()
    assert main(["export", str(recorded), "-o", str(tmp_path / "x.data"),
                 "--format", "parquet"]) == 0
    assert (tmp_path / "x.data" / "gpu.parquet").exists()
    assert main(["export", str(recorded), "-o", str(tmp_path / "x.txt")]) == 2
    assert "--format chrome|parquet" in capsys.readouterr().err


def test_export_format_by_name(tmp_path):
    assert export_format("a.json.gz", None) == "chrome" == export_format("a.JSON", None)
    assert export_format("run/", None) == "parquet" == export_format("run", None)
    assert export_format("a.parquet", None) == "parquet"
    assert export_format(str(tmp_path), None) == "parquet"
    assert export_format("a.json.gz", "parquet") == "parquet"
    with pytest.raises(CutimelineError, match="Cannot tell the format"):
        export_format("a.png", None)


def test_steps_from_reads_a_traces_steps_on_the_command_line(tmp_path, capsys):
    def ev(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts,
                "dur": dur, "args": {}}
    events = [e for n in range(3) for e in (
        ev("aten::mm", 100 * n + 10, 20), ev("train_step", 100 * n + 5, 60, "user_annotation"))]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "t.ctl"
    assert main(["import", str(trace), "-o", str(out), "--steps-from", "train_step"]) == 0
    tl = ctl.load(out)
    assert tl.step_numbers().tolist() == [0, 1, 2] and tl.meta["steps_from"] == "train_step"
    assert main(["summary", str(trace), "--steps-from", "nope"]) == 2
    assert "no range named 'nope'" in capsys.readouterr().err


SCRIPT = """
import sys
import torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for i in range(int(sys.argv[1])):
    opt.zero_grad()
    net(torch.randn(8, 16)).sum().backward()
    opt.step()
    with open(__file__ + ".steps", "a") as f:
        f.write("x")
"""


def test_compare_runs_a_script_under_both_profilers(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    png = tmp_path / "cmp.png"
    assert main(["compare", str(script), "1000", "--device", "cpu", "--steps", "2",
                 "--warmup", "1", "-o", str(png)]) == 0
    out = capsys.readouterr().out
    assert "cutimeline vs torch.profiler on cpu" in out and "(100.00 %)" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    # each of the three passes stopped once it had warmup + steps optimizer steps
    assert (tmp_path / "train.py.steps").read_text() == "x" * 3 * 2
    assert main(["compare", str(script), "2", "--device", "cpu", "--steps", "2",
                 "--warmup", "1"]) == 2
    assert "ran 2 optimizer steps; compare needs" in capsys.readouterr().err
    cmp = ctl.compare(str(script), argv=["10"], steps=2, warmup=1, device="cpu")
    assert cmp.match.fraction == 1.0 and len(cmp.ours.step_numbers()) == 2
    with pytest.raises(CutimelineError, match="a Python script"):
        ctl.compare(str(tmp_path / "missing.py"))
