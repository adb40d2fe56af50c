"""The op stream: argument kinds, the device and shapes of a signature."""

import torch

from cutimeline.recording.signatures import arg_kinds


def test_arg_kinds_count_tensors_floats_lists_and_others():
    x = torch.zeros(2)
    assert arg_kinds((x, 0.5), {}) == (1, 1, 0, 0)
    assert arg_kinds((x, [0], True), {"dtype": torch.float32}) == (1, 0, 1, 2)
    assert arg_kinds(([x, x], 0), None) == (2, 0, 1, 1)  # a tensor list is a list
    assert arg_kinds((), {"alpha": 2.0, "other": x}) == (1, 1, 0, 0)


def test_first_device_of_ops_whose_first_argument_is_no_tensor():
    from cutimeline.recording.opstream import _first_device
    x, m = torch.zeros(2), torch.zeros(2, device="meta")
    assert _first_device(([m, x], 0), {}) == m.device  # cat: the list's first
    assert _first_device((0,), {"other": m}) == m.device
    assert _first_device(((2, 3),), {"device": torch.device("meta")}) == m.device
    assert _first_device(([2, 3],), {}) is None


def test_signature_keeps_shapes_of_every_tensor_and_one_device():
    import cutimeline as ctl
    x, y = torch.zeros(2, 3), torch.zeros(3)
    with ctl.record(device="cpu", measure=False) as rec:
        torch.cat([x.flatten(), y])
        torch.add(x, y, alpha=2)
        torch.zeros(4)
    tl = rec.timeline
    got = dict(zip(tl.decode(tl.ops["name"]), tl.decode(tl.ops["shapes"])))
    assert got["aten::cat"] == "f32[6], f32[3]"
    assert got["aten::add.Tensor"] == "f32[2,3], f32[3]"
    assert got["aten::zeros"] == ""


def test_an_op_whose_first_argument_is_a_cpu_scalar_runs_where_the_others_are(monkeypatch):
    import cutimeline as ctl
    from cutimeline.devices.cuda import gpu as devices
    from cutimeline.recording.opstream import _work_device
    from cutimeline.timeline.schema import OpFlag

    from fakecuda import FakeCuda
    cpu, m = torch.tensor(2.0), torch.ones(3, device="meta")
    assert _work_device((cpu, m), {}, cpu.device) == m.device
    assert _work_device((cpu, [m]), {}, cpu.device) == m.device
    assert _work_device((cpu, cpu), {}, cpu.device) == cpu.device

    class MetaAsCuda(devices.CudaDevice):  # the fake GPU 'runs' meta tensors
        def owns(self, device):
            return device.type == "meta"
    api = FakeCuda()
    api.lag_ns = 0
    monkeypatch.setattr(devices, "_cuda_api", lambda: api)
    monkeypatch.setattr(api, "now", __import__("time").perf_counter_ns)
    with ctl.record(device=MetaAsCuda(0, pings=1), measure=False) as rec:
        torch.div(cpu, m)            # runs on the 'GPU': cpu is a scalar
        torch.add(cpu, 1)            # a CPU op
    tl = rec.timeline
    flags = dict(zip(tl.decode(tl.ops["name"]), tl.ops.flags.tolist()))
    assert flags["aten::div.Tensor"] & OpFlag.LAUNCH
    assert not flags["aten::add.Tensor"] & OpFlag.LAUNCH



def _scratch():
    from cutimeline.recording.opstream import Mode
    from cutimeline.recording.session import Session
    s = Session(None, max_ops=2 ** 62, steps="manual")
    return s, Mode(s, s.writer())


def _signatures(s):
    return [(s.strings.values[n], s.strings.values[sh]) for n, sh, _ in s.sig_table]


def test_the_one_expression_key_and_the_loop_intern_one_signature():
    # add(x, y) and add(x, y, alpha=2) (a keyword) build their key in one
    # expression, lerp(x, x, 0.5) too (its schema's tensors lead), cat in the
    # loop (a list): one signature per op; had keys differed there'd be more
    s, mode = _scratch()
    x, y = torch.zeros(2, 3), torch.zeros(3, dtype=torch.float64)
    with mode:
        torch.add(x, y)
        torch.add(x, y, alpha=2)
        torch.mul(x, 2.0)            # a scalar second: one tensor in the key
        torch.sum(x, [0])            # a list of ints second: one tensor
        torch.lerp(x, x, 0.5)        # three arguments, two tensors
        torch.cat([x, x])            # no tensor first: the loop, a list
    assert _signatures(s) == [
        ("aten::add.Tensor", "f32[2,3], f64[3]"), ("aten::mul.Tensor", "f32[2,3]"),
        ("aten::sum.dim_IntList", "f32[2,3]"), ("aten::lerp.Scalar", "f32[2,3], f32[2,3]"),
        ("aten::cat", "f32[2,3], f32[2,3]")]
    sigs = [row[3] for row in s.writers[0].ops]
    assert sigs == [0, 0, 1, 2, 3, 4]


def test_keys_from_leading_tensors_equal_the_loops_keys():
    # Every op below keyed twice: by its schema's leading tensors (the one
    # expression) and, with that table emptied, by the loop over all its
    # arguments; the same keys in the same order, the same signatures.
    from cutimeline.recording.signatures import leading_tensors
    x, y, v = torch.randn(2, 3), torch.randn(3), torch.randn(2, 3, dtype=torch.float64)
    i, w = torch.tensor([1, 0]), torch.ones(3)

    def ops():
        torch.add(x, 1)                        # a number for the tensor `other`
        torch.add(torch.tensor(2.0), x)        # a scalar tensor first
        torch.addcmul(x, x, y, value=0.5)      # three leading tensors
        torch.addcmul(x, x, torch.tensor(3.0))  # the last a scalar tensor
        x.view(6).transpose(0, 0)              # a list of ints; two ints
        torch.lerp(x, x, 0.25)
        torch.nn.functional.layer_norm(x, (3,), w, None)  # optional tensors: the loop
        torch.cat([x, v.float()])              # a tensor list: the loop
        x[i]                                   # a list of optional tensors: the loop
        torch.add(x, y, out=torch.empty(2, 3))  # out=: the loop
        torch.ones_like(v, dtype=torch.float32)
    keys = []
    for lead in (True, False):
        s, mode = _scratch()
        if not lead:
            s.leading = lambda f, func: 0
        with mode:
            ops()
        keys.append((list(s.sigs), _signatures(s), [r[3] for r in s.writers[0].ops]))
    assert keys[0] == keys[1]
    assert len(keys[0][1]) >= 14
    assert leading_tensors(torch.ops.aten.addcmul.default) == 3
    assert leading_tensors(torch.ops.aten.view.default) == 1
    assert leading_tensors(torch.ops.aten.add.out) == 0        # out= is a tensor
    assert leading_tensors(torch.ops.aten.native_layer_norm.default) == 0
    assert leading_tensors(torch.ops.aten.cat.default) == 0
    assert leading_tensors(torch.ops.aten.ones.default) == 0   # no tensor


def test_shapes_text_of_a_flat_key():
    from cutimeline.recording.signatures import shapes_text
    key = (1, torch.float32, torch.Size([2, 3]), torch.int64, torch.Size([]), "cpu")
    assert shapes_text(key) == "f32[2,3], i64[]"
    assert shapes_text((1, "cpu")) == ""


def test_symbolic_shapes_are_keyed_by_their_text():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (DimDynamic, ShapeEnv,
                                                       StatelessSymbolicContext)
    fake = FakeTensorMode(shape_env=ShapeEnv())
    x = fake.from_tensor(torch.zeros(3, 4), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.DYNAMIC]))
    s, mode = _scratch()
    with fake, mode:
        torch.relu(torch.add(x, x))
        torch.add(x, x)
    (d0, d1) = (str(d) for d in x.shape)
    assert _signatures(s) == [("aten::add.Tensor", f"f32[{d0},{d1}], f32[{d0},{d1}]"),
                              ("aten::relu", f"f32[{d0},{d1}]")]
    assert [row[3] for row in s.writers[0].ops] == [0, 1, 0]
