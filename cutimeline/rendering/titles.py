"""What a figure says in words: its source, its window, its counts.

The window is always stated: "the whole recording", "step 3", "steps
3–5", "0.5–0.75 s", or "first to last device activity" (the default for
imported traces without steps, ``lanes/scene.py``).
"""

from __future__ import annotations

import os

import numpy as np

from ..text import steps_from_text, warnings_text

__all__ = ["source_name", "window_text", "counts_text", "xlabel"]

SEP = "   ·   "


def source_name(scene) -> str:
    """"SIMULATED — recorded by cutimeline on SimGPU h100", "torch.profiler
    trace run.json.gz on NVIDIA A100"."""
    m = scene.tl.meta
    src = m.get("source", "")
    what = {"record": "recorded by cutimeline", "kineto": "torch.profiler trace",
            "synthetic": "synthetic Timeline"}.get(src, src or "Timeline")
    if m.get("file"):
        what += f" {os.path.basename(str(m['file']))}"
    device = m.get("device_name")
    if device:
        what += f" on {device}"
    return ("SIMULATED — " if m.get("simulated") else "") + what


def window_text(scene) -> str:
    """The window drawn, in the words of the module doc."""
    w = scene.window
    if w is None:
        return ("first to last device activity" if scene.extent == "device"
                else "the whole recording")
    if isinstance(w, (int, np.integer)):
        return f"step {w}"
    if isinstance(w, range):
        w = (w[0], w[-1])
    if isinstance(w, tuple) and len(w) == 2:
        a, b = w
        if all(isinstance(v, (int, np.integer)) for v in w):
            return f"step {a}" if a == b else f"steps {a}–{b}"
        return f"{a:g}–{b:g} s"
    return f"window {w!r}"


def counts_text(scene, overview: bool = False) -> str:
    tl = scene.tl
    n_steps = len(tl.step_numbers())
    parts = [f"{scene.span_ms:,.3f} ms shown", f"{len(tl.ops):,} ops",
             f"{len(tl.gpu):,} GPU rows", f"{n_steps} step{'s' * (n_steps != 1)}"
             + steps_from_text(tl.meta)]
    if tl.warnings:
        parts.append(warnings_text(tl.warnings))
    if overview:
        parts.append("overview: GPU lanes show per pixel column the share busy "
                     "(from the bottom) and idle by cause")
    return SEP.join(parts)


def xlabel(scene) -> str:
    off = (scene.w0 - scene.tl.start_ns) / 1e6
    where = f"{off:,.3f} ms" if off < 10_000 else f"{off / 1e3:,.3f} s"
    return f"time (ms) from the start of the window, {where} into the Timeline"
