"""``ctl.plot(tl, what_if=...)``: the recording and its what-if replay, one above the other.

    fig = ctl.plot(tl, "whatif.png", what_if="data")   # or what_if=True

A prediction is only believable when one can see where the time went, so
the figure draws the Timeline as recorded and as replayed under one fix
(``Report.what_if(edit)``, analysed by ``Report.replay_report``) on one
time axis: time 0 is the start of the recording in both, and the x axis
runs to the end of the longer. Each gets its lanes (``lanes/scene.py``)
and a step strip (``strip.py``): the predicted one labels each step with
its recorded and predicted time and the gain ("step 3 · 64.9 → 52.7 ms,
−19% · GPU 81%"), coloured by the replay's own verdict. Every number
comes from the ``whatif.Prediction``; the title quotes the mean step
times over the steady-state steps:

    DataLoader(num_workers>=2, pin_memory=True): 64.9 → 52.7 ms per step, −19%

``what_if=True`` takes the fix predicted to gain most; the recorder's own
cost, not a fix in the user's code, only when nothing else applies, as
the summary's advice does. ``fig.axes``: recorded lanes, predicted
lanes, recorded strip, predicted strip, sharing the x axis. No
queue-depth, CPU-lead or memory panels: the figure answers one question,
how long each step takes with the fix.
"""

from __future__ import annotations

import os
from typing import Any

from ..analysis import EDITS, edit_named, steady
from ..errors import CutimelineError
from ..text import fmt_ns, pct
from . import pixels as px
from .frame import check_options, check_path, legends, save_figure, title_block
from .lanes import Scene
from .placement import FONT, layout, px_width
from .strip import draw_strip, verdict_line
from .titles import SEP, source_name, window_text, xlabel

__all__ = ["plot_what_if", "chosen", "change_text", "step_labels"]


def plot_what_if(tl: Any, path: str | os.PathLike | None = None, *, what_if: Any = True,
                 window: Any = None, width: float = 14.0, dpi: int = 100,
                 flows: int = 500, title: str | None = None, report: Any = None,
                 overview: bool | None = None):
    """The recorded Timeline over its replay under ``what_if``; returns the
    ``Figure`` (saved to ``path`` when given: PNG, SVG or PDF by its
    extension). ``what_if``: an edit's name or True (the module doc).
    ``window``: as for ``plot``, applied to each Timeline and each drawn
    from its own window start (with steps, step N of the replay is drawn
    under step N of the recording; the whole recording by default).
    ``report``: ``ctl.analyze(tl)`` if you have it (its ``what_if()``
    predictions are reused). ``title`` replaces the name of the source.
    ``width``, ``dpi``, ``flows``, ``overview``: as for ``plot``. The
    figure's ``cutimeline_prediction`` is the ``Prediction`` drawn."""
    fmt = check_path(path)
    check_options(width, dpi, flows, title, overview)
    rec = Scene(tl, window, what="plot(what_if=...)", report=report)
    pred, replay = _replay(rec.report, what_if)
    scenes = [rec, Scene(replay, window, what="plot(what_if=...)",
                         report=rec.report.replay_report(replay))]
    fig, axes = layout([s.labels for s in scenes], width, dpi, panels=False, strip=True)
    span_ns = max(s.w1 - s.w0 for s in scenes)
    used, dense = [], []
    for i, scene in enumerate(scenes):
        # one pixel grid for both: the columns of the longer window
        cols = px.Columns(scene.w0, scene.w0 + span_ns, px_width(axes[i]))
        dense.append(scene.dense(cols) if overview is None else overview)
        used.append(scene.draw_lanes(axes[i], cols, flows, dense[-1]))
        labels = None if i == 0 else (lambda row: step_labels(row, pred))
        used[-1]["verdicts"] = draw_strip(scene, axes[2 + i], cols, labels=labels,
                                          name=("recorded", "predicted")[i])
        axes[2 + i].get_yticklabels()[0].set_fontweight("bold")
    for ax in axes:
        ax.set_xlim(0, span_ns / 1e6)
    axes[3].set_title(f"predicted, with the fix — {pred.edit.code}",
                      loc="left", fontsize=FONT + 0.5, pad=3)
    axes[1].set_xlabel(_xlabel(scenes), fontsize=FONT)
    legends(fig, [axes[0], axes[1], axes[2]], used, scenes)
    title_block(fig, axes[2], change_text(pred), _subtitle(rec, pred, title, any(dense)),
                verdict_line(rec.report), rec.report.overall["verdict"])
    fig.cutimeline_prediction = pred
    fig.cutimeline_overview = tuple(dense)
    if fmt:
        save_figure(fig, path, fmt)
    return fig


def chosen(preds: list, what_if: Any):
    """The ``Prediction`` that ``what_if`` names among ``Report.what_if()``'s
    (True: the complete fix that gains most, the one a verdict names, else
    the first); None for a name that none has (its replay is not
    measured)."""
    if what_if is True:
        if not preds:
            raise CutimelineError("what_if=True, but no fix applies to this Timeline "
                                  "(Report.what_if() is empty: it needs gpu rows and "
                                  "something a fix would remove); plot it without "
                                  "what_if.")
        return next((p for p in preds if p.edit.is_fix and p.edit.complete),
                    preds[0])
    return next((p for p in preds if p.edit.name == what_if), None)


def _replay(rep, what_if: Any):
    """(Prediction, replayed Timeline) for ``what_if``; the error of
    ``edit_named`` for an unknown name, of ``Report.what_if`` for an edit
    that does not apply."""
    if what_if is not True and not isinstance(what_if, str):
        raise CutimelineError(f"what_if={what_if!r} must be True (the fix predicted to "
                              f"gain most) or the name of a fix: {', '.join(EDITS)}.")
    if isinstance(what_if, str):
        edit_named(what_if)  # an unknown name: the error lists the edits
        replay = rep.what_if(what_if)  # one that does not apply: its error
    pred = chosen(rep.what_if(), what_if)
    if pred is None:
        raise CutimelineError(f"The replay under what_if={what_if!r} loses a step of "
                              f"the recording, so it predicts no step times to draw; "
                              f"choose a fix that Report.what_if() lists.")
    if what_if is True:
        replay = rep.what_if(pred.edit)
    return pred, replay


def gain_text(gain: float) -> str:
    """A change of step time as a signed percentage: −19%, +3%, ±0%."""
    if round(100 * gain) == 0:
        return "±0%"
    return f"−{pct(gain)}" if gain > 0 else f"+{pct(-gain)}"


def arrow(was_ns: float, now_ns: float) -> str:
    """"64.9 → 52.7 ms" (a unit said once when both share it)."""
    a, b = fmt_ns(was_ns), fmt_ns(now_ns)
    if a.split()[-1] == b.split()[-1]:
        a = a.rsplit(" ", 1)[0]
    return f"{a} → {b}"


def change_text(pred) -> str:
    """The title: the change in code, short (up to its first ": " or " (":
    the predicted lanes' title spells it whole), and the mean step time it
    predicts, "DataLoader(num_workers>=2, pin_memory=True): 64.9 → 52.7 ms
    per step, −19%" ("in all" for a Timeline without steps)."""
    code = pred.edit.code.split(": ")[0].split(" (")[0]
    per = "per step" if len(pred.steps) and pred.steps["number"][0] >= 0 else "in all"
    return f"{code}: {arrow(pred.step_ns, pred.predicted_step_ns)} {per}, " \
           f"{gain_text(pred.gain)}"


def _xlabel(scenes) -> str:
    rec, new = scenes
    if rec.w0 != new.w0:  # step windows, or an import's device extent
        return "time (ms) from the start of each window"
    if rec.w0 == rec.tl.start_ns:
        return "time (ms) from the start of the recording (the replay's too)"
    return xlabel(rec)


def _subtitle(rec: Scene, pred, title: str | None, dense: bool) -> str:
    n = steady(pred.steps)["number"]
    if len(n) and n[0] >= 0:
        which = f"steps {n[0]}–{n[-1]}" if len(n) > 1 else f"step {n[0]}"
        if len(n) < len(pred.steps):
            which += " (not the first: warm-up)"
        which = f"step time: mean of {which}"
    else:
        which = "no steps: the time of the whole window"
    parts = [f"{title or source_name(rec)} — {window_text(rec)}", which,
             f"GPU busy {pct(pred.busy_frac)} → {pct(pred.predicted_busy_frac)}"]
    if dense:
        parts.append("overview: GPU lanes show per pixel column the share busy")
    return SEP.join(parts)


def step_labels(row, pred) -> list[str]:
    """The predicted strip's labels of one step row of the replay's report,
    longest first, from ``pred.steps``: "step 3 · 64.9 → 52.7 ms, −19% ·
    GPU 81%" (recorded → predicted, the gain, the predicted GPU busy); the
    narrow ones on two lines, the gain under the times."""
    n = int(row["number"])
    hit = pred.steps[pred.steps["number"] == n]
    if not len(hit):  # not a step the prediction measured (cannot happen): plain
        return [fmt_ns(int(row["duration_ns"]))]
    was, now = int(hit["base_ns"][0]), int(hit["predicted_ns"][0])
    both, g = arrow(was, now), gain_text(1 - now / was if was > 0 else 0.0)
    head = f"step {n}" if n >= 0 else "no steps"
    busy = f"GPU {pct(float(hit['predicted_busy_frac'][0]))}"
    return [f"{head} · {both}, {g} · {busy}", f"{head} · {both}, {g}", f"{both}, {g}",
            f"{both}\n{g}", f"{fmt_ns(now)}\n{g}", fmt_ns(now)]
