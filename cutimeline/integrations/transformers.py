"""cutimeline as a Hugging Face ``TrainerCallback``:
``Trainer(..., callbacks=[CutimelineCallback()])`` (``Seq2SeqTrainer`` too).

    from cutimeline.integrations.transformers import CutimelineCallback
    Trainer(model=model, args=args, train_dataset=data,
            callbacks=[CutimelineCallback(skip=1, steps=10)]).train()

It records steps ``skip`` .. ``skip + steps - 1`` of ``train()``
(``training.py``: a step is one optimizer step, ``state.global_step``,
from ``on_step_begin`` to ``on_step_end``; gradient accumulation's
micro-batches stay inside it), writes the recording to ``out_dir``
(default ``args.output_dir``) as ``cutimeline-step-<a>-<b>.ctl``, prints
the report's summary and logs it to the ``report_to`` targets it knows,
at the recorded steps' global steps: "wandb" (the run the Trainer's
``WandbCallback`` started, ``wandb.log``) and "tensorboard"
(``tensorboard.log`` into ``TENSORBOARD_LOGGING_DIR`` when set, as the
Trainer's ``TensorBoardCallback`` does, else transformers 4's
``args.logging_dir``, else ``<output_dir>/runs/cutimeline``, a run of its
own beside the Trainer's). Only the main process logs and prints. A
``train()`` that raises tells no callback: ``callback.end(error)`` in
your ``except`` ends the recording there and saves what it held.
``transformers`` is imported when the callback is made (``pip install
'cutimeline[frameworks]'``).
"""

from __future__ import annotations

import os
from typing import Any

from .logged import need, prepared
from .training import TrainingRecording

__all__ = ["CutimelineCallback", "KNOWN_TARGETS"]

_WHERE = "CutimelineCallback"

#: the ``report_to`` targets the callback logs to
KNOWN_TARGETS = ("wandb", "tensorboard")


def __getattr__(name: str) -> Any:
    # the class subclasses TrainerCallback: made on first use, so that
    # importing this module needs no transformers
    if name == "CutimelineCallback":
        base = need("transformers", "frameworks", _WHERE).TrainerCallback
        cls = globals()["CutimelineCallback"] = _make_class(base)
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def targets(report_to: Any) -> list[str]:
    """The ``report_to`` targets (a name, a list, "all" or "none") that
    the callback logs to."""
    if report_to is None or report_to == "none":
        return []
    if isinstance(report_to, str):
        report_to = list(KNOWN_TARGETS) if report_to == "all" else [report_to]
    return [t for t in KNOWN_TARGETS if t in report_to]


def _make_class(TrainerCallback: type) -> type:
    class CutimelineCallback(TrainerCallback):
        """A ``TrainerCallback`` that records ``steps`` training steps
        after ``skip`` with cutimeline (see the module doc). ``out_dir``:
        the folder for the ``.ctl`` (None: ``args.output_dir``).
        ``device``: as ``record(device=)``; "auto" is the simulated GPU
        when the Trainer runs inside ``SimGPU.as_cuda()``."""

        def __init__(self, skip: int = 1, steps: int = 10,
                     out_dir: str | os.PathLike | None = None, device: Any = "auto"):
            self.recording = TrainingRecording(skip, steps, out_dir, device, _WHERE)
            self.report: Any = None  # the recording's Report, once it has ended
            self.saved: str | None = None  # where its .ctl went
            self._at: tuple = ()  # (args, state) of the training recorded

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.recording.run is None:
                self._at = (args, state)
                self.recording.begin(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.recording.step_ended(state.global_step):
                self._deliver(args, state)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.recording.end():
                self._deliver(args, state)

        def end(self, error: BaseException | None = None) -> str | None:
            """End the recording where the Trainer could not: ``train()``
            raised ``error`` (transformers tells no callback so). What it
            held is saved, logged and printed; the path of its ``.ctl``."""
            if self.recording.recording and self.recording.end(error):
                self._deliver(*self._at)
            return self.saved

        def _deliver(self, args: Any, state: Any) -> None:
            rec = self.recording
            self.saved = rec.save(args.output_dir)
            if self.saved is None or not state.is_world_process_zero:
                return  # CUTIMELINE_DISABLE, or not the main process
            logged = prepared(rec.timeline, _WHERE)
            self.report = logged.report
            first = rec.base + max(logged.points()[0][0], 0)
            try:
                for target in targets(args.report_to):
                    if target == "wandb":
                        from . import wandb
                        wandb.log(logged)
                    else:
                        from . import tensorboard
                        writer = tensorboard.summary_writer(_tensorboard_dir(args), _WHERE)
                        try:
                            tensorboard.log(logged, writer, step=first)
                        finally:
                            writer.close()
            finally:
                logged.close()
            print(f"cutimeline: wrote {self.saved}\n{logged.summary()}")

    CutimelineCallback.__module__ = __name__
    return CutimelineCallback


def _tensorboard_dir(args: Any) -> str:
    """Where the Trainer's TensorBoardCallback writes, when that can be known
    (see the module doc); else a folder of its own under ``output_dir``."""
    folder = os.getenv("TENSORBOARD_LOGGING_DIR") or getattr(args, "logging_dir", None)
    if folder:
        return os.path.expanduser(folder)
    return os.path.join(args.output_dir, "runs", "cutimeline")
