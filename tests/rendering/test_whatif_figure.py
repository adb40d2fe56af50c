"""ctl.plot(tl, what_if=...): the recording over its replay, step times labelled.

A small training loop is recorded on a simulated H100 over ``meta``
tensors, fed by a DataLoader with ``num_workers=0`` whose batches each
take host time to build, and reading the loss back every step: both the
``data`` and the ``sync`` fixes apply. The figure's numbers are checked
against the ``Prediction`` that ``Report.what_if()`` gives for the same
Timeline, its time axis against the two Timelines' lengths.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import cutimeline as ctl
from cutimeline.analysis.replay.edits import EDITS
from cutimeline.text import figure_text, fmt_ns
from cutimeline.errors import CutimelineError
from cutimeline.rendering.figure import plot
from cutimeline.rendering.whatif import (arrow, change_text, chosen, gain_text, plot_what_if,
                                         step_labels)

from handmade import timeline

META = torch.device("meta")
MS = 1_000_000


class SlowBatches(Dataset):
    """CPU batches that each cost ``cost_s`` of busy host time to build."""

    def __init__(self, n: int, cost_s: float):
        g = torch.Generator().manual_seed(0)
        self.n, self.cost_s = n, cost_s
        self.x, self.y = torch.randn(1024, 512, generator=g), torch.randint(0, 10, (1024,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        deadline = time.thread_time() + self.cost_s
        while time.thread_time() < deadline:
            pass
        return self.x, self.y


@pytest.fixture(scope="module")
def recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(META)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowBatches(5, 6e-3), batch_size=None, num_workers=0)
    with ctl.record(device=ctl.SimGPU("h100", seed=0)) as rec:
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(META)), y.to(META))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()  # logging every step: a sync
    tl = rec.timeline
    return tl, ctl.analyze(tl)


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def prediction(rep, name: str):
    return next(p for p in rep.what_if() if p.edit.name == name)


def test_png_and_agg_figure_share_one_time_axis(recorded, tmp_path):
    tl, rep = recorded
    out = tmp_path / "whatif.png"
    # wide: the step cells keep labels whatever the recording's preamble
    fig = plot(tl, out, what_if="data", report=rep, width=40)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    assert isinstance(fig.canvas, FigureCanvasAgg)
    fig.canvas.draw()  # renders on Agg, without pyplot
    assert len(fig.axes) == 4
    rec_lanes, new_lanes, rec_strip, new_strip = fig.axes
    span = (tl.end_ns - tl.start_ns) / 1e6
    for ax in fig.axes:
        assert ax.get_xlim() == pytest.approx((0, span))
    # the replay keeps the origin and ends earlier: its last step cell too
    rec_x = max(t.get_position()[0] for t in rec_strip.texts)
    new_x = max(t.get_position()[0] for t in new_strip.texts)
    assert new_x < rec_x
    assert rec_strip.get_yticklabels()[0].get_text() == "recorded"
    assert new_strip.get_yticklabels()[0].get_text() == "predicted"
    assert fig.cutimeline_prediction.edit.name == "data"


def test_labels_carry_the_predicted_step_times(recorded):
    tl, rep = recorded
    p = prediction(rep, "data")
    # wide: the long labels fit. A predicted step is ~1.6 ms of a ~40 ms
    # recording; at width=40 its "step 0 · 1.61 → 1.61 ms, ±0%" needed
    # ~150 of its ~160 px, and a longer start-up preamble dropped the prefix
    fig = plot(tl, what_if="data", report=rep, width=60)
    labels = texts(fig.axes[3])  # one per step, in time order
    assert len(labels) == len(p.steps)
    for row, label in zip(p.steps, labels):
        was, now = int(row["base_ns"]), int(row["predicted_ns"])
        assert fmt_ns(now) in label and gain_text(1 - now / was) in label
        assert arrow(was, now) in label or label == f"{fmt_ns(now)}\n{gain_text(1 - now / was)}"
    # the first names its step where it fits (a longer start-up shortens it)
    assert labels[0] in {figure_text(t) for t in step_labels({"number": 0, "duration_ns": 0}, p)}
    # the recorded strip says the recorded times (the predicted one is
    # against the steps without the recorder's cost)
    for row in rep.steps:
        assert any(fmt_ns(int(row["duration_ns"])) in t for t in texts(fig.axes[2]))
    head = fig.texts[0].get_text()
    assert head == change_text(p)
    assert head.startswith("DataLoader(num_workers>=2, pin_memory=True): ")
    assert f"{arrow(p.step_ns, p.predicted_step_ns)} per step" in head
    assert gain_text(p.gain) in head and p.gain > 0.2  # the fetch dominated each step


def test_what_if_true_draws_the_top_fix(recorded):
    tl, rep = recorded
    preds = rep.what_if()
    top = next(p for p in preds if p.edit.complete)
    fig = plot(tl, what_if=True, report=rep)
    assert fig.cutimeline_prediction is top
    assert fig.texts[0].get_text() == change_text(top)
    assert top.edit.code in fig.axes[3].get_title(loc="left")


def test_chosen_takes_the_complete_fix_that_gains_most(recorded):
    _, rep = recorded
    preds = rep.what_if()
    assert all(p.edit.name != "recorder" for p in preds)  # no fix of the user's
    partial = [p for p in preds if not p.edit.complete]
    assert chosen(partial + [p for p in preds if p not in partial], True).edit.complete
    assert chosen(partial, True) is partial[0]  # alone, the partial one
    assert chosen(preds, "sync").edit.name == "sync"
    with pytest.raises(CutimelineError, match="no fix applies"):
        chosen([], True)


@pytest.mark.parametrize("bad", ["nope", 3, False, ("data",)])
def test_bad_what_if_values_name_the_choices(recorded, bad):
    tl, rep = recorded
    with pytest.raises(CutimelineError) as e:
        plot(tl, what_if=bad, report=rep)
    assert ", ".join(EDITS) in str(e.value)


def test_an_edit_that_does_not_apply_raises_the_replay_error():
    # one step with a kernel and no fetch, sync or Python gap: "data" removes nothing
    tl = timeline(gpu=[(0, 1 * MS, 2 * MS, 3 * MS)], steps=[(0, 0, 4 * MS)])
    with pytest.raises(CutimelineError, match="'data' does not apply"):
        plot(tl, what_if="data")


def test_what_if_refuses_ax_and_memory(recorded):
    tl, rep = recorded
    from matplotlib.figure import Figure
    ax = Figure().add_subplot()
    with pytest.raises(CutimelineError, match="leave ax and memory unset"):
        plot(tl, what_if="data", report=rep, ax=ax)
    with pytest.raises(CutimelineError, match="leave ax and memory unset"):
        plot(tl, what_if="data", report=rep, memory=True)


def test_a_step_window_draws_each_from_its_own_start(recorded):
    tl, rep = recorded
    fig = plot_what_if(tl, what_if="data", report=rep, window=(2, 3), width=40)
    steps = {int(r["number"]): r for r in rep.steps}
    assert fig.axes[0].get_xlim()[1] >= (steps[3]["end_ns"] - steps[2]["begin_ns"]) / 1e6 * 0.5
    # the predicted strip labels steps 2 and 3 only, in whichever of a
    # label's forms fits its cell (the cells' widths follow the recorded
    # steps' times: a loaded machine may shorten the labels, not change
    # which steps they name)
    pred = fig.cutimeline_prediction
    forms = {n: {figure_text(t) for t in step_labels({"number": n, "duration_ns": 0}, pred)}
             for n in (2, 3, 4)}
    shown = set(texts(fig.axes[3]))
    assert shown <= forms[2] | forms[3], (shown, forms)
    assert shown & forms[2] and shown & forms[3]
    assert not shown & (forms[4] - forms[2] - forms[3])
    assert "steps 2–3" in fig.texts[-1].get_text()


def test_step_labels_and_gain_words():
    steps = np.zeros(2, [("number", np.int64), ("base_ns", np.int64),
                         ("predicted_ns", np.int64), ("busy_frac", np.float64),
                         ("predicted_busy_frac", np.float64)])
    steps["number"] = [0, 1]
    steps["base_ns"] = [20 * MS, 1_200 * MS]
    steps["predicted_ns"] = [10 * MS, 800 * MS]
    steps["predicted_busy_frac"] = [0.5, 0.9]

    class P:
        pass
    p = P()
    p.steps = steps
    row = {"number": 1, "duration_ns": 800 * MS}
    assert step_labels(row, p) == ["step 1 · 1.2 s → 800 ms, −33% · GPU 90%",
                                   "step 1 · 1.2 s → 800 ms, −33%", "1.2 s → 800 ms, −33%",
                                   "1.2 s → 800 ms\n−33%", "800 ms\n−33%", "800 ms"]
    assert step_labels({"number": 0, "duration_ns": 10 * MS}, p)[2] == "20 → 10 ms, −50%"
    assert [gain_text(g) for g in (0.19, -0.034, 0.004)] == ["−19%", "+3%", "±0%"]

