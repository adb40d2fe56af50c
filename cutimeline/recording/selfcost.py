"""The recorder's measurement of its own cost, for overhead compensation.

At start (``measure``, a few ms) a model of what recording costs the host:
per op, from the kinds of its arguments (``measure_overhead``: tiny CPU
ops with and without a scratch mode), per module call (the global hooks),
in backward (the autograd-node read). Tiny ops repeated in a loop keep the
recorder's code in the CPU caches; a real mix does not, so a small training
step (``Program``) prices the model against what recording really adds,
once at stop, after ``refine`` has averaged the model with a longer
measurement (and, when ``recorder.CALIBRATE_EVERY_NS`` is set, between
steps while recording: off by default, see there). At stop ``priced``
prices each recorded (op name, shapes) by the model; ``compensation.py``
removes it all from the timeline.

On a device that keeps a host clock of its own (SimGPU's virtual host)
none of that is used: the recorder's time leaves that clock as it is
spent (``opstream.ExactMode``), and ``measure_entry`` prices only what no
clock inside the recorder sees (torch's call into the mode, the global
module hooks' calls). No ratio calibrated on a probe program scales the
verdict's inputs there: on a loaded machine that ratio moved 1.5–10×
between runs.

Every probe runs on its own tensors and modules with no dispatch mode of
the user's active: the user's state, random numbers and results are
untouched.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from time import perf_counter_ns as _now
from typing import Any, Callable

import numpy as np
import torch

from ..timeline.schema import NONE, SpanKind
from .hooks.installer import Hooks
from .opstream import Mode
from .session import Session

__all__ = ["measure_overhead", "measure_module_hooks", "measure_entry", "Sink", "op_cost",
           "Program", "measure", "refine", "calibrator", "priced"]

_MODULE = int(SpanKind.MODULE)


class Sink:
    """A stand-in device for ``measure_entry``: it keeps a host clock of
    its own in name only and sums the time the recorder gives back
    (``ns``), as SimGPU's virtual host leaves it out; it owns no tensor."""

    kind = None

    def __init__(self) -> None:
        self.ns = 0

    def keeps_host_clock(self) -> bool:
        return True

    def recorder_work(self, ns: int) -> int:
        self.ns += ns
        return ns

    def recorder_left(self, now: int, since: int | None, entry_ns: int) -> None:
        if since is not None and now > since:
            self.ns += now - since

    def owns(self, device: Any) -> bool:
        return False

    def metadata_ns(self, device: Any, func: Any, args: tuple, kwargs: dict) -> None:
        return None


class _Probe:
    """Tiny CPU ops timed without and with a scratch mode: the recorder's
    cost per op, measured on its own tensors (the user's state and results
    are untouched). ``exact``: the mode of a device that keeps a host clock
    of its own (a ``Sink``), and ``diff`` less what it gave back. Its
    callers set the user's modes aside (``_modes_aside``)."""

    def __init__(self, exact: bool = False) -> None:
        self.sink = Sink() if exact else None
        self.session = Session(self.sink, max_ops=2 ** 62, steps="manual")
        self.mode = self.session.mode_for(self.session.writer())
        x, y, z = (torch.zeros(16, device="cpu") for _ in range(3))
        x2 = torch.zeros(4, 4, device="cpu")
        self.detach = x.detach
        self.ops = (lambda: torch.relu(x), lambda: torch.addcmul(x, y, z),
                    lambda: torch.add(x, 0.5), lambda: torch.sum(x, [0]),
                    lambda: torch.transpose(x2, 0, 1), lambda: torch.relu(x))

    @staticmethod
    def loop(op: Callable, n: int) -> int:
        t0 = _now()
        for _ in range(n):
            op()
        return _now() - t0

    def diff(self, k: int, n: int) -> float:
        """Recorded − plain time of probe op ``k`` (ns per op); op 5 runs
        as if in a backward pass (the autograd-node read)."""
        from torch.utils._python_dispatch import _pop_mode, _push_mode
        op = self.ops[k]
        p = self.loop(op, n)
        self.session.backward = k == 5
        given = self.sink.ns if self.sink is not None else 0
        _push_mode(self.mode)
        try:
            r = self.loop(op, n)
        finally:
            _pop_mode()
            self.session.backward = 0
            self.session.writers[0].ops.clear()
        if self.sink is not None:
            r -= self.sink.ns - given
        return (r - p) / n

    def warm(self) -> None:
        for k in range(len(self.ops)):
            self.diff(k, 1)  # fills the signature cache


def measure_overhead(n: int = 8, rounds: int = 3) -> dict[str, int]:
    """The recorder's own cost per op (ns), as a model of the op's arguments.

    Six tiny CPU ops, each ``n`` times without and with a scratch mode,
    ``rounds`` times interleaved (after one warm-up call each); each cost is
    the median over rounds of the difference. ``relu(x)`` gives the cost of
    an op with one tensor (``op_ns``); ``addcmul`` (3 tensors), ``add(x,
    0.5)`` (a float), ``sum(x, [0])`` (a list) and ``transpose(x, 0, 1)`` (two
    ints) what each more tensor, float, list or other argument adds;
    ``relu`` while a backward pass counts, the autograd-node read
    (``backward_ns``). Also ``detach_ns``: what a ``detach`` costs without a
    mode, since an active mode makes autograd add ``detach`` ops that an
    uninstrumented run does not have. ``probe_ns``: what this took (a few
    ms). ``op_cost`` prices an op by this model;
    ``Session.calibrate`` re-measures ``op_ns`` while recording.
    """
    begin = _now()
    probe = _Probe()
    probe.warm()
    diffs: list[list[float]] = [[] for _ in probe.ops]
    detach: list[int] = []
    for _ in range(rounds):
        for k in range(len(probe.ops)):
            diffs[k].append(probe.diff(k, n))
        detach.append(probe.loop(probe.detach, n))
    d = [statistics.median(v) for v in diffs]
    model = {"op_ns": d[0], "tensor_ns": (d[1] - d[0]) / 2, "float_ns": d[2] - d[0],
             "list_ns": d[3] - d[0], "other_ns": (d[4] - d[0]) / 2,
             "backward_ns": d[5] - d[0], "detach_ns": statistics.median(detach) / n}
    model = {k: max(0, round(v)) for k, v in model.items()}
    model["probe_ns"] = _now() - begin
    return model


def measure_entry(modules: bool, n: int = 24, rounds: int = 5) -> dict[str, int]:
    """What recording costs a device that keeps a host clock of its own
    beyond the time the recorder measures itself and gives back
    (``opstream.ExactMode``): ``entry_ns``, per op, torch's call into the
    mode and back (five of ``_Probe``'s tiny ops, ``n`` each without and
    with the mode, ``rounds`` times interleaved: the median of those
    5 × ``rounds`` figures, against preemption); ``module_entry_ns``, per module call, the calls of the
    global hooks (0 without ``modules``). ``probe_ns``: what this took
    (≈ 20–40 ms). The user's modes are set aside meanwhile."""
    t0 = _now()
    with _modes_aside():
        probe = _Probe(exact=True)
        probe.warm()
        per = [probe.diff(k, n) for _ in range(rounds) for k in range(5)]
        scratch = Session(Sink(), max_ops=2 ** 62, steps="manual")
        module = measure_module_hooks(scratch, n, rounds) if modules else 0
    return {"entry_ns": max(0, round(statistics.median(per))), "module_entry_ns": module,
            "probe_ns": _now() - t0}


def op_cost(model: dict[str, int], kinds: tuple[int, int, int, int], name: str) -> int:
    """What recording one op costs (ns) by ``measure_overhead``'s model,
    from its argument kinds (tensors, floats, lists, others) and name."""
    tensors, floats, lists, others = kinds
    ns = model["op_ns"] + model["tensor_ns"] * (tensors - 1) + model["float_ns"] * floats \
        + model["list_ns"] * lists + model["other_ns"] * others
    if name == "aten::detach":  # added by the mode itself (see measure_overhead)
        ns += model["detach_ns"]
    return max(0, ns)


@contextlib.contextmanager
def _user_hooks_aside() -> Iterator[None]:
    """The global module hooks of the user (forward, backward, and those
    that see modules, parameters and buffers registered) set aside while a
    probe makes and runs its own modules: a user's hook that counts calls,
    collects activations or logs must never see the probe's. torch reads
    each of these dicts from its module at call time, so empty ones are
    bound there meanwhile (and the user's handles still remove from their
    own); with none registered, nothing is touched. Modules called by other
    threads in those few ms run without the user's global hooks, and a
    global hook another thread registers meanwhile is lost (torch has no
    lock to hold them off)."""
    import torch.nn.modules.module as nn_module
    saved = {k: v for k, v in vars(nn_module).items()
             if k.startswith("_global_") and isinstance(v, dict)}
    if not any(saved.values()):
        yield
        return
    for k, v in saved.items():
        setattr(nn_module, k, type(v)())
    flag = nn_module._global_is_full_backward_hook
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(nn_module, k, v)
        nn_module._global_is_full_backward_hook = flag


def measure_module_hooks(session: Any, n: int = 8, rounds: int = 3) -> int:
    """What the global module hooks cost per module call (ns): an
    ``nn.Identity`` called ``n`` times without and with the hooks of a
    scratch ``session``, ``rounds`` times interleaved, median difference.
    Global hooks also move every ``Module.__call__`` off its fast path,
    which this includes. About 1 ms. The user's global hooks are set aside
    meanwhile (``_user_hooks_aside``)."""
    with _user_hooks_aside():
        return _module_hooks(session, n, rounds)


def _module_hooks(session: Any, n: int, rounds: int) -> int:
    import torch.nn.modules.module as nn_module
    m, x = torch.nn.Identity(), torch.zeros(1)
    hooks = Hooks(session, modules=True, threads=False)

    def loop() -> int:
        t0 = _now()
        for _ in range(n):
            m(x)
        return _now() - t0

    sink = session.device  # a Sink: the hooks' own time, measured, is not the price
    diffs = []
    for rep in range(rounds + 1):  # round 0 warms up
        p = loop()
        given = sink.ns if sink is not None else 0
        handles = (nn_module.register_module_forward_pre_hook(hooks._pre),
                   nn_module.register_module_forward_hook(hooks._post, always_call=True))
        try:
            r = loop()
        finally:
            for h in handles:
                h.remove()
        if sink is not None:
            r -= sink.ns - given
        if rep:
            diffs.append((r - p) / n)
    session.writer().spans.clear()
    diffs.sort()
    return max(0, round(diffs[len(diffs) // 2]))


class Program:
    """A small training step of the probe's own (two ``Linear`` layers and
    a ReLU, a loss, its backward), run without and with a scratch recorder
    (mode, module hooks, autograd-node reads): what a real mix of ops
    costs against what ``measure_overhead``'s model prices it at.
    Tiny ops repeated in a loop keep the recorder's code in the CPU caches;
    ops between other code and kernels do not, and cost up to about twice
    as much (``ratio``)."""

    def __init__(self, model: dict):
        self.model = model
        f32 = {"device": "cpu", "dtype": torch.float32}  # whatever the defaults
        # the user's random state stays, and the user's hooks see no module made
        with torch.random.fork_rng(devices=[]), _grad(), _user_hooks_aside():
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 8, **f32), torch.nn.ReLU(),
                                           torch.nn.Linear(8, 1, **f32))
            # made outside inference mode too: under the user's, an inference
            # tensor, which the step's backward could not save
            self.x = torch.ones(4, 8, **f32)
        self.s = Session(None, max_ops=2 ** 62, steps="manual")
        self.hooks = Hooks(self.s, modules=True, threads=False)
        self.mode = Mode(self.s, self.s.writer())
        self.ratio(1)  # fills the caches

    def step(self) -> int:
        with _grad():  # optimizer.step(), whose hooks end steps, runs without
            t0 = _now()
            self.net(self.x).pow(2).mean().backward()
            return _now() - t0

    def ratio(self, pairs: int = 2) -> float:
        """The fastest recorded step − the fastest plain one, of ``pairs``
        each interleaved (against preemption spikes), less the model's
        price of the ops that repeat a recent one (``_repeats``), over its
        price of the others and of the module calls (0 when it prices
        nothing): the ``costs.mix_scale`` of those. Call it with no
        dispatch mode active (``_disable_current_modes``); the user's global
        module hooks are set aside meanwhile (``_user_hooks_aside``)."""
        with _user_hooks_aside():
            return self._ratio(pairs)

    def _ratio(self, pairs: int) -> float:
        import torch.nn.modules.module as nn_module
        from torch.utils._python_dispatch import _pop_mode, _push_mode

        s, m = self.s, self.model
        w = s.writers[0]
        plain, recorded = [], []
        for _ in range(pairs):
            del w.ops[:], w.spans[:]
            plain.append(self.step())
            handles = (nn_module.register_module_forward_pre_hook(self.hooks._pre),
                       nn_module.register_module_forward_hook(self.hooks._post,
                                                              always_call=True))
            _push_mode(self.mode)
            s.backward = 1  # as Hooks._backward counts a backward pass
            try:
                recorded.append(self.step())
            finally:
                _pop_mode()
                s.backward = 0
                for h in handles:
                    h.remove()
                self.net.zero_grad(set_to_none=True)
        names = [s.strings.values[n] for n, _, _ in s.sig_table]
        price = [op_cost(m, s.sig_args[op[3]], names[op[3]]) +
                 (m["backward_ns"] if op[5] != NONE else 0) for op in w.ops]
        hot = _repeats([s.sig_table[op[3]][:2] for op in w.ops])
        warm = sum(p for p, h in zip(price, hot) if h)
        cold = sum(p for p, h in zip(price, hot) if not h) + \
            m.get("module_ns", 0) * sum(sp[0] == _MODULE for sp in w.spans)
        return (min(recorded) - min(plain) - warm) / cold if cold > 0 else 0.0


def _repeats(keys: list, window: int = 8) -> list[bool]:
    """Pure-Python twin of ``costs.repeats`` for one thread (the
    recorder does not load NumPy-and-Numba modules while recording)."""
    return [k in keys[max(0, i - window):i] for i, k in enumerate(keys)]


def measure(modules: bool) -> dict[str, int]:
    """The start-up probe of the recorder's own costs (ns; see
    ``measure_overhead`` and ``measure_module_hooks``), with the user's
    modes set aside (``_modes_aside``)."""
    t0 = _now()
    with _modes_aside():
        model = measure_overhead()
        scratch = Session(None, max_ops=2 ** 62, steps="manual")  # its spans: no cap
        model["module_ns"] = measure_module_hooks(scratch) if modules else 0
    model["probe_ns"] = _now() - t0
    return model


@contextlib.contextmanager
def _modes_aside() -> Iterator[None]:
    """No dispatch mode or ``__torch_function__`` mode of the user's sees
    the probes' ops: a mode active around ``record()`` (a FLOP counter, a
    logger, a checker) would otherwise count some 900 ops the user never
    ran. The probes' tensors are plain, so turning ``__torch_function__``
    off for them changes nothing else."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def refine(model: dict[str, int], rounds: int = 5) -> None:
    """Average ``model`` in place with ``measure_overhead(rounds=rounds)``
    taken at stop (after the recording's end, a few ms): the start-up probe's
    few short batches catch the load of a few milliseconds only.
    ``stop_probe_ns`` says what this took."""
    t0 = _now()
    with _modes_aside():
        again = measure_overhead(rounds=rounds)
    for k in ("op_ns", "tensor_ns", "float_ns", "list_ns", "other_ns", "backward_ns",
              "detach_ns"):
        model[k] = round((model[k] + again[k]) / 2)
    model["stop_probe_ns"] = _now() - t0


def _grad() -> Any:
    """Gradients on, inference mode off: the probe's training step runs the
    same wherever the user's step ends (``optimizer.step`` runs under
    ``no_grad``, evaluation under ``inference_mode``). And saved-tensor
    hooks of the user's (``save_on_cpu``, offloading, a memory count) do
    not see the probe's tensors: a pass-through pair is innermost, unless
    the user disabled such hooks (then none runs anyway)."""
    import contextlib
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.enable_grad())
    try:
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(_same, _same))
    except RuntimeError:  # torch.autograd.graph.disable_saved_tensors_hooks is on
        pass
    return stack


def _same(x: Any) -> Any:
    return x


def calibrator(model: dict[str, int]) -> Callable[[int], float]:
    """``Program(model).ratio``, the program made at its first use."""
    program: list[Program] = []

    def ratio(pairs: int) -> float:
        if not program:
            program.append(Program(model))
        return program[0].ratio(pairs)
    return ratio


def priced(s: Session, ops: np.ndarray, sig: np.ndarray, meta: dict) -> dict:
    """``meta`` with each recorded (op name, shapes) priced by the start-up
    model: the mean over its ops, as ``{"name", "shapes", "ns"}`` lists of
    string ids and ns, before ``costs.mix_scale``; ``overhead_ns_per_op``
    becomes the mean over all ops."""
    model = meta.get("overhead_model")
    if not model or not len(ops):
        return meta
    names = [s.strings.values[i] for i in sig[:, 0]]
    cost = np.array([op_cost(model, k, n) for k, n in zip(s.sig_args, names)], np.int64)
    of = ops[:, 3]
    pair = sig[of, 0] << 32 | sig[of, 1]
    keys, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    mean = np.bincount(inverse.reshape(-1), cost[of]) / counts
    return {**meta, "overhead_ns_per_op": int(round(cost[of].mean())),
            "overhead_ns_by_signature": {
                "name": (keys >> 32).tolist(), "shapes": (keys & 0xFFFFFFFF).tolist(),
                "ns": np.round(mean).astype(np.int64).tolist()}}
