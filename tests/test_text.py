"""cutimeline/text.py: names from a trace are data, not terminal commands. A trace
whose op, kernel, thread, device and file names hold terminal escapes,
math text and a lone surrogate prints without one raw control character
(summary, whatif, errors), plots (into a file and into the user's Axes),
and keeps its names unchanged in the Timeline and its export."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import cutimeline as ctl
from cutimeline.cli import main
from cutimeline.text import figure_text, fmt_mfu, terminal_text
from cutimeline.timeline.schema import SCHEMA
from handmade import random_timeline, timeline

EVIL = ["\x1b]0;pwned\x07", "\x1b[2J", "\x1b]52;c;ZXZpbA==\x07", "$x$", "\ud800",
        "a$\\b", "\x9b31m", "\u202etxt.exe", "\r\x08"]
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\ud800-\udfff]")


def evil_names(tl: ctl.Timeline) -> ctl.Timeline:
    """``tl`` with every string, device, thread and file name made hostile."""
    strings = [s + EVIL[i % len(EVIL)] for i, s in enumerate(tl.strings)]
    meta = dict(tl.meta, device_name="GPU $\\evil$ \x1b[31m\ud800",
                devices=[{"index": 0, "kind": "cuda", "name": "dev\x1b[2J$x$"}],
                threads=["main\x1b]0;t\x07"], file="trace\x1b[2J$.json")
    return ctl.Timeline({n: tl.table(n) for n in SCHEMA}, strings, meta)


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    path = tmp_path_factory.mktemp("evil") / "evil.ctl"
    evil_names(random_timeline(3)).save(path)
    return path


@pytest.mark.parametrize("mfu, text", [(0.412, "41%"), (0.0996, "10%"), (0.042, "4.2%"),
                                       (0.021, "2.1%"), (0.0021, "0.21%"), (1.0, "100%"),
                                       (0.0, "0%")])
def test_mfu_reads_to_two_significant_digits(mfu, text):
    """One MFU text for the summary and the figure's strip (issue 47)."""
    assert fmt_mfu(mfu) == text


def test_terminal_text_escapes_what_drives_a_terminal():
    assert terminal_text("a\x1b]0;x\x07b") == "a\\x1b]0;x\\x07b"
    assert terminal_text("\x9b2J\x7f") == "\\x9b2J\\x7f"
    assert terminal_text("x\ud800y") == "x\ufffdy"
    assert terminal_text("\u202eexe") == "\\u202eexe"
    assert terminal_text("line\n\ttab") == "line\n\ttab"  # layout stays
    assert terminal_text("a\rb") == "a\\x0db"
    assert terminal_text("plain ascii and ünïcode ✓") == "plain ascii and ünïcode ✓"
    for s in EVIL:
        assert not RAW.search(terminal_text(s)), s
        terminal_text(s).encode("utf-8")  # no surrogate left to fail on


def test_figure_text_makes_dollars_literal():
    assert figure_text("$x$") == r"\$x\$"
    assert figure_text("a$\\b\ud800") == "a\\$\\b\ufffd"


def test_summary_and_whatif_print_no_raw_control_character(evil, capsys):
    for args in (["summary", str(evil)], ["whatif", str(evil)],
                 ["summary", str(evil), "--json"]):
        assert main(args) == 0, capsys.readouterr().err
        out, err = capsys.readouterr()
        assert not RAW.search(out) and not RAW.search(err), args
    assert main(["summary", str(evil)]) == 0
    out = capsys.readouterr().out
    assert "\\x1b]52;c;ZXZpbA==\\x07" in out or "\\x1b[2J" in out  # shown, escaped


def test_the_command_s_bytes_on_stdout_hold_no_escape(evil):
    done = subprocess.run([sys.executable, "-m", "cutimeline", "summary", str(evil)],
                          capture_output=True, timeout=300,
                          env={"PYTHONPATH": str(Path(ctl.__file__).parents[1]),
                               "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"\x1b" not in done.stdout and b"\x9b" not in done.stdout.replace(b"\\x9b", b"")
    assert b"\x07" not in done.stdout


def test_error_messages_that_quote_a_name_are_escaped(tmp_path, capsys):
    assert main(["summary", str(tmp_path / "run\x1b[2J.ctl")]) == 2
    err = capsys.readouterr().err
    assert "run\\x1b[2J.ctl does not exist" in err and "\x1b" not in err


def test_plot_draws_hostile_names(evil, tmp_path, capsys):
    assert main(["plot", str(evil), "-o", str(tmp_path / "t.png")]) == 0
    assert not RAW.search(capsys.readouterr().out)
    assert (tmp_path / "t.png").stat().st_size > 0
    assert main(["whatif", str(evil), "--plot", str(tmp_path / "w.png")]) == 0


def test_kernel_names_on_bars_and_in_the_user_s_axes():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # few, long kernels: each wide enough to carry its name
    tl = evil_names(timeline(gpu=[(0, 10, 20 + 100_000 * i, 90_000 + 100_000 * i)
                                  for i in range(len(EVIL))]))
    fig = ctl.plot(tl)
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert any(r"\$x\$" in t for t in texts)
    fig.canvas.draw()
    plt.close(fig)
    fig, ax = plt.subplots()
    ctl.plot(tl, ax=ax)
    fig.canvas.draw()  # the lane labels are drawn here, by matplotlib's tick formatter
    plt.close(fig)


def test_the_names_themselves_are_kept(evil, tmp_path):
    tl = ctl.load(evil)
    assert any("\x1b[2J" in s for s in tl.strings) and "\ud800" in "".join(tl.strings)
    ctl.export_chrome(tl, tmp_path / "t.json")
    back = ctl.load(tmp_path / "t.json")
    assert set(back.decode(back.ops["name"])) == set(tl.decode(tl.ops["name"]))


def test_a_progress_bar_escapes_its_label_and_keeps_its_carriage_returns():
    import io

    from cutimeline.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = Progress("importing run\x1b[2J.json", stream=tty, after_s=0.0)
    bar("parsing", 0.5)
    assert tty.getvalue().startswith("\rimporting run\\x1b[2J.json [")
