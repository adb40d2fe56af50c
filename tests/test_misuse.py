"""The API misused: every public name called with arguments of the wrong type.

Each public function of ``cutimeline`` (``dir(cutimeline)``) and each public
method of ``Timeline`` and ``Report`` is called once per parameter with each
value of ``WRONG`` in that parameter's place (the others valid): the call
either works (a value of another type that means something, such as a step
number for ``window``) or raises ``CutimelineError``; never another
exception. The common mix-ups get a sentence that says what to pass
instead ("export_chrome needs a Timeline (from ctl.record or ctl.load); got a Report: pass report.source").
"""

from __future__ import annotations

import inspect
import math
import os
import pathlib

import numpy as np
import pytest

from handmade import random_timeline

import cutimeline as ctl
from cutimeline import CutimelineError

DATA = pathlib.Path(__file__).parent / "data" / "ctl"


class _Odd:
    """An object of no type any function takes."""

    def __repr__(self) -> str:
        return "<odd>"


def _wrong(tl, rep) -> dict:
    return {"None": None, "int": 42, "negative": -1, "float": 1.5, "nan": math.nan,
            "inf": math.inf, "bool": True, "str": "x", "bytes": b"x", "list": [1, 2],
            "dict": {"a": 1}, "object": _Odd(), "Report": rep, "Timeline": tl,
            "array": np.arange(3)}


@pytest.fixture(scope="module")
def tl():
    return random_timeline(0, n=60, steps=3)


@pytest.fixture(scope="module")
def rep(tl):
    return ctl.analyze(tl)


def _script(tmp: pathlib.Path) -> str:
    """A script with no optimizer step: recorded whole, in a moment."""
    path = tmp / "misuse_script.py"
    path.write_text("import torch\ntorch.ones(2) + 1\n")
    return str(path)


def _calls(tl, rep, tmp: pathlib.Path) -> dict:
    """name → (callable, valid keyword arguments): what each public name
    is called with, one argument at a time replaced."""
    png, trace, ctl_file = str(tmp / "x.png"), str(tmp / "x.json"), str(tmp / "x.ctl")
    r0, r1 = tl.replace(meta={**tl.meta, "rank": 0}), tl.replace(meta={**tl.meta, "rank": 1})
    return {
        "load": (ctl.load, {"path": str(DATA / "v3.ctl"), "progress": None}),
        "analyze": (ctl.analyze, {"tl": tl, "window": None, "engine": "numpy",
                                  "gpu_bound_at": 0.85, "sync_slack_ns": 100_000, "top": 3,
                                  "host_gap_ns": 200_000, "mixed_margin": 0.2,
                                  "peak_flops": None}),
        "plot": (ctl.plot, {"tl": tl, "path": None, "window": None, "width": 8.0, "dpi": 30,
                            "flows": 10, "title": None, "report": rep, "overview": None,
                            "memory": None}),
        "export_chrome": (ctl.export_chrome, {"tl": tl, "path": trace, "codec": "auto"}),
        "merge": (ctl.merge, {"dir_or_paths": [r0, r1], "progress": None}),
        "Timeline": (ctl.Timeline, {"tables": None, "strings": (), "meta": None}),
        "span": (ctl.span, {"name": "x"}),
        "schedule": (ctl.schedule, {"skip_first": 0, "wait": 1, "warmup": 1, "active": 3,
                                    "repeat": 0, "skip_first_wait": 0}),
        "record": (ctl.record, {"device": "cpu", "max_ops": 1000, "modules": True,
                                "threads": True, "steps": "auto", "measure": False,
                                "timing": "events", "out_dir": None, "stack": False,
                                "memory": False, "schedule": None, "on_trace_ready": None}),
        "SimGPU": (ctl.SimGPU, {"profile": "h100", "quantum_ns": 500, "jitter": 0.0,
                                "seed": 0, "index": 0}),
        "record_script": (ctl.record_script, {
            "path": _script(tmp), "argv": [], "module": None, "device": "cpu", "skip": 1,
            "steps": 2, "steps_from": None, "stack": False, "memory": False,
            "keep_going": False, "seconds": None, "out": None}),
        "Timeline.save": (tl.save, {"path": ctl_file}),
        "Timeline.to_parquet": (tl.to_parquet, {"folder": str(tmp / "pq")}),
        "Timeline.table": (tl.table, {"name": "ops"}),
        "Timeline.to_pandas": (tl.to_pandas, {"table": "ops"}),
        "Timeline.to_arrow": (tl.to_arrow, {"table": "ops"}),
        "Timeline.to_polars": (tl.to_polars, {"table": "ops"}),
        "Timeline.string": (tl.string, {"i": 0}),
        "Timeline.string_id": (tl.string_id, {"s": "x"}),
        "Timeline.decode": (tl.decode, {"ids": np.array([0])}),
        "Timeline.replace": (tl.replace, {"meta": None}),
        "Timeline.slice_time": (tl.slice_time, {"begin_ns": tl.start_ns,
                                                "end_ns": tl.end_ns}),
        "Timeline.slice_steps": (tl.slice_steps, {"first": 0, "last": 1}),
        "Timeline.keep_rows": (tl.keep_rows, {"spans": np.ones(len(tl.spans), bool)}),
        "Timeline.step_bounds": (tl.step_bounds, {"first": 0, "last": 1}),
        "Timeline.window_bounds": (tl.window_bounds, {"window": 0}),
        "Report.gap_table": (rep.gap_table, {"level": "device"}),
        "Report.offenders": (rep.offenders, {"first": 0, "last": 1}),
        "Report.op_table": (rep.op_table, {"shapes": False}),
        "Report.queue_depth": (rep.queue_depth, {"device": None, "stream": None}),
        "Report.table": (rep.table, {"name": "ops", "pandas": False}),
        "Report.what_if": (rep.what_if, {"edit": None}),
        "Report.idle_amounts": (rep.idle_amounts, {"gaps": [0], "begin_ns": None,
                                                   "end_ns": None}),
        "Report.replay_report": (rep.replay_report, {"replay": tl}),
    }


#: public names not called here, and why
NOT_CALLED = {
    "CutimelineError": "the exception itself",
    "Report": "made by analyze, never by hand",
    "compare": "runs the workload under torch.profiler (test_comparison.py checks its "
               "arguments)",
    "arm": "installs a signal handler for the process (test_ondemand.py checks its "
           "arguments)",
}


def _cases():
    names = [n for n in dir(ctl) if not n.startswith("_") and n != "__version__"]
    return names


def test_every_public_name_is_swept():
    import tempfile
    tl = random_timeline(0, n=20, steps=2)
    calls = _calls(tl, ctl.analyze(tl), pathlib.Path(tempfile.gettempdir()))
    public = {n for n in dir(ctl) if not n.startswith("_")}
    assert public - set(calls) - set(NOT_CALLED) == set()
    for cls in (ctl.Timeline, ctl.Report):
        methods = {f"{cls.__name__}.{n}" for n, f in inspect.getmembers(cls)
                   if not n.startswith("_") and inspect.isfunction(f)
                   and len(inspect.signature(f).parameters) > 1}
        assert methods - set(calls) == set(), methods - set(calls)


def _sweep(tl, rep, tmp):
    calls = _calls(tl, rep, tmp)
    wrong = _wrong(tl, rep)
    out = []
    for name, (fn, valid) in calls.items():
        for param in valid:
            for label, value in wrong.items():
                kw = dict(valid, **{param: value})
                try:
                    got = fn(**kw)
                except CutimelineError as exc:
                    out.append((name, param, label, "CutimelineError", str(exc)))
                    continue
                except Exception as exc:   # what this test exists to find
                    out.append((name, param, label, type(exc).__name__, str(exc)[:200]))
                    continue
                if name == "record":
                    got = None   # made, not started: nothing to undo
                out.append((name, param, label, "ok", ""))
    return out


@pytest.fixture(scope="module")
def swept(tl, rep, tmp_path_factory):
    folder = tmp_path_factory.mktemp("misuse")
    here = os.getcwd()
    os.chdir(folder)   # a wrong path such as "x" is written here, not in the checkout
    try:
        return _sweep(tl, rep, folder)
    finally:
        os.chdir(here)


def _bad(results) -> list:
    return [r for r in results if r[3] not in ("ok", "CutimelineError")]


def test_misuse_raises_only_cutimeline_errors(swept):
    bad = _bad(swept)
    assert len(swept) > 1000
    assert not bad, f"{len(bad)} of {len(swept)} calls:\n" + "\n".join(
        f"{n}({p}={v}): {e}: {m}" for n, p, v, e, m in bad[:40])


@pytest.mark.parametrize("call, words", [
    (lambda tl, rep: ctl.export_chrome(rep, "x.json"),
     "export_chrome needs a Timeline (from ctl.record or ctl.load); got a Report: pass report.source"),
    (lambda tl, rep: ctl.plot(rep), "got a Report: pass report.source"),
    (lambda tl, rep: ctl.analyze(rep), "analyze needs a Timeline (from ctl.record or "
                                       "ctl.load); got a Report: pass report.source"),
    (lambda tl, rep: ctl.export_chrome(None, "x.json"), "export_chrome needs a Timeline (from "
                                                        "ctl.record or ctl.load); got None"),
    (lambda tl, rep: ctl.export_chrome([tl], "x.json"), "got a list"),
    (lambda tl, rep: ctl.analyze("run.ctl"), "got a str: load it first with ctl.load"),
    (lambda tl, rep: ctl.load(42), "load wants the path of a .ctl file"),
    (lambda tl, rep: ctl.load(tl), "load wants the path"),
])
def test_a_mix_up_says_what_to_pass(tl, rep, call, words):
    with pytest.raises(CutimelineError) as info:
        call(tl, rep)
    assert words in str(info.value)
