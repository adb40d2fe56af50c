"""summary.py: the report's header names what the Timeline was read from
or made by, and the window its figures cover."""

import pytest

import cutimeline as ctl
from cutimeline.analysis.summary import source_words

from handmade import timeline


@pytest.mark.parametrize("meta, words", [
    ({"source": "kineto", "file": "run.json.gz"}, "read as a torch.profiler trace (run.json.gz)"),
    ({"source": "kineto"}, "read as a torch.profiler trace"),
    ({"source": "record"}, "recorded by cutimeline"),
    ({"source": "merge"}, "ranks merged by cutimeline"),
    ({"source": "handmade"}, "handmade"),    # other sources as they are
    ({}, "recording"),
])
def test_the_header_names_the_source(meta, words):
    assert source_words(meta) == words


def test_the_header_names_the_window_and_run_notes_follow():
    tl = timeline([(0, 5, 10, 20), (0, 105, 110, 120)], steps=[(0, 0, 100), (1, 100, 200)],
                  meta={"partial": "SIGTERM"})
    lines = ctl.analyze(tl).summary().splitlines()
    assert lines[1] == "cutimeline report — handmade, 2 steps, 200 ns over the whole recording"
    assert lines[2].startswith("PARTIAL: the recording was cut short (SIGTERM)")
    assert ctl.analyze(tl, window=1).summary().splitlines()[1].endswith(" over step 1")


def test_every_surface_says_what_made_the_steps_and_how_many_warnings():
    """An imported trace's step marker and the Timeline's warnings reach
    the summary's header, to_dict and the figure's subtitle alike."""
    from cutimeline.rendering.lanes.scene import Scene
    from cutimeline.rendering.titles import counts_text
    tl = timeline([(0, 5, 10, 20), (0, 105, 110, 120)], steps=[(0, 0, 100), (1, 100, 200)],
                  meta={"steps_from": "Optimizer.step#AdamW.step",
                        "import_warnings": ["12 kernels have no launch: drawn unlinked.",
                                            "3 events end before they begin: skipped."]})
    rep = ctl.analyze(tl)
    lines = rep.summary().splitlines()
    assert lines[1] == ("cutimeline report — handmade, 2 steps (ends of "
                        "Optimizer.step#AdamW.step), 200 ns over the whole recording")
    assert lines[2] == ("2 warnings on how it was read (Timeline.warnings): 12 kernels "
                        "have no launch: drawn unlinked. …")
    d = rep.to_dict()
    assert d["steps_from"] == "Optimizer.step#AdamW.step"
    assert d["warnings"] == list(tl.warnings) and len(d["warnings"]) == 2
    sub = counts_text(Scene(tl, None, report=rep))
    assert "2 steps (ends of Optimizer.step#AdamW.step)" in sub
    assert "2 warnings on how it was read (Timeline.warnings)" in sub
    plain = ctl.analyze(timeline([(0, 5, 10, 20)], steps=[(0, 0, 100)]))
    assert plain.to_dict()["warnings"] == [] and plain.to_dict()["steps_from"] is None
    assert plain.summary().splitlines()[1].endswith("1 step, 100 ns over the whole recording")


def test_a_trace_without_gpu_rows_keeps_its_whole_window():
    # nothing on the device: no device window to narrow to, a host-side report
    rep = ctl.analyze(timeline(ops=[("aten::add", 0, 5, 0)], meta={"source": "kineto"}))
    assert rep.settings["window"] == "the whole recording"
    lines = rep.summary().splitlines()
    assert lines[1].endswith("0 steps, 5 ns over the whole recording")
    assert "Not counted" not in rep.summary()


def test_the_first_line_is_the_judgement_in_words_and_every_surface_agrees():
    """The summary's first line, repr, to_dict and the step table all say
    the run's judgement (``headline.py``)."""
    from handmade import random_timeline
    rep = ctl.analyze(random_timeline(4, n=500, streams=2, steps=6))
    h = rep.to_dict()["verdict"]
    j = rep.judgement
    assert h["verdict"] == j.verdict == rep.overall["verdict"]
    assert rep.summary().startswith(f"Verdict: {h['text']} ({h['steps']}). ")
    assert repr(rep).endswith(f"{h['short']}>")
    assert rep.to_dict()["overall"]["verdict"] == h["verdict"]


def test_a_simulated_gpu_that_got_no_work_says_so():
    """Tensors left on the CPU under a SimGPU: not "record on a GPU", but
    that nothing reached the simulated device, and how to put it there."""
    import torch

    import cutimeline as ctl
    with ctl.record(device=ctl.SimGPU("h100")) as rec:
        for _ in range(3):
            a = torch.randn(64, 64)
            a @ a
            rec.step()
    rep = ctl.analyze(rec.timeline)
    text = rep.summary()
    assert text.splitlines()[0].startswith(
        "Verdict: host-only — no work reached the simulated device: the tensors are on "
        "the CPU")
    assert "record on a GPU" not in text and '.to("cuda")' in text
    assert "simulated GPU" in rep.to_dict()["verdict"]["change"]
