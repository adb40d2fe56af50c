"""invariants.py: what a loaded Timeline holds, checked at the door.

The adversarial files of issues 37 and 38 (``adversarial.py``) that loaded
and then crashed a later stage are refused at ``ctl.load`` with a sentence
naming the file, the table, the column and the row; a valid file loads
as before; ``Table`` columns are never shadowed by its attributes.
"""

from __future__ import annotations

import numpy as np
import pytest

import adversarial

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline import invariants
from cutimeline.timeline.schema import SCHEMA
from cutimeline.timeline.table import Table


def _refused(tmp_path, data: bytes, *words: str, suffix: str = ".ctl") -> str:
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(data)
    with pytest.raises(CutimelineError) as info:
        ctl.load(path)
    message = str(info.value)
    assert message.startswith(str(path) if suffix == ".ctl" else path.name), message
    for w in words:
        assert w in message, message
    assert "\n" not in message
    return message


@pytest.mark.parametrize("make, words", [
    (lambda: adversarial.ctl_thread(-5), ("ops.thread of row 3 is -5", "a thread id from 0")),
    (lambda: adversarial.ctl_thread(2 ** 31 - 1), ("ops.thread of row 3 is 2147483647",)),
    (lambda: adversarial.ctl_time(adversarial.INT64_MIN),
     ("ops.host_begin_ns of row 0 is -9223372036854775808", "within ±2^62 ns")),
    (lambda: adversarial.ctl_backwards("spans"), ("spans row 0 ends before it begins",)),
    (lambda: adversarial.ctl_backwards("ops"), ("ops row 0 ends before it begins",)),
    (lambda: adversarial.ctl_backwards("syncs"), ("syncs row 0 ends before it begins",)),
    (adversarial.ctl_far_apart, ("its times run over 1,000 days", "spans.end_ns (row 7")),
    (lambda: adversarial.ctl_device(-3), ("gpu.device of row 0 is -3", "a device index")),
    (lambda: adversarial.ctl_meta(rank=10 ** 9), ("meta['rank'] is 1000000000",)),
    (lambda: adversarial.ctl_meta(rank=3, world_size=2), ("rank 3 of a world of 2",)),
    (lambda: adversarial.ctl_meta(threads="MainThread"), ("meta['threads']",)),
    (lambda: adversarial.ctl_meta(import_warnings=[1]), ("meta['import_warnings']",)),
])
def test_a_value_later_stages_would_trip_on_is_refused_at_load(tmp_path, make, words):
    _refused(tmp_path, make(), "is damaged", *words)


def test_a_valid_file_still_loads_and_the_check_is_cheap(tmp_path):
    import time
    tl = adversarial.base(n=2000)
    tl.save(tmp_path / "ok.ctl")
    back = ctl.load(tmp_path / "ok.ctl")
    assert len(back.ops) == len(tl.ops)
    tables = {n: back.table(n) for n in SCHEMA}
    t0 = time.perf_counter()
    invariants.check(tables, back.strings, back.meta, "x")
    assert time.perf_counter() - t0 < 0.5


def test_thread_ids_may_reach_the_threads_the_file_names(tmp_path):
    tl = adversarial.many_threads(40)   # 40 threads, one op each
    path = tmp_path / "t.ctl"
    path.write_bytes(adversarial.as_ctl(tl))
    assert ctl.load(path).ops.thread.max() == 39


def test_a_trace_whose_times_run_over_years_is_refused(tmp_path):
    import json
    doc = adversarial.trace_events(8)
    doc["traceEvents"][3]["ts"] = 4e13   # one kernel 460 days after the rest
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CutimelineError, match=r"t.json cannot be read: its times run over "
                                              r"\d+ days"):
        ctl.load(path)


def test_table_columns_are_never_shadowed_by_attributes():
    for name, cols in SCHEMA.items():
        t = Table(name, {c: np.zeros(2, dt) for c, dt in cols})
        for col, _ in cols:
            assert getattr(t, col) is t[col], (name, col)
        assert t.table_name == name
    tl = adversarial.base(n=10)
    assert np.array_equal(tl.ops.name, tl.ops["name"]) and tl.ops.name.dtype == np.int32
    assert np.array_equal(tl.spans.name, tl.spans["name"])
