"""The ``cutimeline`` command (also ``python -m cutimeline``), on the public API.

    cutimeline --version
    cutimeline [--quiet] COMMAND ...   (--quiet: no progress bars or notices)
    cutimeline demo [--out DIR] [--steps N] [--device auto|cuda|cuda:N|sim]
                    [--num-workers N] [--log-every N]
    cutimeline plot FILE -o OUT.png [--window W]
    cutimeline summary FILE [--window W] [--json]
    cutimeline whatif FILE [--window W] [--json] [--plot OUT.png [--edit NAME]]
    cutimeline export FILE -o OUT.json.gz
    cutimeline import TRACE -o OUT.ctl
    cutimeline merge DIR -o merged.ctl [--force]
    cutimeline capture PID [--steps N] [--out F] [--timeout S]  (ctl.arm())

FILE is a ``.ctl`` file or a torch.profiler trace (``.json``/``.json.gz``).
W is a step (``3``), a step range (``3-5``) or seconds from the start
(``0.5s-0.75s``), as ``window=`` takes them (``timeline/windows.py``);
``--device`` the spellings of ``record(device=)`` that name a GPU. Errors print one line and exit with status 2; a bug in
cutimeline prints its traceback and a line asking for a report (status 3).
Work that lasts over ``progress.PROGRESS_AFTER_S`` shows a progress bar on stderr
(tqdm's when installed: ``pip install cutimeline[progress]``), only on a
terminal and never with ``--quiet``; a first compile of the Numba kernels
says so once (small Timelines run the NumPy twins and compile nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any, Sequence

import cutimeline as ctl

from . import __version__
from .analysis.replay.edits import edit_named
from .analysis.words import fmt_ns, pct
from .dist.straggler import describe
from .errors import CutimelineError
from .numeric.compiling import compile_notice
from .numeric.engines import resolve_engine
from .progress import Progress, bar as _bar, stage as _stage
from .rendering.whatif import change_text
from .timeline.windows import parse_window as _parse_window

__all__ = ["main", "parse_window", "Progress"]

COMPILE_NOTICE_AFTER_S = 1.0   # shorter compiles pass without a notice


def parse_window(text: str) -> Any:
    """``--window``'s text, by ``window=``'s parser (``timeline/windows.py``):
    ``"3"`` → 3, ``"3-5"`` → (3, 5), ``"0.5s-0.75s"`` → (0.5, 0.75)."""
    try:
        return _parse_window(text)
    except CutimelineError:
        raise CutimelineError(f"--window {text!r} is not understood: give a step (3), "
                              f"a step range (3-5 or 3:5, first to last) or seconds "
                              f"from the start (0.5s-0.75s, begin to end).") from None


def _demo_device(text: str) -> str:
    """``--device`` as the demo takes it: "auto", "cuda" (cuda:N made current) or "sim"."""
    # torch (about 1 s to import) loads only for the commands that record
    from .recording.devicespec import cuda_index, device_spelling
    try:
        spec = device_spelling(text, "--device ...")
    except CutimelineError:
        raise CutimelineError(f"--device {text!r} is not understood; give 'auto', "
                              f"'cuda', 'cuda:N' or 'sim' (a simulated H100).") from None
    if spec == "cpu":
        raise CutimelineError("--device 'cpu' records no GPU, and the demo is about "
                              "one; give 'auto', 'cuda', 'cuda:N' or 'sim' (a "
                              "simulated H100).")
    if isinstance(spec, str) and spec.startswith("cuda:"):
        import torch
        torch.cuda.set_device(cuda_index(spec, "--device ..."))
        return "cuda"
    return spec


def _open(path: str, quiet: bool = False):
    """A Timeline from a .ctl file or a torch.profiler trace (``ctl.load``),
    with a progress bar while a trace imports."""
    bar = _bar(f"importing {os.path.basename(path)}", quiet)
    try:
        tl = ctl.load(path, progress=bar)
    except BaseException:
        bar.clear()   # the error's line starts on a line of its own
        raise
    bar.done()
    return tl


def _analyze(tl, quiet: bool, window: Any = None):
    """``ctl.analyze`` by the engine its size calls for (the NumPy twins
    for a small Timeline: they compile nothing), with a progress line."""
    engine = resolve_engine("auto", len(tl.ops) + len(tl.gpu))
    with _stage("analysing", quiet):
        return ctl.analyze(tl, window=window, engine=engine)


def _plot(tl, path: str, quiet: bool, window: Any = None, report: Any = None) -> None:
    if report is None:
        report = _analyze(tl, quiet)  # of the whole Timeline, as plot's own
    with _stage("plotting", quiet):
        ctl.plot(tl, path, window=window, report=report)


def _cmd_demo(a: argparse.Namespace) -> int:
    from .demo import run_demo  # torch: see _demo_device
    device = _demo_device(a.device)
    os.makedirs(a.out, exist_ok=True)
    with _stage("recording", a.quiet):
        res = run_demo(steps=a.steps, device=device, num_workers=a.num_workers,
                       log_every=a.log_every)
    where = ("on a SIMULATED GPU (no CUDA device here): " if res.simulated
             else "on ") + res.device
    print(f"recorded {a.steps} training steps {where}")
    tl = res.timeline
    paths = {k: os.path.join(a.out, v) for k, v in
             (("ctl", "demo.ctl"), ("png", "timeline.png"), ("trace", "demo.json.gz"))}
    tl.save(paths["ctl"])
    rep = _analyze(tl, a.quiet)
    _plot(tl, paths["png"], a.quiet, report=rep)
    ctl.export_chrome(tl, paths["trace"])
    print(rep.summary())
    print(f"\nwrote {paths['png']} (timeline), {paths['trace']} (open in "
          f"https://ui.perfetto.dev) and {paths['ctl']} (ctl.load)")
    return 0


def _cmd_plot(a: argparse.Namespace) -> int:
    tl = _open(a.file, a.quiet)
    window = parse_window(a.window) if a.window else None
    _plot(tl, a.output, a.quiet, window)
    print(f"wrote {a.output}")
    return 0


def _cmd_summary(a: argparse.Namespace) -> int:
    tl = _open(a.file, a.quiet)
    rep = _analyze(tl, a.quiet, parse_window(a.window) if a.window else None)
    print(json.dumps(rep.to_dict(), indent=1) if a.json else rep.summary())
    return 0


def _cmd_whatif(a: argparse.Namespace) -> int:
    if a.edit:
        edit_named(a.edit)  # an unknown name: the error lists them
        if not a.plot:
            raise CutimelineError("--edit names the fix to draw with --plot OUT.png; "
                                  "give --plot too, or leave --edit out.")
    tl = _open(a.file, a.quiet)
    rep = _analyze(tl, a.quiet, parse_window(a.window) if a.window else None)
    with _stage("predicting", a.quiet):
        preds = rep.what_if()
    if a.json:
        print(json.dumps([p.to_dict() for p in preds], indent=1))
        _whatif_plot(a, tl, rep)
        return 0
    if not preds:
        raise CutimelineError(f"{a.file} gives no what-if predictions: it needs gpu rows "
                              f"and something a fix would remove.")
    print(f"what if (steady-state steps, mean; recorded step "
          f"{fmt_ns(preds[0].step_ns)}, GPU busy {pct(preds[0].busy_frac)}):")
    for p in preds:
        print(f"  {p.edit.name:<9} {-p.gain:+7.1%}  step {fmt_ns(p.predicted_step_ns):>9}  "
              f"GPU busy {pct(p.predicted_busy_frac):>4}  {p.edit.code}")
    _whatif_plot(a, tl, rep)
    return 0


def _whatif_plot(a: argparse.Namespace, tl, rep) -> None:
    """``--plot OUT``: the recording over its replay under ``--edit`` (default
    the top fix), as ``ctl.plot(tl, OUT, what_if=...)`` draws them."""
    if not a.plot:
        return

    with _stage("plotting", a.quiet):
        fig = ctl.plot(tl, a.plot, what_if=a.edit or True, report=rep,
                       window=parse_window(a.window) if a.window else None)
    print(f"wrote {a.plot}: {change_text(fig.cutimeline_prediction)}",
          file=sys.stderr if a.json else sys.stdout)


def _cmd_export(a: argparse.Namespace) -> int:
    tl = _open(a.file, a.quiet)
    with _stage("exporting", a.quiet):
        ctl.export_chrome(tl, a.output)
    print(f"wrote {a.output}")
    return 0


def _cmd_import(a: argparse.Namespace) -> int:
    tl = _open(a.trace, a.quiet)
    tl.save(a.output)
    print(f"wrote {a.output}: {tl!r}")
    for w in tl.meta.get("import_warnings", []):
        print(f"note: {w}")
    return 0


def _cmd_merge(a: argparse.Namespace) -> int:
    bar = _bar(f"merging {os.path.basename(os.path.normpath(a.dir))}", a.quiet)
    try:
        tl = ctl.merge(a.dir, progress=bar, force=a.force)
    except BaseException:
        bar.clear()
        raise
    bar.done()
    tl.save(a.output)
    print(f"wrote {a.output}: {tl!r}")
    print(describe(tl))
    return 0


def _cmd_capture(a: argparse.Namespace) -> int:
    from .recording.ondemand import send_capture  # torch: see _demo_device
    out = send_capture(a.pid, steps=a.steps, out=a.out, timeout=a.timeout or None)
    print(f"{'wrote' if a.timeout else 'asked for'} {out}")
    return 0


def _parser() -> argparse.ArgumentParser:
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

    d = command("demo", help="record a small training loop, plot and "
                "summarise it (CUDA when present, else a simulated GPU)")
    d.add_argument("--out", default="cutimeline-demo", help="output folder")
    d.add_argument("--steps", type=int, default=8)
    d.add_argument("--device", default="auto", help="auto (CUDA when present, else "
                   "sim), cuda, cuda:N or sim (a simulated H100)")
    d.add_argument("--num-workers", type=int, default=0, help="the loop's DataLoader "
                   "workers (a fix: compare with `cutimeline whatif`)")
    d.add_argument("--log-every", type=int, default=1, help="read the loss back every "
                   "N steps, 0: never (the other fix)")
    d.set_defaults(run=_cmd_demo)
    for name, helptext, run in (
            ("plot", "draw the timeline of FILE", _cmd_plot),
            ("summary", "print the analysis of FILE", _cmd_summary),
            ("whatif", "predict the step time of FILE under each fix, ranked",
             _cmd_whatif),
            ("export", "write FILE as a Chrome/Perfetto trace", _cmd_export)):
        c = command(name, help=helptext)
        c.add_argument("file", metavar="FILE", help=".ctl file or torch.profiler trace")
        if name not in ("summary", "whatif"):
            c.add_argument("-o", "--output", required=True)
        if name in ("plot", "summary", "whatif"):
            c.add_argument("--window", help="step (3), steps (3-5 or 3:5) or seconds "
                           "(0.5s-0.75s)")
        if name in ("summary", "whatif"):
            c.add_argument("--json", action="store_true", help="the result as JSON")
        if name == "whatif":
            c.add_argument("--plot", metavar="OUT", help="draw the recording over its "
                           "replay under the top fix (or --edit) to OUT (.png/.svg/.pdf)")
            c.add_argument("--edit", metavar="NAME", help="the fix to draw with --plot: "
                           "data, sync, host, graphs, launch, ... (default: the top one)")
        c.set_defaults(run=run)
    i = command("import", help="read a torch.profiler trace into a .ctl file")
    i.add_argument("trace", metavar="TRACE")
    i.add_argument("-o", "--output", required=True)
    i.set_defaults(run=_cmd_import)
    m = command("merge", help="merge the rank-<r>.ctl files of DIR")
    m.add_argument("dir", metavar="DIR")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--force", action="store_true", help="merge recordings that do not look "
                   "like the ranks of one run (different run ids, world sizes or times)")
    m.set_defaults(run=_cmd_merge)
    c = command("capture", help="ask process PID (armed by ctl.arm()) to record N steps")
    c.add_argument("pid", metavar="PID", type=int)
    c.add_argument("--steps", type=int, default=5)
    c.add_argument("--out", help="the .ctl file (default ./cutimeline-<pid>-<time>.ctl)")
    c.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (0: don't)")
    c.set_defaults(run=_cmd_capture)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: 0 on success, 2 on bad input or usage (one line on
    stderr), 3 on a bug in cutimeline (the traceback, then one line that
    asks for a report), 130 on Ctrl-C."""
    args = _parser().parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    notice = compile_notice(sys.stderr, after_s=COMPILE_NOTICE_AFTER_S, enabled=not args.quiet)
    try:
        with notice:
            return args.run(args)
    except CutimelineError as exc:
        print(f"cutimeline: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable input, unwritable output
        if isinstance(exc, BrokenPipeError):  # `cutimeline summary x | head`
            return 0
        where = f": {exc.filename}" if exc.filename else ""
        print(f"cutimeline: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"cutimeline: error: {_out_of_memory(args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cutimeline: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else is ours to fix
        traceback.print_exc(file=sys.stderr)
        print(f"cutimeline: internal error: {type(exc).__name__}: {_one_line(exc)[:200]} -- "
              f"this is a bug in cutimeline {__version__}; please report it with the "
              f"traceback above and the command that caused it.", file=sys.stderr)
        return 3


def _out_of_memory(args: argparse.Namespace) -> str:
    """The sentence for a MemoryError: the input and the size it has."""
    path = getattr(args, "file", None) or getattr(args, "trace", None) or \
        getattr(args, "dir", None)
    try:
        size = f" ({os.path.getsize(path):,} bytes)" if path and os.path.isfile(path) else ""
    except OSError:
        size = ""
    what = f"{path}{size}" if path else f"the {args.command} command"
    return (f"{what} needs more memory than this process could get (MemoryError); "
            f"run on a machine with more memory, or look at a window of it (--window).")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

