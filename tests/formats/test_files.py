"""files.py: ``ctl.load`` reads a .ctl file or a torch.profiler trace
(JSON, gzipped or not), and its Timeline's meta says which it read."""

import gzip
import pathlib

import pytest

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.formats.kineto import import_chrome

DATA = pathlib.Path(__file__).parents[1] / "data"
TRACE = DATA / "kineto" / "triton_example" / "triton_example.json.gz"


def test_a_gzipped_trace_reads_as_kineto():
    tl = ctl.load(TRACE)
    assert tl.meta["source"] == "kineto" and tl.meta["file"] == "triton_example.json.gz"
    assert len(import_chrome(TRACE).gpu) == len(tl.gpu) > 0
    header = ctl.analyze(tl).summary().splitlines()[1]
    assert header.startswith("cutimeline report — read as a torch.profiler trace "
                             "(triton_example.json.gz)")


def test_a_plain_json_trace_reads_as_kineto(tmp_path):
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()))
    tl = ctl.load(plain)
    assert tl.meta["source"] == "kineto" and len(tl.gpu) == len(ctl.load(TRACE).gpu)


def test_a_ctl_file_keeps_the_source_it_was_saved_with(tmp_path):
    assert ctl.load(DATA / "ctl" / "v2.ctl").meta["source"] == "test"
    ctl.load(TRACE).save(tmp_path / "t.ctl")   # an imported trace, saved
    back = ctl.load(tmp_path / "t.ctl")
    assert back.meta["source"] == "kineto"
    assert ctl.analyze(back).summary() == ctl.analyze(ctl.load(TRACE)).summary()


def test_a_recording_saved_reads_as_recorded_by_cutimeline(tmp_path):
    import torch
    gpu = ctl.SimGPU(seed=1)
    with ctl.record(device=gpu) as rec:
        a = torch.ones(64, 64, device="meta")
        for _ in range(2):
            a @ a
            gpu.synchronize()
    rec.timeline.save(tmp_path / "run.ctl")
    back = ctl.load(tmp_path / "run.ctl")
    assert back.meta["source"] == "record"
    header = ctl.analyze(back).summary().splitlines()[1]
    assert header.startswith("cutimeline report — recorded by cutimeline")
    assert " over the whole recording" in header


@pytest.mark.parametrize("make, match", [
    (lambda p: p, "is a folder; give a .ctl file or a torch.profiler trace"),
    (lambda p: p / "missing.ctl", "missing.ctl does not exist"),
    (lambda p: (p / "notes.txt", (p / "notes.txt").write_text("hello"))[0],
     "notes.txt is not a cutimeline file"),
    (lambda p: (p / "empty.json", (p / "empty.json").write_text('{"traceEvents": []}'))[0],
     "empty.json holds no cpu_op, kernel"),
])
def test_what_it_cannot_read_is_a_sentence_naming_the_file(tmp_path, make, match):
    with pytest.raises(CutimelineError, match=match):
        ctl.load(make(tmp_path))
