"""The command line's vocabulary: every ``cutimeline`` command and option
(an argparse parser), each option named as the Python keyword it sets.

``--window`` is ``window=``, ``--what-if [EDIT]`` ``ctl.plot(what_if=)``,
``--overview``/``--memory`` ``ctl.plot``'s, ``--steps-from NAME``
``ctl.load(steps_from=)``, ``--device``/``--steps``/``--warmup``/
``--rounds``/``--trace-dir`` ``ctl.compare``'s, ``--edit``
``Report.what_if(edit=)``, record's ``-m/--module``, ``--skip``,
``--steps``, ``--steps-from``, ``--stack``, ``--memory``,
``--keep-going`` (also spelled ``--continue``) and ``--seconds``
``ctl.record_script``'s; ``-o/--out`` is the file or folder a command
writes (the path argument of ``ctl.plot``, ``ctl.export_chrome``,
``Timeline.save``, ``Timeline.to_parquet``, ``Comparison.plot``; ``out=`` of
``send_capture``). The old spellings still parse, unlisted: ``--output``
everywhere, whatif's ``--plot``. ``tests/test_cli.py`` walks this parser and
finds each option's Python twin. ``cli.py`` runs the commands.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._version import __version__

__all__ = ["command_parser", "WINDOW_HELP"]

WINDOW_HELP = "step (3), steps (3-5 or 3:5) or seconds (0.5s-0.75s)"


def _out(c: argparse.ArgumentParser, what: str, required: bool = True,
         default: str | None = None, old: tuple[str, ...] = ("--output",)) -> None:
    """``-o/--out``, with the old spellings ``old`` accepted but not shown
    (argparse checks no requirement across spellings: ``main`` does)."""
    c.add_argument("-o", "--out", default=default, metavar="OUT",
                   help=what + (" (required)" if required else ""))
    for spelling in old:
        c.add_argument(spelling, dest="out", help=argparse.SUPPRESS)
    c.set_defaults(out_required=required)


def _steps_from(c: argparse.ArgumentParser) -> None:
    c.add_argument("--steps-from", metavar="NAME",
                   help="for a torch.profiler trace: the ranges that end each step "
                   "(e.g. Optimizer.step), where ProfilerStep#N should not make them")


class _Formatter(argparse.HelpFormatter):
    """Shows ``-m MODULE ...`` where argparse would write ``-m ...``."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if action.nargs == argparse.REMAINDER and action.option_strings:
            return f"{action.metavar} ..."
        return super()._format_args(action, default_metavar)


def _record(command: Any) -> None:
    """``cutimeline record``: the options before the script are ours, all
    after it (or after ``-m MODULE``) the script's, as ``python`` takes them."""
    c = command("record", help="run a training script unedited and record some of its "
                "steps (ctl.record_script)",
                usage="%(prog)s [-o OUT] [--device DEVICE] [--skip N] [--steps N]\n"
                "       [--steps-from NAME] [--stack] [--memory] [--continue] "
                "[--seconds S]\n       (SCRIPT.py | -m MODULE) [ARG ...]",
                description="Run SCRIPT.py as `python SCRIPT.py ARG ...` would (or a "
                "module as `python -m MODULE ARG ...`): leave its first --skip steps "
                "unrecorded, record the next --steps, save them and stop the script, "
                "then print the verdict. A step ends at each optimizer.step(), or "
                "with --steps-from NAME where each record_function(NAME) range ends; "
                "a script with neither is recorded whole.",
                formatter_class=_Formatter)
    _out(c, "the .ctl file (default cutimeline-<script>.ctl; under torchrun a "
         "folder that gets each rank's rank-<r>.ctl, for `cutimeline merge`)",
         required=False)
    c.add_argument("--device", default="auto", metavar="DEVICE", help="auto (CUDA when "
                   "present, else host rows only), cuda, cuda:N, sim (a simulated H100) or sim:PROFILE "
                   "(sim:a100, sim:h200); on sim the script's CUDA code runs on the "
                   "simulated GPU")
    c.add_argument("--skip", type=int, default=1, metavar="N",
                   help="steps run unrecorded first (warm-up; default 1)")
    c.add_argument("--steps", type=int, default=10, metavar="N",
                   help="steps recorded (default 10)")
    c.add_argument("--steps-from", metavar="NAME", help="a step ends where each "
                   "torch.profiler.record_function(NAME) range ends (default: at each "
                   "optimizer.step())")
    c.add_argument("--stack", action="store_true", help="the source line of every op")
    c.add_argument("--memory", action="store_true", help="device memory after each op")
    c.add_argument("--keep-going", "--continue", action="store_true",
                   help="after the recorded steps let the script run to its end "
                   "(default: stop it there)")
    c.add_argument("--seconds", type=float, metavar="S", help="stop recording at the "
                   "first step's end after S seconds of recording")
    c.add_argument("-m", "--module", nargs=argparse.REMAINDER, metavar="MODULE",
                   help="MODULE [ARG ...]: run a module as `python -m` does, with the "
                   "arguments after it")
    c.add_argument("script", nargs="?", metavar="SCRIPT.py", help="the training script")
    c.add_argument("argv", nargs=argparse.REMAINDER, metavar="ARG",
                   help="the script's own arguments: everything after SCRIPT.py")


def command_parser() -> argparse.ArgumentParser:
    """The parser of every command (``cli.main`` runs what it parses)."""
    # --quiet before or after the command: SUPPRESS keeps a subcommand's
    # parser from resetting what the main parser read
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress bars and no notice that kernels compile")
    p = argparse.ArgumentParser(
        prog="cutimeline", description="What a PyTorch program does on both "
        "sides of the CPU/GPU boundary.", parents=[common])
    p.add_argument("--version", action="version", version=f"cutimeline {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    def opens(c: argparse.ArgumentParser, dest: str = "file",
              metavar: str = "FILE") -> None:
        c.add_argument(dest, metavar=metavar, help=".ctl file or torch.profiler trace")
        _steps_from(c)

    d = command("demo", help="record a small training loop, plot and "
                "summarise it (CUDA when present, else a simulated GPU)")
    _out(d, "output folder", required=False, default="cutimeline-demo")
    d.add_argument("--steps", type=int, default=8)
    d.add_argument("--device", default="auto", help="auto (CUDA when present, else "
                   "sim), cuda, cuda:N or sim (a simulated H100)")
    d.add_argument("--num-workers", type=int, default=0, help="the loop's DataLoader "
                   "workers (a fix: compare with `cutimeline whatif`)")
    d.add_argument("--log-every", type=int, default=1, help="read the loss back every "
                   "N steps, 0: never (the other fix)")

    _record(command)

    c = command("plot", help="draw the timeline of FILE (ctl.plot)")
    opens(c)
    _out(c, "the figure: .png, .svg or .pdf")
    c.add_argument("--window", help=WINDOW_HELP)
    c.add_argument("--overview", action=argparse.BooleanOptionalAction, default=None,
                   help="force (or forbid) the overview of a dense window; default: "
                   "by density")
    c.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None,
                   help="the device-memory panel; default: when FILE has memory readings")
    c.add_argument("--what-if", nargs="?", const=True, metavar="EDIT",
                   help="the recording over its replay under a fix: data, sync, host, "
                   "graphs, launch, ... (no EDIT: the one predicted to gain most)")

    c = command("summary", help="print the analysis of FILE")
    opens(c)
    c.add_argument("--window", help=WINDOW_HELP)
    c.add_argument("--json", action="store_true", help="the result as JSON")

    c = command("whatif", aliases=["what-if"],
                help="predict the step time of FILE under each fix, ranked")
    opens(c)
    c.add_argument("--window", help=WINDOW_HELP)
    c.add_argument("--json", action="store_true", help="the result as JSON")
    _out(c, "also draw the recording over its replay under the top fix (or --edit) "
         "to OUT (.png/.svg/.pdf)", required=False, old=("--output", "--plot"))
    c.add_argument("--edit", metavar="NAME", help="the fix to draw with -o: data, "
                   "sync, host, graphs, launch, ... (default: the top one)")

    c = command("export", help="write FILE as a Chrome/Perfetto trace "
                "or as Parquet files")
    opens(c)
    _out(c, "the trace (.json.gz) or the Parquet folder")
    c.add_argument("--format", choices=("chrome", "parquet"),
                   help="default: by OUT (.json/.json.gz: chrome; a folder: parquet)")

    c = command("import", help="read a torch.profiler trace into a .ctl file")
    opens(c, "trace", "TRACE")
    _out(c, "the .ctl file")

    c = command("merge", help="merge the rank-<r>.ctl files of DIR")
    c.add_argument("dir", metavar="DIR")
    _out(c, "the merged .ctl file")
    c.add_argument("--force", action="store_true", help="merge recordings that do not look "
                   "like the ranks of one run (different run ids, world sizes or times)")

    c = command("compare", help="run a training script under cutimeline "
                "and under torch.profiler and compare them (ctl.compare)")
    c.add_argument("script", metavar="SCRIPT.py", help="a training script; its "
                   "optimizer steps are the steps compared")
    c.add_argument("argv", nargs="*", metavar="ARG",
                   help="the script's own arguments (those that begin with - after --)")
    c.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or sim")
    c.add_argument("--steps", type=int, default=20, help="steps timed and compared")
    c.add_argument("--warmup", type=int, default=3, help="steps run before them")
    c.add_argument("--rounds", type=int, default=1, help="times the three passes run")
    c.add_argument("--trace-dir", metavar="DIR", help="keep both traces in DIR")
    c.add_argument("--json", action="store_true", help="the result as JSON")
    _out(c, "also draw both Timelines, one above the other (.png/.svg/.pdf)",
         required=False)

    c = command("capture", help="ask process PID (armed by ctl.arm()) to record N steps")
    c.add_argument("pid", metavar="PID", type=int)
    c.add_argument("--steps", type=int, default=5)
    _out(c, "the .ctl file, under the folder the job armed with (default "
         "<that folder>/cutimeline-<pid>-<time>.ctl)", required=False)
    c.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (0: don't)")
    return p
