"""The recorder's measurement of its own cost: prices, probes, a real mix."""

import contextlib
import math

import pytest
import torch

from cutimeline.recording.selfcost import Program, measure_module_hooks, measure_overhead, op_cost
from cutimeline.recording.session import Session

MODEL = {"op_ns": 100, "tensor_ns": 10, "float_ns": 50, "list_ns": 30,
         "other_ns": 2, "backward_ns": 7, "detach_ns": 40}



def test_op_cost_prices_each_kind():
    assert op_cost(MODEL, (1, 0, 0, 0), "aten::relu") == 100
    assert op_cost(MODEL, (3, 1, 1, 2), "aten::x") == 100 + 20 + 50 + 30 + 4
    assert op_cost(MODEL, (1, 0, 0, 0), "aten::detach") == 140  # the mode adds these
    assert op_cost({**MODEL, "op_ns": 0}, (0, 0, 0, 0), "aten::zeros") == 0  # never < 0


def test_measure_overhead_leaves_user_state_alone():
    torch.manual_seed(3)
    state = torch.get_rng_state()
    model = measure_overhead(n=2, rounds=1)
    assert torch.equal(state, torch.get_rng_state())
    assert set(model) == set(MODEL) | {"probe_ns"}
    assert all(isinstance(v, int) and v >= 0 for v in model.values())
    assert torch._C._len_torch_dispatch_stack() == 0


def test_module_hook_cost_is_measured_and_the_hooks_removed():
    s = Session(None, max_ops=2 ** 62, steps="manual")  # as measure() makes it
    ns = measure_module_hooks(s, n=2, rounds=1)
    assert isinstance(ns, int) and ns >= 0
    assert not torch.nn.modules.module._global_forward_pre_hooks
    assert not torch.nn.modules.module._global_forward_hooks
    assert s.writer().spans == []


def test_program_ratio_leaves_user_state_alone():
    model = measure_overhead(n=2, rounds=1)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    p = Program(model)
    r = p.ratio(1)
    assert math.isfinite(r)
    assert torch.equal(state, torch.get_rng_state())
    assert torch._C._len_torch_dispatch_stack() == 0
    assert all(q.grad is None for q in p.net.parameters())
    # it recorded the step's ops, backward ones with their autograd node
    ops = p.s.writers[0].ops
    assert ops and any(op[5] != -1 for op in ops)
    assert not torch.nn.modules.module._global_forward_hooks


def test_program_prices_nothing_gives_zero():
    zero = dict.fromkeys(("op_ns", "tensor_ns", "float_ns", "list_ns", "other_ns",
                          "backward_ns", "detach_ns", "module_ns"), 0)
    assert Program(zero).ratio(1) == 0.0


def test_the_users_saved_tensor_hooks_never_see_the_probes_tensors():
    import cutimeline as ctl
    net, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    def step():
        net(x).sum().backward()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
        alone = list(packed)
        del packed[:]
        with ctl.record(device="cpu") as rec:  # measure=True: probes at start and stop
            step()
    assert rec.timeline.meta["overhead_model"]  # the probes ran
    assert packed == alone


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # the user's, here
def test_the_users_global_module_hooks_never_see_the_probes_modules():
    import torch.nn.modules.module as nn_module

    import cutimeline as ctl
    net, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(2, 4)
    seen = []
    handles = [
        nn_module.register_module_forward_pre_hook(lambda m, a: seen.append(("pre", type(m)))),
        nn_module.register_module_forward_hook(lambda m, a, o: seen.append(("post", type(m)))),
        nn_module.register_module_full_backward_hook(
            lambda m, gi, go: seen.append(("backward", type(m)))),
        nn_module.register_module_parameter_registration_hook(
            lambda m, n, p: seen.append(("parameter", type(m)))),
        nn_module.register_module_module_registration_hook(
            lambda m, n, s: seen.append(("module", type(m))))]

    def step():
        net(x).sum().backward()
    try:
        step()
        alone = list(seen)
        del seen[:]
        with ctl.record(device="cpu") as rec:  # measure=True: probes at start and stop
            step()
        assert rec.timeline.meta["overhead_model"]["module_ns"] >= 0  # the probes ran
        assert seen == alone
        # and the hooks are the user's again, in their order
        del seen[:]
        step()
        assert seen == alone
    finally:
        for h in handles:
            h.remove()


def test_the_probe_measures_under_the_users_inference_mode():
    """The training-step probe makes its own input outside inference mode:
    under the user's, an inference tensor its backward could not save, and
    the recording lost its calibration with a warning."""
    import warnings

    import torch

    import cutimeline as ctl
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torch.inference_mode():
            with ctl.record(device="cpu") as rec:
                torch.ones(3) + 1
    assert rec.timeline.meta["overhead_calibrations"]


# -- a device with a host clock of its own: the recorder's time leaves it -----------

def test_measure_entry_prices_what_no_clock_inside_sees():
    from cutimeline.recording.selfcost import measure_entry
    with torch.random.fork_rng(devices=[]):
        before = torch.random.get_rng_state()
        prices = measure_entry(modules=True)
        assert torch.equal(torch.random.get_rng_state(), before)
    assert set(prices) == {"entry_ns", "module_entry_ns", "probe_ns"}
    assert all(isinstance(v, int) and v >= 0 for v in prices.values())
    assert 0 < prices["entry_ns"] < 1_000_000 and prices["probe_ns"] > 0
    assert measure_entry(modules=False)["module_entry_ns"] == 0


def test_the_exact_mode_gives_back_what_it_spends_around_a_host_op():
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    from cutimeline.recording.opstream import ExactMode
    from cutimeline.recording.selfcost import Sink
    sink = Sink()
    s = Session(sink, max_ops=2 ** 62, steps="manual")
    mode = s.mode_for(s.writer())
    assert isinstance(mode, ExactMode)
    x = torch.zeros(8)
    _push_mode(mode)
    try:
        y = torch.relu(x)
    finally:
        _pop_mode()
    assert torch.equal(y, torch.relu(x))
    (seq, begin, end, *_), = s.writers[0].ops
    assert begin <= end and sink.ns > 0   # the key and the row: given back
    assert Session(None, max_ops=1, steps="manual").exact is False


def test_a_view_of_the_devices_own_tensor_lasts_the_devices_price_of_it():
    """ExactMode gives back what a view of a device's own tensor took
    beyond the device's price of it (``Device.metadata_ns``): with a price
    of 0, all of its call, which is its row; a CPU tensor's view keeps its
    time."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    from cutimeline.recording.selfcost import Sink

    class Priced(Sink):
        def __init__(self):
            super().__init__()
            self.given, self.asked = [], []

        def recorder_work(self, ns):
            self.given.append(ns)
            return super().recorder_work(ns)

        def metadata_ns(self, device, func, args, kwargs):
            self.asked.append(func.name())
            return 0 if device.type == "meta" else None

    for device, priced in (("meta", True), ("cpu", False)):
        sink = Priced()
        s = Session(sink, max_ops=2 ** 62, steps="manual")
        mode = s.mode_for(s.writer())
        x = torch.zeros(4, 8, device=device)
        _push_mode(mode)
        try:
            y = x.view(8, 4)
        finally:
            _pop_mode()
        assert y.shape == (8, 4) and sink.asked == ["aten::view"]
        (seq, begin, end, *_), = s.writers[0].ops
        # the key and the signature before the call, then (priced) the call itself
        assert len(sink.given) == 1 + priced
        if priced:
            assert sink.given[1] == end - begin > 0


def test_a_view_inside_gpu_host_keeps_its_real_time():
    """SimGPU's price of a view applies to its own tensors, not inside a
    ``with gpu.host():`` block, where the program says the work is the
    host's: the recorder gives back only its key and row there."""
    import cutimeline as ctl
    gpu = ctl.SimGPU("h100")
    given = []
    real = gpu.recorder_work
    gpu.recorder_work = lambda ns: given.append(ns) or real(ns)
    x = torch.zeros(4, 8, device="meta")
    counts = []
    with ctl.record(device=gpu, modules=False, measure=False):
        for host in (False, True, False):
            given.clear()
            with gpu.host() if host else contextlib.nullcontext():
                x.view(8, 4)
            counts.append(len(given))
    assert counts == [2, 1, 2], counts  # the key, then (priced) the call


def _burn(seconds: float) -> None:
    from time import perf_counter
    end = perf_counter() + seconds
    while perf_counter() < end:
        pass


def _sim_steps(burn_ns: int) -> float:
    """The mean recorded step (ms, steps 1-3) of a 10-layer loop on a
    SimGPU, the recorder's own module hook and its memory read after each
    launch slowed by ``burn_ns`` each."""
    import cutimeline as ctl
    from cutimeline.recording.measures.memory import MemoryLog
    from cutimeline.recording.session import Session as S
    context, read = S.context, MemoryLog.read

    def slow_context(self, *a):
        _burn(burn_ns / 1e9)
        return context(self, *a)

    def slow_read(self, *a):
        _burn(burn_ns / 1e9)
        return read(self, *a)

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(10))).to("meta")
    x = torch.zeros(64, 256, device="meta")
    S.context, MemoryLog.read = slow_context, slow_read
    try:
        with ctl.record(device=ctl.SimGPU("h100"), memory=True, steps="manual") as rec:
            for _ in range(4):
                with torch.no_grad():
                    model(x)
                rec.step()
    finally:
        S.context, MemoryLog.read = context, read
    tl = rec.timeline
    assert tl.meta["recorder_left"]["entry_ns"] >= 0 and "overhead_model" not in tl.meta \
        or tl.meta["overhead_model"] is None
    ends = [tl.step_bounds(n) for n in tl.step_numbers()[1:]]
    return sum(e - b for b, e in ends) / len(ends) / 1e6


def test_the_recorders_own_time_leaves_a_simulated_host():
    # 10 module calls and 10 launches a step, each slowed by 0.5 ms of the
    # recorder's own work: 10 ms more a step in real time, none on the
    # simulated host (a price removed afterwards would not know of it)
    plain, slowed = _sim_steps(0), _sim_steps(500_000)
    assert abs(slowed - plain) < 2.5, (plain, slowed)


def test_a_step_boundary_and_a_synchronize_leave_a_simulated_host_their_notes():
    """The recorder's STEP span is written after the step's end, and a
    SimGPU sync's row and SYNC span after its wait: on a SimGPU that time
    is the recorder's, not the program's."""
    import cutimeline as ctl
    from cutimeline.recording.session import Session as S
    span = S.span

    def steps(burn_ns: int) -> float:
        def slow(self, *a, **k):
            _burn(burn_ns / 1e9)
            return span(self, *a, **k)

        gpu = ctl.SimGPU("h100")
        x = torch.zeros(64, 256, device="meta")
        S.span = slow
        try:
            with ctl.record(device=gpu, modules=False, steps="manual") as rec:
                for _ in range(4):
                    x + 1
                    gpu.synchronize()
                    rec.step()
        finally:
            S.span = span
        tl = rec.timeline
        assert list(tl.decode(tl.spans["name"])).count("synchronize") == 4
        ends = [tl.step_bounds(n) for n in tl.step_numbers()[1:]]
        return sum(e - b for b, e in ends) / len(ends) / 1e6

    # two spans a step slowed by 3 ms: kept, 6 ms more a simulated step
    plain, slowed = steps(0), steps(3_000_000)
    assert abs(slowed - plain) < 2, (plain, slowed)


def test_the_exact_mode_prices_its_entry_by_ops_one_python_call_made():
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    from cutimeline.recording.opstream import ENTRY_SAMPLES
    from cutimeline.recording.selfcost import Sink
    s = Session(Sink(), max_ops=2 ** 62, steps="manual")
    s.entry_ns = 7
    mode = s.mode_for(s.writer())
    x, w = torch.zeros(4, 8), torch.zeros(3, 8)
    _push_mode(mode)
    try:
        torch.relu(x)
        torch.relu(x)   # another call: no sample
        assert mode.gaps == []
        torch.nn.functional.linear(x, w, torch.zeros(3))  # t and addmm: one call's ops
    finally:
        _pop_mode()
    assert 1 <= len(mode.gaps) <= 3 and min(mode.gaps) > 0 and mode.entry_ns == 7
    for g in range(100, 100 + ENTRY_SAMPLES + 20):
        mode.sample(g)
    assert len(mode.gaps) == ENTRY_SAMPLES
    assert mode.entry_ns == s.entry_ns == 100 + 20 + ENTRY_SAMPLES // 2
