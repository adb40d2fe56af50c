"""The verdict scenario sets, in the one order ``bench_verdicts.py`` lists
and runs them (``SETS``); each set is a module of ``@scenario`` functions,
kept in the order they are written.

``scenarios()`` collects them: no set registers itself on import, so the
order is this list's, whatever imported what first.
"""

from __future__ import annotations

import around_the_step
import collectives
import data_dependent
import loop_kinds
import scenarios as first
import third_party
import training_frameworks
from scenarios import Scenario

#: (set, what its loops are about), in the order of the table
SETS = (
    (first, "the first loops: input-, sync-, host-, launch- and GPU-bound programs"),
    (around_the_step, "the loops around the step: AMP, clipping, EMA, metrics, eval, "
                      "workers, timing, schedulers, RL"),
    (loop_kinds, "progress bars, checkpoints, per-sample loops, LSTM cells, multi-task "
                 "reads, activation checkpointing, ViT, GAN, sleeps, decoding, NaN guard"),
    (data_dependent, "ops whose output size depends on the data: masked loss, MoE routing"),
    (collectives, "torch.distributed collectives: DDP all-reduce, synchronous and overlapped"),
    (third_party, "third-party model code (the zoo extra): HF, timm, torchvision, "
                  "pytorch/examples"),
    (training_frameworks, "Lightning, HF Trainer, accelerate (the frameworks extra)"),
)


def scenarios() -> dict[str, Scenario]:
    """Every set's scenarios by name, set after set as ``SETS`` orders them."""
    out: dict[str, Scenario] = {}
    for module, _ in SETS:
        for fn in vars(module).values():  # definition order
            sc = getattr(fn, "scenario", None)
            if not isinstance(sc, Scenario) or fn.__module__ != module.__name__:
                continue
            if sc.name in out:
                raise ValueError(f"scenario {sc.name!r} is in two sets: "
                                 f"{out[sc.name].run.__module__} and {module.__name__}.")
            out[sc.name] = sc
    return out
