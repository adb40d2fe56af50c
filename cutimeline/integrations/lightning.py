"""cutimeline as Lightning's profiler: ``Trainer(profiler=CutimelineProfiler())``.

    from cutimeline.integrations.lightning import CutimelineProfiler
    trainer = L.Trainer(max_steps=100, profiler=CutimelineProfiler(skip=1, steps=10))
    trainer.fit(model, loader)

It records steps ``skip`` .. ``skip + steps - 1`` of ``fit``
(``training.py``: a step is one optimizer step, ``trainer.global_step``
advancing, ended with its training batch), writes the recording to
``out_dir`` (default: the Trainer's log folder) as
``cutimeline-step-<a>-<b>.ctl``, and, as soon as it ends, logs it to
each W&B and TensorBoard logger the Trainer has (``wandb.log``,
``tensorboard.log``, at the recorded steps' global steps). Its
``summary()`` — what Lightning prints after ``fit`` — is the report's
summary. ``lightning`` is imported when the profiler is made
(``pip install 'cutimeline[frameworks]'``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..errors import CutimelineError
from .logged import Logged, need, prepared
from .training import TrainingRecording

__all__ = ["CutimelineProfiler"]

_WHERE = "CutimelineProfiler"


def _profiler_base() -> type:
    profilers = need("lightning.pytorch.profilers", "frameworks", _WHERE)
    return profilers.Profiler


def __getattr__(name: str) -> Any:
    # the class subclasses Lightning's Profiler: made on first use, so that
    # importing this module needs no lightning
    if name == "CutimelineProfiler":
        cls = globals()["CutimelineProfiler"] = _make_class(_profiler_base())
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_class(Profiler: type) -> type:
    class CutimelineProfiler(Profiler):
        """A Lightning ``Profiler`` that records ``steps`` training steps
        after ``skip`` with cutimeline (see the module doc). ``out_dir``:
        the folder for the ``.ctl`` (None: the Trainer's log folder).
        ``device``: as ``record(device=)``; "auto" is the simulated GPU
        when the Trainer runs inside ``SimGPU.as_cuda()``."""

        def __init__(self, skip: int = 1, steps: int = 10,
                     out_dir: str | os.PathLike | None = None, device: Any = "auto"):
            super().__init__(dirpath=None, filename=None)
            self.recording = TrainingRecording(skip, steps, out_dir, device, _WHERE)
            self.report: Any = None  # the recording's Report, once it has ended
            self.saved: str | None = None  # where its .ctl went
            self._said = ""

        def setup(self, stage: str, local_rank: int | None = None,
                  log_dir: str | None = None) -> None:
            super().setup(stage, local_rank=local_rank, log_dir=log_dir)
            trainer = self._lightning_module.trainer if self._lightning_module else None
            # Lightning tells its callbacks, not its profiler, that fit raised:
            # one of ours ends the recording there (else its hooks stay on)
            if trainer is not None and not any(isinstance(c, _Ender)
                                               for c in trainer.callbacks):
                trainer.callbacks.append(_Ender(self))

        def failed(self, error: BaseException) -> None:
            """``fit`` raised ``error``: the recording so far is saved and
            logged; the error propagates unchanged (a failure here is a warning)."""
            try:
                if self.recording.recording and self.recording.end(error):
                    self._deliver()
            except Exception as own:
                warnings.warn(f"cutimeline could not save the recording after fit raised: "
                              f"{own}", RuntimeWarning, stacklevel=2)

        def start(self, action_name: str) -> None:
            if self._stage != "fit" or self.recording.run is not None:
                return
            if action_name.endswith("].train_dataloader_next") or \
                    action_name == "run_training_batch":
                self.recording.begin(self._trainer().global_step)

        def stop(self, action_name: str) -> None:
            if action_name == "run_training_batch" and self.recording.recording:
                if self.recording.step_ended(self._trainer().global_step):
                    self._deliver()
            elif action_name.startswith("[LightningModule]") and \
                    action_name.endswith(".on_train_end") and self.recording.recording:
                if self.recording.end():
                    self._deliver()

        def teardown(self, stage: str | None) -> None:
            if self.recording.recording and self.recording.end():
                self._deliver()
            super().teardown(stage)

        def summary(self) -> str:
            return self._said

        def _trainer(self) -> Any:
            module = self._lightning_module
            if module is None:
                raise CutimelineError("CutimelineProfiler runs inside a Trainer: pass it "
                                      "as Trainer(profiler=CutimelineProfiler(...)).")
            return module.trainer

        def _deliver(self) -> None:
            """Save the recording, log it to the Trainer's loggers, keep the
            summary for ``summary()``."""
            rec = self.recording
            trainer = self._lightning_module.trainer if self._lightning_module else None
            folder = self.dirpath or (trainer.default_root_dir if trainer else os.getcwd())
            self.saved = rec.save(os.fspath(folder))
            if self.saved is None:  # CUTIMELINE_DISABLE
                self._said = "cutimeline: recording disabled (CUTIMELINE_DISABLE)."
                return
            logged = prepared(rec.timeline, _WHERE)
            self.report = logged.report
            if trainer is not None and trainer.is_global_zero:
                _log_to(trainer.loggers, logged, rec.base)
            logged.close()
            self._said = f"cutimeline: wrote {self.saved}\n{logged.summary()}"

    from lightning.pytorch.callbacks import Callback

    class _Ender(Callback):
        """Ends the profiler's recording when ``fit`` raises."""

        def __init__(self, profiler: Any):
            self.profiler = profiler

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.profiler.failed(exception)

    CutimelineProfiler.__module__ = _Ender.__module__ = __name__
    return CutimelineProfiler


def _log_to(loggers: list, logged: Logged, base: int) -> None:
    """Log to each W&B and TensorBoard logger of the Trainer; the first
    recorded step at its global step (``base`` + its number)."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    from . import tensorboard, wandb
    first = logged.points()[0][0]
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            wandb.log(logged, run=logger.experiment)
        elif isinstance(logger, TensorBoardLogger):
            tensorboard.log(logged, logger.experiment, step=base + max(first, 0))
