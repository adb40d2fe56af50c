"""script.py: a training script run unedited as __main__ (or a module as with
python -m), its optimizer steps (or the ends of named ranges) found, the
warm-up skipped and the next steps recorded; on a SimGPU the whole run maps
CUDA to it. The command, ``cutimeline record``: test_cli.py."""

from __future__ import annotations

import runpy
import sys

import pytest
import torch

import cutimeline as ctl
from cutimeline.errors import CutimelineError
from cutimeline.recording import script as script_module
from cutimeline.recording.control import firststeps
from cutimeline.recording.devicespec import device_spelling, recording_device
from cutimeline.recording.script import Script, record_script
from cutimeline.timeline.schema import SpanKind

# Unedited CUDA code: the is_available idiom, a loss read every step.
# argv: steps [raise@K | exit@K]; writes PATH.started first and PATH.done last.
TRAIN = """
import sys
import torch
from torch import nn
open(__file__ + ".started", "w").close()
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
opt = torch.optim.AdamW(model.parameters())
for i in range(int(sys.argv[1])):
    x = torch.randn(8, 16, device=device)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.3f}")
    if sys.argv[2:] == [f"raise@{i}"]:
        raise ValueError(f"boom at step {i}")
    if sys.argv[2:] == [f"exit@{i}"]:
        sys.exit(3)
with open(__file__ + ".done", "w") as f:
    f.write(f"{sum(float(p.detach().double().sum()) for p in model.parameters())!r}")
print("finished")
"""


@pytest.fixture
def train(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return path


def test_a_cuda_script_runs_unedited_on_the_simulated_device(train, capsys):
    argv, path = list(sys.argv), list(sys.path)
    tl = record_script(train, ["100"], device="sim", skip=1, steps=3)
    assert tl.meta["simulated"] and len(tl.gpu) > 0
    assert tl.step_numbers().tolist() == [1, 2, 3] and tl.meta["steps"] == [1, 3]
    assert tl.meta["script"] == str(train) and tl.meta["script_argv"] == ["100"]
    out = capsys.readouterr().out
    assert "step 0 loss" in out and "step 2 loss" in out  # reads outside the window too
    # stopped in the 4th optimizer.step(), the last recorded step's end
    assert "step 3" not in out and not train.with_suffix(".py.done").exists()
    assert sys.argv == argv and sys.path == path
    # the script's folder came first on sys.path, its argv as python gives it
    seen = write(train.parent, "argv.py", "import sys\nprint(sys.argv, sys.path[0])\n")
    record_script(seen, ["a", "-b"], device="cpu")
    assert capsys.readouterr().out.strip() == f"{[str(seen), 'a', '-b']} {train.parent}"


def test_cuda_calls_and_a_pinned_dataloader_on_the_simulated_device(tmp_path):
    path = write(tmp_path, "loader.py", """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
loader = DataLoader(data, batch_size=8, pin_memory=True)
model = nn.Linear(16, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
""")
    tl = record_script(path, device="sim:a100", skip=2, steps=4)
    assert tl.meta["device_name"] == "SimGPU a100 (simulated)" and len(tl.gpu) > 0
    assert tl.step_numbers().tolist() == [2, 3, 4, 5]


def test_the_script_fails_its_error_comes_out_unchanged_and_the_recording_is_saved(
        train, tmp_path):
    out = tmp_path / "run.ctl"
    with pytest.raises(ValueError, match="boom at step 3"):
        record_script(train, ["100", "raise@3"], device="sim", steps=5, out=out)
    tl = ctl.load(out)   # steps 1-3, and the failing one's start
    assert tl.step_numbers().tolist() == [1, 2, 3]
    assert tl.meta["steps"] == [1, 4] and tl.meta["partial_step"]
    with pytest.raises(SystemExit) as exit_:
        record_script(train, ["100", "exit@2"], device="cpu", steps=5, out=out)
    assert exit_.value.code == 3 and ctl.load(out).step_numbers().tolist() == [1, 2]
    with pytest.raises(ValueError, match="boom at step 0"):  # in the warm-up: from the start
        record_script(train, ["100", "raise@0"], device="cpu", skip=2, out=out)
    assert ctl.load(out).step_numbers().tolist() == [0]


def test_a_script_with_no_optimizer_step_is_recorded_whole(tmp_path):
    path = write(tmp_path, "infer.py", """
import torch
x = torch.randn(16, 16)
for _ in range(3):
    x = torch.tanh(x @ x)
print(float(x.sum()))
""")
    tl = record_script(path, device="sim")
    assert "steps" not in tl.meta and len(tl.step_numbers()) == 0
    names = set(tl.decode(tl.ops["name"]).tolist())
    assert {"aten::mm", "aten::tanh"} <= names


def test_a_script_that_ends_in_the_warmup_or_the_window(train, tmp_path):
    out = tmp_path / "run.ctl"
    with pytest.raises(CutimelineError, match=r"ran 2 optimizer steps and ended before the "
                                              r"first recorded one: skip=2"):
        record_script(train, ["2"], device="cpu", skip=2, out=out)
    assert not out.exists()
    tl = record_script(train, ["4"], device="cpu", skip=1, steps=10)
    assert tl.step_numbers().tolist() == [1, 2, 3]


def test_keep_going_runs_the_script_to_its_end_unchanged(train, tmp_path, capsys):
    tl = record_script(train, ["6"], device="cpu", steps=2, keep_going=True)
    assert tl.step_numbers().tolist() == [1, 2]
    assert "finished" in capsys.readouterr().out
    recorded = train.with_suffix(".py.done").read_text()
    sys.argv = [str(train), "6"]   # the same script run plainly: the same numbers
    try:
        runpy.run_path(str(train), run_name="__main__")
    finally:
        sys.argv = sys.argv[:1]
    assert train.with_suffix(".py.done").read_text() == recorded


def test_a_module_runs_as_python_m_runs_it(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    write(pkg, "__init__.py", "")
    write(pkg, "loop.py", TRAIN)
    monkeypatch.chdir(tmp_path)   # python -m finds modules in the working folder
    path = list(sys.path)
    tl = record_script(module="trainpkg.loop", argv=["5"], device="sim", steps=2)
    assert tl.step_numbers().tolist() == [1, 2] and tl.meta["script"] == "-m trainpkg.loop"
    assert (pkg / "loop.py.started").exists() and sys.path == path
    assert capsys.readouterr().out.count(" loss ") == 2   # stopped in the third step
    with pytest.raises(CutimelineError, match="No module named 'trainpkg.nope'"):
        record_script(module="trainpkg.nope")
    with pytest.raises(CutimelineError, match="no trainpkg.__main__"):
        record_script(module="trainpkg")
    for name in [m for m in sys.modules if m.startswith("trainpkg")]:
        monkeypatch.delitem(sys.modules, name)


def test_steps_from_names_the_ranges_that_end_steps(tmp_path):
    path = write(tmp_path, "ranges.py", """
import torch
x = torch.randn(8, 8)
for _ in range(6):
    with torch.profiler.record_function("train_step"):
        y = (x @ x).relu()
    with torch.autograd.profiler.record_function("log"):
        y.sum()
""")
    tl = record_script(path, device="cpu", skip=1, steps=3, steps_from="train_step")
    assert tl.step_numbers().tolist() == [1, 2, 3]
    assert tl.meta["steps_from"] == "train_step" and tl.meta["steps_rule"] == "steps_from"
    users = tl.decode(tl.spans["name"][tl.spans.kind == SpanKind.USER]).tolist()
    assert users.count("train_step") == 3   # each step's range, as a user span too


def test_seconds_stops_the_recording_at_a_steps_end(train, monkeypatch):
    clock = iter(range(0, 10**15, 10**9))   # each reading a second later
    monkeypatch.setattr(firststeps, "_now", lambda: next(clock))
    tl = record_script(train, ["100"], device="cpu", steps=10, seconds=2.5)
    assert tl.step_numbers().tolist() == [1, 2, 3]


def test_under_torchrun_each_rank_writes_its_file(train, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    out = tmp_path / "ranks"
    record_script(train, ["5"], device="cpu", steps=2, out=out)
    tl = ctl.load(out / "rank-1.ctl")
    assert tl.meta["rank"] == 1 and tl.meta["world_size"] == 2
    assert script_module.saved_path(out) == str(out / "rank-1.ctl")


@pytest.mark.parametrize("kwargs, message", [
    (dict(path="missing.py"), r"'missing.py' is not a Python script \(.py\) that exists"),
    (dict(path="train.txt"), "is not a Python script"),
    (dict(), "Give a script to run"),
    (dict(argv="100"), "must be a list of str"),
    (dict(steps=0), r"steps=0 \(--steps\) must be a whole number of steps ≥ 1"),
    (dict(skip=-1), r"skip=-1 \(--skip\) must be a whole number of steps ≥ 0"),
    (dict(seconds=0), r"seconds=0 \(--seconds\) must be a number of seconds > 0"),
    (dict(steps_from=""), "must name the record_function ranges"),
    (dict(device="sim:x100"), "names no simulated GPU; give 'sim:h100', 'sim:a100' or"),
    (dict(device="tpu"), "is not understood"),
    (dict(out="nowhere/run.ctl"), "its folder .* does not exist"),
    (dict(keep_going="yes"), "must be True or False"),
])
def test_bad_input_is_a_sentence_and_the_script_never_starts(train, tmp_path, monkeypatch,
                                                             kwargs, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.txt").write_text("")
    kwargs = {"path": train, "argv": ["5"], **kwargs}
    if not kwargs["path"] or "Give" in message:
        kwargs.pop("path")
    with pytest.raises(CutimelineError, match=message):
        record_script(**kwargs)
    assert not train.with_suffix(".py.started").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py", "train.txt"]


def test_the_device_spellings_take_a_simulated_profile():
    assert device_spelling(" Sim:A100 ", "record(device=...)") == "sim:a100"
    assert recording_device("sim:h200", resolve=True).profile.name == "h200"
    with ctl.record(device="sim:a100") as rec:
        torch.ones(8, 8, device="meta").mul(2)
    assert rec.timeline.meta["device_name"] == "SimGPU a100 (simulated)"
    with pytest.raises(CutimelineError, match="timing='stamps'"):
        ctl.record(device="sim:a100", timing="stamps")
    with pytest.raises(CutimelineError) as info:
        device_spelling("sim:b200", "--device ...")
    assert str(info.value) == ("--device 'sim:b200' names no simulated GPU; give 'sim:h100', "
                               "'sim:a100' or 'sim:h200' ('sim' is 'sim:h100').")


def test_compare_and_record_share_the_script():
    from cutimeline.comparison import script as compared
    assert issubclass(compared.Script, Script) and compared.Enough is script_module.Enough
    assert issubclass(script_module.Enough, BaseException)
    assert not issubclass(script_module.Enough, Exception)
