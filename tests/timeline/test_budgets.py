"""budgets.py: what a file may claim, held to its bytes before anything is read.

The memory bombs of issue 38 (a 100 KB ``.ctl`` claiming 10^8 rows, a
``meta.json`` inflating 1,000×, a ``.json.gz`` inflating past its budget)
and the zip damage of issue 37 (flags, methods, CRCs) are refused with a
sentence, and refusing them allocates almost nothing; paths that are no
regular file are refused without a read.
"""

from __future__ import annotations

import tracemalloc

import pytest

import adversarial

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline import budgets


def _refused(tmp_path, data: bytes, words: str, suffix: str = ".ctl",
             most_bytes: int = 64 << 20) -> None:
    path = tmp_path / f"bomb{suffix}"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(CutimelineError) as info:
            ctl.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert words in str(info.value), str(info.value)
    assert path.name in str(info.value)
    assert peak < most_bytes, f"{peak / 2**20:.0f} MiB to refuse it"


def test_rows_past_what_the_file_can_hold_are_refused(tmp_path):
    _refused(tmp_path, adversarial.ctl_claimed_rows(10 ** 7),
             "claims 10,000,000 rows in", most_bytes=8 << 20)


def test_a_meta_json_that_inflates_past_its_budget_is_refused(tmp_path):
    _refused(tmp_path, adversarial.ctl_meta_bomb(24 << 20), "its meta.json claims",
             most_bytes=4 << 20)


def test_a_meta_json_that_lies_about_its_size_inflates_no_further(tmp_path):
    _refused(tmp_path, adversarial.ctl_meta_bomb(24 << 20, honest=False), "damaged",
             most_bytes=8 << 20)


@pytest.mark.parametrize("honest", [True, False])
def test_a_gzip_trace_that_inflates_past_its_budget_is_refused(tmp_path, honest):
    # refused as the stream passes the budget (~72 MB here), never much
    # past it, whatever size its trailer claims
    data = adversarial.trace_gzip_bomb(80 << 20, honest=honest)
    most = budgets.text_budget(len(data))
    assert most < 80 << 20
    _refused(tmp_path, data, f"inflates past {most:,} bytes", ".json.gz",
             most_bytes=most + most // 4 + (8 << 20))  # a bytearray grows by 1/8


@pytest.mark.parametrize("make, words", [
    (adversarial.ctl_zip_flag, "flagged encrypted"),
    (adversarial.ctl_zip_method, "compression method 99"),
    (adversarial.ctl_bad_crc, "Bad CRC-32"),
    (adversarial.ctl_truncated, "not a cutimeline file"),
])
def test_zip_damage_is_a_sentence(tmp_path, make, words):
    _refused(tmp_path, make(), words)


@pytest.mark.parametrize("name, kind", [("/dev/zero", "character device"),
                                        ("/dev/urandom", "character device"),
                                        ("FIFO", "FIFO")])
def test_a_path_that_is_no_regular_file_is_refused_unread(tmp_path, name, kind):
    path = adversarial.special_paths(str(tmp_path))[name]
    for load in (ctl.load, lambda p: ctl.Timeline and __import__(
            "cutimeline.formats.kineto", fromlist=["import_chrome"]).import_chrome(p),
            lambda p: __import__("cutimeline.timeline.timeline",
                                 fromlist=["load"]).load(p)):
        with pytest.raises(CutimelineError, match=f"is a {kind}.*regular files only"):
            load(path)


def test_budgets_leave_real_files_alone(tmp_path):
    # the checked-in traces and files of every format version load as before
    import pathlib
    data = pathlib.Path(__file__).parents[1] / "data"
    for path in [*sorted((data / "ctl").glob("*.ctl")),
                 *sorted((data / "kineto").rglob("*.json.gz"))[:6]]:
        tl = ctl.load(path)
        assert len(tl.ops) + len(tl.gpu) > 0, path


def test_running_out_of_memory_is_a_sentence_naming_the_file(tmp_path, monkeypatch):
    from cutimeline.timeline.ctlfile import fileformat
    path = tmp_path / "run.ctl"
    adversarial.base(n=50).save(path)

    def starved(*a, **k):
        raise MemoryError
    monkeypatch.setattr(fileformat, "_decode", starved)
    with pytest.raises(CutimelineError, match=r"run.ctl claims \d[\d,]* rows, and reading "
                                              r"it ran out of memory"):
        ctl.load(path)
