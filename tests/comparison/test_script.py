"""script.py: a training script as compare's workload — run as __main__ per pass,
its optimizer steps are the steps, stopped once the pass has them (the command,
``cutimeline compare SCRIPT.py``: test_commands.py)."""

from __future__ import annotations

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.comparison.script import Script
from cutimeline.errors import CutimelineError

SCRIPT = """
import sys
import torch
net = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for i in range(int(sys.argv[1])):
    opt.zero_grad()
    net(torch.randn(4, 8)).sum().backward()
    opt.step()
    with open(__file__ + ".steps", "a") as f:
        f.write("x")
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_the_optimizer_steps_are_the_steps_and_the_script_stops_after_them(script):
    bounds = []
    times = Script(script, ["1000"]).timed(2, 3, lambda: None, lambda: bounds.append(1))
    assert times.shape == (3,) and (times > 0).all() and times.dtype == np.int64
    assert len(bounds) == 5   # one boundary per optimizer step, warm-up included
    assert (script.parent / "train.py.steps").read_text() == "x" * 4   # stopped at the 5th


def test_compare_takes_a_scripts_path(script):
    cmp = ctl.compare(str(script), argv=["100"], steps=2, warmup=1, device="cpu")
    assert cmp.match.fraction == 1.0 and cmp.match.unexplained() == []
    assert len(cmp.ours.step_numbers()) == 2 and len(cmp.theirs.step_numbers()) == 2


def test_a_script_that_ends_early_or_fails_is_a_sentence(script, tmp_path):
    with pytest.raises(CutimelineError, match="ran 2 optimizer steps; compare needs "
                                              r"warmup \+ steps = 1 \+ 3 = 4"):
        Script(script, ["2"]).timed(1, 3, lambda: None)
    with pytest.raises(CutimelineError, match="exited with status 3 after 1 optimizer"):
        Script(script, ["1", "3"]).timed(1, 3, lambda: None)
    with pytest.raises(CutimelineError, match="a Python script"):
        Script(tmp_path / "missing.py")
    with pytest.raises(CutimelineError, match="must be a list of str"):
        Script(script, "100")
    with pytest.raises(CutimelineError, match="gives a script its arguments"):
        ctl.compare(lambda: None, argv=["1"])
