"""Whole-step slowdown under the recorder: a transformer training step, and
tiny ops under a SimGPU that owns CPU tensors (issue 25's last two rows).

    python benchmarks/overhead/bench_slowdown.py [--steps 10] [--rounds 7] [--ops 2000]

*Transformer*: a 2-layer ``nn.TransformerEncoder`` (d_model 128, 4 heads,
batch 8 × 32 tokens) trained with AdamW, one thread; per round each
variant runs ``--steps`` steps after one warm-up step, taking turns in an
order that turns each round: nothing, a bare pass-through
``TorchDispatchMode`` (the floor of any dispatch-mode recorder),
``ctl.record(device="cpu")``, the same with ``out_dir`` (its journal,
appended to every ``flusher.PERIOD_S``: the median step hides the
steps a flush falls in, the tiny-op table's total ÷ ops does not), the
same with the op stream's previous per-op path (``bench_record.Before``,
to see a change side by side) and
``torch.profiler.profile(record_shapes=True)`` (CPU activity). The figure
is each variant's median step ÷ the unrecorded median step, medians over
rounds.

*SimGPU tiny ops*: ``--ops`` adds of 16-element CPU tensors per round,
nothing / bare mode / ``ctl.record(device="cpu")`` (the recorder's path
for a host op: the floor under the simulator's) / the same with
``out_dir`` (give ``--ops`` that outlast ``flusher.PERIOD_S``, e.g. 100000) /
``ctl.record(device=ctl.SimGPU(owns=("cpu",)))`` (the simulator runs the
CPU tensors as its device's), µs per op and the ratio to the bare mode,
rounds taking turns (odd ones in reverse). ``--base PATH`` adds the
``ctl.record(device="cpu")`` and SimGPU rows of another checkout (its
package imported as ``ctl_base`` from a copy) to the same rounds:
before/after under the same load. ``--only-tiny`` skips the transformer step.

*record_function ranges* (``--ranges``): the same tiny adds, each inside a
``torch.profiler.record_function`` range (the recorder makes a USER span of
each, ``recording/hooks/ranges.py``), µs per range and op, under nothing / bare
mode / ``ctl.record(device="cpu")`` (and the base tree's with ``--base``).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl


class Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def transformer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, batch_first=True,
                                       dropout=0.0)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                          nn.Linear(128, 128))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = torch.randn(8, 32, 128), torch.randn(8, 32, 128)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def _contexts(kind: str):
    if kind == "nothing":
        return _Null()
    if kind == "bare mode":
        return Bare()
    if kind == "cutimeline":
        return ctl.record(device="cpu")
    if kind == "cutimeline out_dir":  # and its journal (recording/control/flusher.py)
        return ctl.record(device="cpu", out_dir=_JOURNALS)
    if kind == "cutimeline before":
        from bench_record import record_before  # the previous per-op path
        return record_before(measure=True)
    if kind == "torch.profiler":
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      record_shapes=True)
    if kind == "cutimeline, SimGPU owning cpu":
        return ctl.record(device=ctl.SimGPU("h100", owns=("cpu",)))
    if kind == "base tree, SimGPU owning cpu":
        base = importlib.import_module("ctl_base")
        return base.record(device=base.SimGPU("h100", owns=("cpu",)))
    if kind == "base tree":
        return importlib.import_module("ctl_base").record(device="cpu")
    raise ValueError(kind)


_JOURNALS = tempfile.mkdtemp(prefix="bench-slowdown-")  # out_dir's files, removed at exit
atexit.register(shutil.rmtree, _JOURNALS, True)


def import_base(path: str) -> None:
    """Make the cutimeline package of checkout ``path`` importable as
    ``ctl_base`` (copied under a temporary folder: its imports are relative)."""
    src = pathlib.Path(path) / "cutimeline"
    if not (src / "__init__.py").exists():
        raise SystemExit(f"--base {path}: there is no cutimeline package there.")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ctl_base"))
    shutil.copytree(src, tmp / "ctl_base")
    sys.path.insert(0, str(tmp))
    importlib.import_module("ctl_base")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def step_times(kind: str, step, steps: int) -> float:
    """Median wall time of ``steps`` steps under ``kind`` (after one warm-up)."""
    gc.collect()
    times = []
    with _contexts(kind):
        step()
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def tiny_ops(kind: str, n: int) -> float:
    """µs per op of ``n`` tiny CPU adds under ``kind``."""
    a, b = torch.ones(16), torch.ones(16)
    gc.collect()
    with _contexts(kind):
        for _ in range(50):
            a.add(b)
        t = time.perf_counter()
        for _ in range(n):
            a.add(b)
        return (time.perf_counter() - t) / n * 1e6


def ranged_ops(kind: str, n: int) -> float:
    """µs per tiny CPU add inside a record_function range of its own."""
    a, b = torch.ones(16), torch.ones(16)
    rf = torch.profiler.record_function
    gc.collect()
    with _contexts(kind):
        for _ in range(50):
            with rf("r"):
                a.add(b)
        t = time.perf_counter()
        for _ in range(n):
            with rf("r"):
                a.add(b)
        return (time.perf_counter() - t) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--base", help="another checkout whose SimGPU row to add")
    p.add_argument("--only-tiny", action="store_true", help="skip the transformer step")
    p.add_argument("--ranges", action="store_true",
                   help="add the record_function table (module doc)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.base:
        import_base(a.base)
    if a.only_tiny:
        return tiny_table(a)
    step = transformer()
    kinds = ["nothing", "bare mode", "cutimeline", "cutimeline out_dir", "cutimeline before",
             "torch.profiler"]
    got = interleaved(kinds, a.rounds, lambda k: step_times(k, step, a.steps))
    base = statistics.median(got["nothing"])
    print(f"transformer step (2 layers, d 128, batch 8×32, AdamW), medians of "
          f"{a.rounds} rounds × {a.steps} steps")
    print("| variant | step ms | × unrecorded |\n|---|---:|---:|")
    for k in kinds:
        m = statistics.median(got[k])
        print(f"| {k} | {m * 1e3:.2f} | ×{m / base:.3f} |")
    bare = statistics.median(got["bare mode"])
    for k in ("cutimeline", "cutimeline out_dir", "cutimeline before"):
        d = statistics.median(got[k]) - bare
        print(f"| **{k} − bare mode** | {d * 1e3:+.2f} | {d / base:+.3f} |")
    print("goal: cutimeline ≤ the bare mode + 0.05")
    return tiny_table(a)


def interleaved(kinds: list[str], rounds: int, measure) -> dict[str, list[float]]:
    """``measure(kind)`` for every kind, ``rounds`` times, the order turning
    each round so each variant follows each other as often (a fixed order
    made the variant after the bare mode read slower)."""
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(rounds):
        for k in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            got[k].append(measure(k))
    return got


def tiny_table(a: argparse.Namespace) -> int:
    """The SimGPU tiny-op table (module doc)."""
    kinds = ["nothing", "bare mode", "cutimeline", "cutimeline out_dir",
             "cutimeline, SimGPU owning cpu"]
    if a.base:
        kinds += ["base tree", "base tree, SimGPU owning cpu"]
    got = interleaved(kinds, a.rounds, lambda k: tiny_ops(k, a.ops))
    bare = statistics.median(got["bare mode"])
    print(f"\ntiny CPU ops ({a.ops} adds of 16 elements), medians of {a.rounds} rounds"
          f"{'; base tree ' + a.base if a.base else ''}")
    print("| variant | µs/op | × bare mode |\n|---|---:|---:|")
    for k in kinds:
        m = statistics.median(got[k])
        print(f"| {k} | {m:.2f} | ×{m / bare:.2f} |")
    if a.ranges:
        kinds = ["nothing", "bare mode", "cutimeline"] + (["base tree"] if a.base else [])
        got = interleaved(kinds, a.rounds, lambda k: ranged_ops(k, a.ops))
        bare = statistics.median(got["bare mode"])
        print(f"\nthe same adds, each in a record_function range, medians of "
              f"{a.rounds} rounds")
        print("| variant | µs/(range + op) | × bare mode |\n|---|---:|---:|")
        for k in kinds:
            m = statistics.median(got[k])
            print(f"| {k} | {m:.2f} | ×{m / bare:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
