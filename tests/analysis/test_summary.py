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


def test_a_trace_without_gpu_rows_keeps_its_whole_window():
    # nothing on the device: no device window to narrow to, a host-side report
    rep = ctl.analyze(timeline(ops=[("aten::add", 0, 5, 0)], meta={"source": "kineto"}))
    assert rep.settings["window"] == "the whole recording"
    lines = rep.summary().splitlines()
    assert lines[1].endswith("0 steps, 5 ns over the whole recording")
    assert "Not counted" not in rep.summary()


def test_the_advice_quotes_its_own_causes_edit_not_a_sibling():
    """A sync-bound headline advises removing the read-backs: the number
    it quotes is the ``sync`` edit's, even where the ``copies`` edit (also
    of cause sync) gains more; that one leads when it gains 5 points more."""
    from types import SimpleNamespace

    from cutimeline.analysis.summary import _advice
    from cutimeline.analysis.replay.edits import EDITS

    def rep(*gains):
        preds = [SimpleNamespace(edit=EDITS[n], gain=g) for n, g in gains]
        return SimpleNamespace(what_if=lambda: sorted(preds, key=lambda p: -p.gain))
    h = {"cause": "sync", "help": "read values back less often"}
    close = _advice(rep(("copies", 0.22), ("sync", 0.20)), h)
    assert close == "Most likely to help: read values back less often — predicted −20% step time."
    far = _advice(rep(("copies", 0.40), ("sync", 0.20)), h)
    assert far.startswith("Most likely to help, by the replay: copy batches asynchronously")
    assert far.endswith("For the largest idle cause: read values back less often — "
                        "predicted −20% step time.")
