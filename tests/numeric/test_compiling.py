"""The compile notice: said once, only for cutimeline's kernels, only for a
compile still running after ``after_s``, never when disabled."""

import io
import threading
from types import SimpleNamespace

from numba.core import event

from cutimeline.numeric.compiling import COMPILE_ESTIMATE_S, CompileNotice, compile_notice


def _compile(module: str) -> None:
    """A compile as Numba announces it (no compiler runs)."""
    data = {"dispatcher": SimpleNamespace(py_func=SimpleNamespace(__module__=module))}
    event.start_event("numba:compile", data=data)
    event.end_event("numba:compile", data=data)


def test_said_once_for_cutimeline_kernels_only():
    out = io.StringIO()
    with compile_notice(out, after_s=0) as notice:
        _compile("user_code")
        assert out.getvalue() == "" and not notice.said
        _compile("cutimeline.numeric.intervals")
        _compile("cutimeline.analysis.idle.queues")
    assert out.getvalue() == (f"compiling cutimeline's kernels (once, up to "
                              f"~{COMPILE_ESTIMATE_S} s)…\n")
    _compile("cutimeline.numeric.runs")  # after the block: no listener
    assert out.getvalue().count("compiling") == 1


def test_disabled_says_nothing():
    out = io.StringIO()
    with compile_notice(out, after_s=0, enabled=False):
        _compile("cutimeline.numeric.intervals")
    assert out.getvalue() == ""


def test_a_short_compile_passes_silently_a_long_one_is_announced():
    out = io.StringIO()
    notice = CompileNotice(out, after_s=3600)
    data = {"dispatcher": SimpleNamespace(py_func=SimpleNamespace(
        __module__="cutimeline.numeric.ids"))}
    ev = event.Event("numba:compile", event.EventStatus.START, data=data)
    end = event.Event("numba:compile", event.EventStatus.END, data=data)
    notice.on_start(ev)
    notice.on_end(end)
    notice._due()        # the timer fires after the compile ended: nothing to say
    assert out.getvalue() == ""
    notice.on_start(ev)  # a later compile starts its own timer ...
    assert notice._timer is not None
    notice._due()        # ... that fires while it runs
    assert out.getvalue().count("compiling cutimeline's kernels") == 1
    notice.on_end(end)
    notice.on_start(ev)
    assert notice._timer is None  # said already: no more timers
    notice.cancel()


def test_the_timer_says_it_from_another_thread():
    said = threading.Event()

    class Stream(io.StringIO):
        def flush(self):
            said.set()

    out = Stream()
    notice = CompileNotice(out, after_s=0.01)
    data = {"dispatcher": SimpleNamespace(py_func=SimpleNamespace(
        __module__="cutimeline.alignment.hull"))}
    notice.on_start(event.Event("numba:compile", event.EventStatus.START, data=data))
    assert said.wait(30)
    assert "compiling cutimeline's kernels" in out.getvalue()
    notice.cancel()
