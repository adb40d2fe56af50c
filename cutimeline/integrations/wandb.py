"""A recording logged to a Weights & Biases run, beside the run's metrics.

    import cutimeline.integrations.wandb as ctl_wandb
    run = wandb.init(project="train")
    ...
    ctl_wandb.log(rec.timeline)           # or the Report of ctl.analyze(tl)

What goes to the run (keys under ``name``, default "cutimeline"): the
timeline figure (``name/timeline``, a ``wandb.Image``), the summary text
(``name/summary``, ``wandb.Html``), the step table (``name/steps``, a
``wandb.Table``: step, verdict, fix, gain, step_ms, gpu_busy,
idle_<cause>, mfu), the run summary fields ``name/verdict``,
``name/fix`` (the change to make first), ``name/predicted_gain``,
``name/step_ms``, ``name/gpu_busy`` and ``name/mfu`` (``logged.py``
says what each is), and an artifact of type "cutimeline" named
``name-<run id>`` holding ``name.ctl`` (``ctl.load`` reads it back) and
``name.json.gz`` (open it in Perfetto). ``wandb`` is imported here, when
called: ``pip install 'cutimeline[wandb]'``.
"""

from __future__ import annotations

import html
import os
import tempfile
from typing import Any

from ..analysis import Report
from ..errors import CutimelineError
from .logged import check_name, need, prepared

__all__ = ["log", "active_run"]


def active_run(run: Any = None, where: str = "cutimeline.integrations.wandb.log") -> Any:
    """``run``, or the active ``wandb.run`` when None, checked to be a W&B
    run that has not finished."""
    wandb = need("wandb", "wandb", where)
    if run is None:
        run = wandb.run
        if run is None:
            raise CutimelineError(f"{where} found no active W&B run; call wandb.init() "
                                  f"first, or pass run=the run to log to.")
    if not isinstance(run, need("wandb.sdk.wandb_run", "wandb", where).Run):
        raise CutimelineError(f"{where}(run={type(run).__name__} object) needs a W&B run: "
                              f"what wandb.init() returns, or None for wandb.run.")
    if getattr(run, "_is_finished", False):
        raise CutimelineError(f"{where} was given W&B run {run.id}, which has finished; "
                              f"log before run.finish(), or to a new wandb.init() run.")
    return run


def log(report_or_timeline: Any, run: Any = None, *, name: str = "cutimeline") -> Report:
    """Log a recording (a ``Report``, or a ``Timeline`` analysed here) to
    the W&B run ``run`` (default: the active ``wandb.run``): figure,
    summary text, step table, summary fields and the ``.ctl`` and
    Perfetto files as an artifact (see the module doc). Returns the Report."""
    where = "cutimeline.integrations.wandb.log"
    name = check_name(name, where)
    run = active_run(run, where)
    wandb = need("wandb", "wandb", where)
    logged = prepared(report_or_timeline, where)
    owned = logged is not report_or_timeline  # else the caller closes its figure
    fields = logged.fields()
    columns, rows = logged.table()
    art = wandb.Artifact(f"{name}-{run.id}", type="cutimeline",
                         description=logged.report.judgement.verdict.value,
                         metadata={k: v for k, v in fields.items() if v is not None})
    # W&B copies each file as it is handed over: the folder can go after
    with tempfile.TemporaryDirectory(prefix="cutimeline-") as folder:
        try:
            image = wandb.Image(logged.png(folder, name))
        finally:
            if owned:
                logged.close()
        run.log({f"{name}/timeline": image,
                 f"{name}/summary": wandb.Html(
                     f"<pre>{html.escape(logged.summary())}</pre>", inject=False),
                 f"{name}/steps": wandb.Table(columns=columns, data=rows)})
        for key, value in fields.items():
            if value is not None:
                run.summary[f"{name}/{key}"] = value
        for path in logged.files(folder, name):
            art.add_file(path, name=os.path.basename(path))
        run.log_artifact(art)
    return logged.report
