"""The ``cutimeline`` command (also ``python -m cutimeline``), on the public API.

    cutimeline --version
    cutimeline demo [--out DIR] [--steps N] [--device auto|cuda|cuda:N|sim]
    cutimeline plot FILE -o OUT.png [--window W]
    cutimeline summary FILE [--window W] [--json]
    cutimeline whatif FILE [--window W] [--json]
    cutimeline export FILE -o OUT.json.gz
    cutimeline import TRACE -o OUT.ctl
    cutimeline merge DIR -o merged.ctl

FILE is a ``.ctl`` file or a torch.profiler trace (``.json``/``.json.gz``).
W is a step (``3``), a step range (``3-5``) or seconds from the start
(``0.5s-0.75s``): the spellings ``window=`` takes in Python, read by the
same parser (``timeline/windows.py``); ``--device`` takes the spellings of
``record(device=)`` (``recording/devicespec.py``) that name a GPU, real or
simulated. Errors print one line and exit with status 2; a bug in
cutimeline prints its traceback and a line asking for a report (status 3).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from .errors import CutimelineError

__all__ = ["main", "parse_window"]


def parse_window(text: str) -> Any:
    """``--window``'s text, by the parser ``window=`` uses (see
    ``timeline/windows.py``): ``"3"`` → 3, ``"3-5"`` → (3, 5),
    ``"0.5s-0.75s"`` → (0.5, 0.75)."""
    from .timeline.windows import parse_window as parse
    try:
        return parse(text)
    except CutimelineError:
        raise CutimelineError(f"--window {text!r} is not understood: give a step (3), "
                              f"a step range (3-5 or 3:5, first to last) or seconds "
                              f"from the start (0.5s-0.75s, begin to end).") from None


def _demo_device(text: str) -> str:
    """``--device``'s text in the vocabulary of ``record(device=)``, as the
    demo takes it: "auto", "cuda" (after making cuda:N current) or "sim"."""
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


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal and only
    for work that lasts longer than ``after_s``."""

    def __init__(self, label: str, *, stream=None, after_s: float = 0.3, width: int = 30):
        self.label, self.stream, self.width = label, stream or sys.stderr, width
        self.t0, self.after_s, self.shown = time.perf_counter(), after_s, False
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, stage: str, fraction: float) -> None:
        if not self.tty or time.perf_counter() - self.t0 < self.after_s:
            return
        f = min(max(float(fraction), 0.0), 1.0)
        n = int(round(f * self.width))
        self.stream.write(f"\r{self.label} [{'#' * n}{'.' * (self.width - n)}] "
                          f"{f:4.0%} {stage:<12}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(f"\r{' ' * (len(self.label) + self.width + 20)}\r")
            self.stream.flush()

    def done(self) -> None:
        if self.shown:
            self.stream.write(f"\r{self.label} done in "
                              f"{time.perf_counter() - self.t0:.1f} s{' ' * self.width}\n")
            self.stream.flush()


def _open(path: str):
    """A Timeline from a .ctl file or a torch.profiler trace (``ctl.load``),
    with a progress bar while a trace imports."""
    import cutimeline as ctl
    bar = Progress(f"importing {os.path.basename(path)}")
    try:
        tl = ctl.load(path, progress=bar)
    except BaseException:
        bar.clear()   # the error's line starts on a line of its own
        raise
    bar.done()
    return tl


def _cmd_demo(a: argparse.Namespace) -> int:
    import cutimeline as ctl

    from .demo import run_demo
    device = _demo_device(a.device)
    os.makedirs(a.out, exist_ok=True)
    res = run_demo(steps=a.steps, device=device)
    where = ("on a SIMULATED GPU (no CUDA device here): " if res.simulated
             else "on ") + res.device
    print(f"recorded {a.steps} training steps {where}")
    tl = res.timeline
    paths = {k: os.path.join(a.out, v) for k, v in
             (("ctl", "demo.ctl"), ("png", "timeline.png"), ("trace", "demo.json.gz"))}
    tl.save(paths["ctl"])
    ctl.plot(tl, paths["png"])
    ctl.export_chrome(tl, paths["trace"])
    print(ctl.analyze(tl).summary())
    print(f"\nwrote {paths['png']} (timeline), {paths['trace']} (open in "
          f"https://ui.perfetto.dev) and {paths['ctl']} (ctl.load)")
    return 0


def _cmd_plot(a: argparse.Namespace) -> int:
    import cutimeline as ctl
    tl = _open(a.file)
    window = parse_window(a.window) if a.window else None
    ctl.plot(tl, a.output, window=window)
    print(f"wrote {a.output}")
    return 0


def _cmd_summary(a: argparse.Namespace) -> int:
    import cutimeline as ctl
    tl = _open(a.file)
    rep = ctl.analyze(tl, window=parse_window(a.window) if a.window else None)
    print(json.dumps(rep.to_dict(), indent=1) if a.json else rep.summary())
    return 0


def _cmd_whatif(a: argparse.Namespace) -> int:
    import cutimeline as ctl

    from .analysis.words import fmt_ns, pct
    tl = _open(a.file)
    rep = ctl.analyze(tl, window=parse_window(a.window) if a.window else None)
    preds = rep.what_if()
    if a.json:
        print(json.dumps([p.to_dict() for p in preds], indent=1))
        return 0
    if not preds:
        raise CutimelineError(f"{a.file} gives no what-if predictions: it needs gpu rows "
                              f"and something a fix would remove.")
    print(f"what if (steady-state steps, median; recorded step "
          f"{fmt_ns(preds[0].step_ns)}, GPU busy {pct(preds[0].busy_frac)}):")
    for p in preds:
        print(f"  {p.edit.name:<9} {-p.gain:+7.1%}  step {fmt_ns(p.predicted_step_ns):>9}  "
              f"GPU busy {pct(p.predicted_busy_frac):>4}  {p.edit.code}")
    return 0


def _cmd_export(a: argparse.Namespace) -> int:
    import cutimeline as ctl
    ctl.export_chrome(_open(a.file), a.output)
    print(f"wrote {a.output}")
    return 0


def _cmd_import(a: argparse.Namespace) -> int:
    tl = _open(a.trace)
    tl.save(a.output)
    print(f"wrote {a.output}: {tl!r}")
    for w in tl.meta.get("import_warnings", []):
        print(f"note: {w}")
    return 0


def _cmd_merge(a: argparse.Namespace) -> int:
    import cutimeline as ctl

    from .dist.straggler import describe
    tl = ctl.merge(a.dir)
    tl.save(a.output)
    print(f"wrote {a.output}: {tl!r}")
    print(describe(tl))
    return 0


def _parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(
        prog="cutimeline", description="What a PyTorch program does on both "
        "sides of the CPU/GPU boundary.")
    p.add_argument("--version", action="version", version=f"cutimeline {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    d = sub.add_parser("demo", help="record a small training loop, plot and "
                       "summarise it (CUDA when present, else a simulated GPU)")
    d.add_argument("--out", default="cutimeline-demo", help="output folder")
    d.add_argument("--steps", type=int, default=8)
    d.add_argument("--device", default="auto", help="auto (CUDA when present, else "
                   "sim), cuda, cuda:N or sim (a simulated H100)")
    d.set_defaults(run=_cmd_demo)
    for name, helptext, run in (
            ("plot", "draw the timeline of FILE", _cmd_plot),
            ("summary", "print the analysis of FILE", _cmd_summary),
            ("whatif", "predict the step time of FILE under each fix, ranked",
             _cmd_whatif),
            ("export", "write FILE as a Chrome/Perfetto trace", _cmd_export)):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("file", metavar="FILE", help=".ctl file or torch.profiler trace")
        if name not in ("summary", "whatif"):
            c.add_argument("-o", "--output", required=True)
        if name in ("plot", "summary", "whatif"):
            c.add_argument("--window", help="step (3), steps (3-5 or 3:5) or seconds "
                           "(0.5s-0.75s)")
        if name in ("summary", "whatif"):
            c.add_argument("--json", action="store_true", help="the result as JSON")
        c.set_defaults(run=run)
    i = sub.add_parser("import", help="read a torch.profiler trace into a .ctl file")
    i.add_argument("trace", metavar="TRACE")
    i.add_argument("-o", "--output", required=True)
    i.set_defaults(run=_cmd_import)
    m = sub.add_parser("merge", help="merge the rank-<r>.ctl files of DIR")
    m.add_argument("dir", metavar="DIR")
    m.add_argument("-o", "--output", required=True)
    m.set_defaults(run=_cmd_merge)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: 0 on success, 2 on bad input or usage (one line on
    stderr), 3 on a bug in cutimeline (the traceback, then one line that
    asks for a report), 130 on Ctrl-C."""
    args = _parser().parse_args(argv)
    try:
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
    except KeyboardInterrupt:
        print("cutimeline: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything else is ours to fix
        import traceback

        from . import __version__
        traceback.print_exc(file=sys.stderr)
        print(f"cutimeline: internal error: {type(exc).__name__}: {_one_line(exc)[:200]} -- "
              f"this is a bug in cutimeline {__version__}; please report it with the "
              f"traceback above and the command that caused it.", file=sys.stderr)
        return 3


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

