"""The ``cutimeline`` command (also ``python -m cutimeline``), on the public API.

    cutimeline --version
    cutimeline [--quiet] COMMAND ...   (--quiet: no progress bars or notices)
    cutimeline demo [-o DIR] [--steps N] [--device auto|cuda|cuda:N|sim]
                    [--num-workers N] [--log-every N]
    cutimeline record [-o OUT] [--device D] [--skip N] [--steps N] [--steps-from NAME]
                    [--stack] [--memory] [--continue] [--seconds S]
                    (SCRIPT.py | -m MODULE) [ARG ...]   (ctl.record_script)
    cutimeline plot FILE -o OUT.png [--window W] [--overview|--no-overview]
                    [--memory|--no-memory] [--what-if [EDIT]]
    cutimeline summary FILE [--window W] [--json]
    cutimeline whatif FILE [--window W] [--json] [-o OUT.png [--edit NAME]]
    cutimeline export FILE -o OUT [--format chrome|parquet]
    cutimeline import TRACE -o OUT.ctl
    cutimeline merge DIR -o merged.ctl [--force]
    cutimeline compare SCRIPT.py [--device D] [--steps N] [--warmup N] [--rounds N]
                    [--trace-dir DIR] [-o OUT.png] [--json] [ARG ...] [-- -ARG ...]
    cutimeline capture PID [--steps N] [-o F] [--timeout S]  (ctl.arm())

The commands and options are ``commands.py``'s, named as the Python
keywords they set. FILE is a ``.ctl`` file or a torch.profiler trace
(``.json``/``.json.gz``); W is a step (``3``), a step range (``3-5``) or
seconds (``0.5s-0.75s``), as ``window=`` takes them
(``timeline/windows.py``). ``record``'s script failing shows its
traceback and exits with its status, what was recorded saved. Errors
print one line and exit with status 2; a bug in cutimeline prints its
traceback and asks for a report (status 3). Work over
``progress.PROGRESS_AFTER_S`` shows a progress bar on stderr (tqdm's
when installed), only on a terminal and never with ``--quiet``; a first
compile of the Numba kernels says so once (small Timelines run the NumPy
twins and compile nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from typing import Any, Sequence

import cutimeline as ctl

from ._version import __version__
from .analysis import edit_named
from .commands import command_parser
from .dist.straggler import describe
from .errors import CutimelineError
from .numeric.compiling import compile_notice
from .numeric.engines import resolve_engine
from .progress import Progress, bar as _bar, stage as _stage
from .rendering.whatif import change_text
from .text import fmt_ns, pct, terminal_text
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


def _open(path: str, quiet: bool = False, steps_from: str | None = None):
    """A Timeline from a .ctl file or a torch.profiler trace (``ctl.load``),
    with a progress bar while a trace imports."""
    bar = _bar(f"importing {os.path.basename(path)}", quiet)
    try:
        tl = ctl.load(path, progress=bar, steps_from=steps_from)
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


def _plot(tl, path: str, quiet: bool, window: Any = None, report: Any = None,
          **options: Any):
    """``ctl.plot`` with a Report made first (``options``: plot's keywords)."""
    if report is None:
        report = _analyze(tl, quiet)  # of the whole Timeline, as plot's own
    with _stage("plotting", quiet):
        return ctl.plot(tl, path, window=window, report=report, **options)


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
    h = rep.headline()  # the answer again, last: what to change first
    print(f"\nIn one line: {h['short']}" + (f". Change first: {h['change']}." if
                                            h["change"] else "."))
    return 0


def _cmd_plot(a: argparse.Namespace) -> int:
    if a.what_if not in (None, True):
        edit_named(a.what_if)  # an unknown name: the error lists them
    tl = _open(a.file, a.quiet, a.steps_from)
    window = parse_window(a.window) if a.window else None
    fig = _plot(tl, a.out, a.quiet, window, overview=a.overview, memory=a.memory,
                what_if=a.what_if)
    change = getattr(fig, "cutimeline_prediction", None)
    print(f"wrote {a.out}" + (f": {change_text(change)}" if change is not None else ""))
    return 0


def _cmd_summary(a: argparse.Namespace) -> int:
    tl = _open(a.file, a.quiet, a.steps_from)
    rep = _analyze(tl, a.quiet, parse_window(a.window) if a.window else None)
    print(json.dumps(rep.to_dict(), indent=1) if a.json else rep.summary())
    return 0


def _cmd_whatif(a: argparse.Namespace) -> int:
    if a.edit:
        edit_named(a.edit)  # an unknown name: the error lists them
        if not a.out:
            raise CutimelineError("--edit names the fix to draw with -o OUT.png; "
                                  "give -o/--out too, or leave --edit out.")
    tl = _open(a.file, a.quiet, a.steps_from)
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
    h = rep.headline()
    print(f"Verdict: {h['text']} ({h['steps']}).")
    base = "without the recorder's cost" if rep.compensation is not None else "as recorded"
    print(f"what if (steady-state steps, mean; step {base} "
          f"{fmt_ns(preds[0].step_ns)}, GPU busy {pct(preds[0].busy_frac)}):")
    first = h["fix"]["edit"] if h["fix"] else ""
    for p in preds:
        mark = "*" if p.edit.name == first else " "
        part = "" if p.edit.complete else " (partial: not a verdict's fix)"
        print(f" {mark}{p.edit.name:<9} {-p.gain:+7.1%}  step {fmt_ns(p.predicted_step_ns):>9}  "
              f"GPU busy {pct(p.predicted_busy_frac):>4}  {p.edit.code}{part}")
    if first:
        print("(* the verdict's fix: the complete fix that gains most)")
    _whatif_plot(a, tl, rep)
    return 0


def _whatif_plot(a: argparse.Namespace, tl, rep) -> None:
    """``-o OUT``: the recording over its replay under ``--edit`` (default
    the top fix), as ``ctl.plot(tl, OUT, what_if=...)`` draws them."""
    if not a.out:
        return

    with _stage("plotting", a.quiet):
        fig = ctl.plot(tl, a.out, what_if=a.edit or True, report=rep,
                       window=parse_window(a.window) if a.window else None)
    print(f"wrote {a.out}: {change_text(fig.cutimeline_prediction)}",
          file=sys.stderr if a.json else sys.stdout)


def export_format(out: str, given: str | None) -> str:
    """``--format``, or the one ``out`` names: a ``.json``/``.json.gz``/``.gz``
    file is Chrome trace JSON, a folder (existing, ending in ``/``, with no
    extension, or ``.parquet``) is Parquet."""
    if given is not None:
        return given
    low = out.lower()
    if low.endswith((".json", ".json.gz", ".gz")):
        return "chrome"
    if low.endswith((os.sep, "/", ".parquet")) or os.path.isdir(out) or \
            not os.path.splitext(out)[1]:
        return "parquet"
    raise CutimelineError(f"Cannot tell the format to write {out!r} in from its name; "
                          f"end it in .json.gz (Chrome/Perfetto trace) or give a folder "
                          f"(Parquet), or pass --format chrome|parquet.")


def _cmd_export(a: argparse.Namespace) -> int:
    form = export_format(a.out, a.format)
    tl = _open(a.file, a.quiet, a.steps_from)
    with _stage("exporting", a.quiet):
        if form == "chrome":
            ctl.export_chrome(tl, a.out)
        else:
            tl.to_parquet(a.out)
    print(f"wrote {a.out}" + (" (Parquet: a file per table)" if form == "parquet" else ""))
    return 0


def _cmd_import(a: argparse.Namespace) -> int:
    tl = _open(a.trace, a.quiet, a.steps_from)
    tl.save(a.out)
    print(f"wrote {a.out}: {tl!r}")
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
    tl.save(a.out)
    print(f"wrote {a.out}: {tl!r}")
    print(describe(tl))
    return 0


def _cmd_compare(a: argparse.Namespace) -> int:
    # torch (about 1 s to import) loads only for the commands that record
    from .comparison.runner import compare
    with _stage("comparing", a.quiet):
        cmp = compare(a.script, argv=a.argv, device=a.device, steps=a.steps,
                      warmup=a.warmup, rounds=a.rounds, trace_dir=a.trace_dir)
    print(json.dumps(cmp.to_dict(), indent=1) if a.json else cmp.table())
    if a.out:
        cmp.plot(a.out)
        print(f"wrote {a.out}", file=sys.stderr if a.json else sys.stdout)
    return 0


def _cmd_record(a: argparse.Namespace) -> int:
    from .recording.script import ranked, run_recorded  # torch: see _demo_device
    module, argv = None, a.argv
    if a.module is not None:
        if not a.module:
            raise CutimelineError("-m needs the module to run: -m MODULE [ARG ...].")
        module, argv = a.module[0], a.module[1:]
    elif a.script is None:
        raise CutimelineError("record needs a script to run: cutimeline record [options] "
                              "SCRIPT.py [ARG ...], or -m MODULE [ARG ...].")
    stem = module or os.path.splitext(os.path.basename(a.script))[0]
    out = a.out or f"cutimeline-{stem}" + ("" if ranked() else ".ctl")
    with _unescaped():  # the script writes to the terminal as it would alone
        run = run_recorded(a.script, argv, module=module, device=a.device, skip=a.skip,
                           steps=a.steps, steps_from=a.steps_from, stack=a.stack,
                           memory=a.memory, keep_going=a.keep_going,
                           seconds=a.seconds, out=out)
    if run.error is not None:
        return _script_failed(run)
    if run.timeline.meta.get("disabled"):
        print(f"CUTIMELINE_DISABLE is set: {run.script.name} ran unrecorded; nothing "
              f"written.")
        return 0
    print(run.said())
    print(_analyze(run.timeline, a.quiet).summary().splitlines()[0])
    print(f"wrote {run.saved}")
    return 0


@contextlib.contextmanager
def _unescaped() -> Any:
    """``sys.stdout``/``sys.stderr`` as ``main`` found them, for the block."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (getattr(f, "unescaped", f) for f in (out, err))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _script_failed(run: Any) -> int:
    """The script raised: what Python would print (the traceback of its own
    frames, a ``sys.exit`` message), a line on what was kept, its status."""
    exc = run.error
    status, line = run.ending()
    if isinstance(exc, SystemExit) and exc.code is not None and \
            not isinstance(exc.code, int):
        print(exc.code, file=sys.stderr)
    elif not isinstance(exc, (SystemExit, KeyboardInterrupt)):
        traceback.print_exception(type(exc), exc, run.script.frames(exc.__traceback__),
                                  file=sys.stderr)
    print(f"cutimeline: {line}", file=sys.stderr)
    import torch
    if "CUDA" in str(exc) and not torch.cuda.is_available() \
            and not run.timeline.meta.get("simulated"):
        print("cutimeline: there is no CUDA here; --device sim runs the script's CUDA "
              "code on a simulated H100.", file=sys.stderr)
    return status


def _cmd_capture(a: argparse.Namespace) -> int:
    from .recording.ondemand import send_capture  # torch: see _demo_device
    out = send_capture(a.pid, steps=a.steps, out=a.out, timeout=a.timeout or None)
    print(f"{'wrote' if a.timeout else 'asked for'} {out}")
    return 0


# command -> the function that runs it (looked up when it runs)
RUN = {"demo": "_cmd_demo", "plot": "_cmd_plot", "summary": "_cmd_summary",
       "whatif": "_cmd_whatif", "what-if": "_cmd_whatif", "export": "_cmd_export",
       "import": "_cmd_import", "merge": "_cmd_merge", "compare": "_cmd_compare",
       "record": "_cmd_record", "capture": "_cmd_capture"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: 0 on success, 2 on bad input or usage (one line on
    stderr), 3 on a bug in cutimeline (the traceback, then one line that
    asks for a report), 130 on Ctrl-C. Everything it prints goes through
    ``terminal_text``: names from a trace (ops, kernels, devices, files)
    reach every output, its error messages among them, and their control
    characters must not reach the terminal (``cutimeline.text``)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaped(out), _Escaped(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


class _Escaped:
    """A text stream that writes ``terminal_text`` of what it is given to
    ``unescaped`` (a progress bar writes there: ``progress.py``)."""

    def __init__(self, unescaped: Any):
        self.unescaped = unescaped

    def write(self, text: str) -> int:
        return self.unescaped.write(terminal_text(text))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.unescaped, name)


def _main(argv: Sequence[str] | None) -> int:
    parser = command_parser()
    args = parser.parse_args(argv)
    if getattr(args, "out_required", False) and args.out is None:
        parser.error(f"{args.command}: the following arguments are required: -o/--out")
    args.quiet = getattr(args, "quiet", False)
    run = globals()[RUN[args.command]]
    notice = compile_notice(sys.stderr, after_s=COMPILE_NOTICE_AFTER_S, enabled=not args.quiet)
    try:
        with notice:
            return run(args)
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

