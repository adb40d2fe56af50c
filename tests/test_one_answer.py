"""One answer per run: every surface gives the run's verdict and its first
fix in the same words (``analysis/headline.py``): ``summary()``'s first
line, the figure's title and step strip, ``repr`` and the HTML repr,
``to_dict()``, ``cutimeline summary`` and ``cutimeline whatif``."""

import html

import numpy as np
import pytest

import cutimeline as ctl
from cutimeline.analysis.headline import headline
from cutimeline.cli import main
from cutimeline.rendering.strip import verdict_line
from cutimeline.timeline.schema import OpFlag, SpanKind

from handmade import random_timeline, timeline

MS = 1_000_000


def fetch_bound():
    """input-bound: a 7 ms fetch, then a 2 ms kernel, per 10 ms step."""
    gpu, spans, steps = [], [], []
    for k in range(4):
        t = 10 * MS * k
        spans.append((SpanKind.DATA, "next(DataLoader, num_workers=0)", t, t + 7 * MS))
        gpu.append((0, t + 8 * MS, t + 9 * MS, t + 11 * MS))
        steps.append((k, t, t + 10 * MS))
    return timeline(gpu=gpu, spans=spans, steps=steps)


def read_back():
    """sync-bound: a 1.5 ms kernel the host waits for and reads, then 0.5 ms
    of Python: without the read the host runs ahead (a 1.5 ms step, the
    GPU's), without the Python the read still drains the queue (1.7 ms)."""
    gpu, syncs, ops, steps = [], [], [], []
    us = 1_000
    for k in range(4):
        t = 2200 * us * k
        ops.append(("aten::mm", t + 100 * us, t + 110 * us, OpFlag.LAUNCH))
        gpu.append((0, t + 110 * us, t + 120 * us, t + 1620 * us))
        ops.append(("aten::_local_scalar_dense", t + 200 * us, t + 1630 * us, OpFlag.SYNC))
        syncs.append((t + 200 * us, t + 1630 * us))
        steps.append((k, t, t + 2200 * us))
    return timeline(gpu=gpu, syncs=syncs, ops=ops, steps=steps)


def gpu_bound():
    """GPU-bound: kernels back to back, launched far ahead."""
    gpu = [(0, k * 1000, 10 * MS * k + 1000, 10 * MS * (k + 1) + 1000) for k in range(4)]
    return timeline(gpu=gpu, steps=[(k, k * 1000, k * 1000 + 500) for k in range(4)])


def gpu_bound_fp32():
    """GPU-bound on fp32 matmuls, recorded on a SimGPU: its verdict names a
    GPU-side fix (``replay/gpuside.py``) with its predicted gain."""
    import torch
    w = torch.randn(4096, 4096, device="meta")
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        for _ in range(4):
            x = torch.randn(8192, 4096, device="meta")
            for _ in range(3):
                x = (x @ w).relu()
            rec.step()
    return rec.timeline


CASES = {"input-bound": fetch_bound, "sync-bound": read_back, "GPU-bound": gpu_bound,
         "GPU-bound, a GPU-side fix": gpu_bound_fp32,
         "random": lambda: random_timeline(4, n=500, streams=2, steps=6),
         "host-only": lambda: timeline(ops=[("aten::add", 0, 5, 0)], steps=[(0, 0, 10)])}


@pytest.mark.parametrize("case", CASES)
def test_every_surface_says_the_runs_verdict_and_its_fix(case, tmp_path, capsys):
    tl = CASES[case]()
    rep = ctl.analyze(tl)
    h = headline(rep)
    v = h["verdict"]
    if case != "random":
        assert v == case.split(",")[0]
    if case == "GPU-bound, a GPU-side fix":
        assert h["fix"]["edit"] in ("tf32", "bf16") and h["gain"] > 0.3
        assert "would save a predicted" in h["text"] and "matmuls are" in h["text"]
    first = rep.summary().splitlines()[0]
    assert first.startswith(f"Verdict: {h['text']} ({h['steps']}). ")
    if h["change"]:
        assert first.endswith(f"Change first: {h['change']}.")
    assert repr(rep).endswith(f", {h['short']}>") and h["short"].startswith(v)
    assert html.escape(first) in rep._repr_html_()
    d = rep.to_dict()
    assert d["overall"]["verdict"] == v == d["verdict"]["verdict"]
    assert d["verdict"]["text"] == h["text"]
    if rep.lanes is not None:  # the figure: the title, and the strip's cells
        assert verdict_line(rep) == f"Verdict: {h['short']} ({h['steps']})"
        fig = ctl.plot(tl, report=rep, flows=0)
        assert verdict_line(rep) in [t.get_text() for t in fig.texts] + \
            [fig.axes[0].get_title(loc="left")]
        said = {int(t.get_text().split(" · ")[0][5:]): t.get_text().split(" · ")[1]
                for t in fig.axes[3].texts if t.get_text().startswith("step ")}
        verdicts = dict(zip(rep.steps["number"].tolist(), rep.steps["verdict"].tolist()))
        for n, word in said.items():  # a cell wide enough to name a verdict: its step's
            if word.endswith("-bound") or word in ("mixed", "unknown"):
                assert word == verdicts[n]
    path = tmp_path / "run.ctl"
    tl.save(path)
    assert main(["summary", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == first
    if rep.lanes is not None and rep.what_if():
        assert main(["whatif", str(path)]) == 0
        assert capsys.readouterr().out.splitlines()[0] == \
            f"Verdict: {h['text']} ({h['steps']})."


def test_the_fix_named_is_the_top_complete_fix_of_the_what_if_ranking():
    for make in (fetch_bound, read_back):
        rep = ctl.analyze(make())
        h = headline(rep)
        top = next(p for p in rep.what_if() if p.edit.complete)
        assert h["fix"]["edit"] == top.edit.name and h["gain"] == pytest.approx(top.gain)
        assert np.isclose(rep.overall["gain"], top.gain)
