"""SimGPU's simulated times stay what they were: a few programs recorded on a
fake host clock, every Timeline column compared with a stored digest.

The simulator's speed work (issue 25) must not move a single simulated
time, so this pins its whole output: six programs — a meta-tensor MLP
trained with Adam and ``.item()``, a loop of reads with jitter and
``bracket="kernel"``, a side stream with events and syncs, a launch queue
that fills, tiny ops on CPU tensors it owns, and the device driven by hand
— recorded with every clock on a fake one (the recorder's too; each read
by the simulator moves it 250 ns, the programs advance it for their
Python) and the runqueue reading made a counter, so the run is exact. The
digests were made by the tree before that work (``python
tests/devices/test_sim_identity.py --write`` regenerates them, only when a
change of the model is meant). Regenerated once since, for a change of
the model: copies between host and device memory priced at the host
link's rate (PCIe), not HBM's (the MLP's batch copies and the side
stream's). And once more: an op writing arguments in place that it does
not return (Adam's foreach updates in the MLP) writes their bytes too.
Its ``meta["sim"]`` digests once more, for a key added (``tf32``, the
option), no time moved. And the side stream's spans and strings, for the
SYNC spans its ``gpu.synchronize()`` calls now get (with their source
lines, as CUDA's syncs had), no time moved. And the side stream's
times, once the notes ``gpu.synchronize()`` makes after its wait leave
the virtual host as the simulator's own bookkeeping (one more clock read:
250 ns on the fake clock).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import numpy as np
import pytest
import torch

import cutimeline as ctl
from cutimeline.devices.sim import SimGPU

if __name__ == "__main__":  # --write: the tests' helpers, as pytest finds them
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tickclock import TickClock, on_clock  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "sim_identity.json"
aten = torch.ops.aten


def _runqueue():
    """Run-queue readings that move 137 ns a read: exact, and not 0."""
    return iter(range(0, 10**12, 137)).__next__


def _mlp(gpu, clock):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).to("meta")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device="meta")
    y = torch.zeros(32, dtype=torch.long, device="meta")
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        clock.advance(20_000)


def _item_loop(gpu, clock):
    x = torch.ones(256, 256, device="meta")
    for i in range(30):
        x = (x * 1.01 + 1).relu()
        if i % 4 == 3:
            bool((x > 0).any())
        clock.advance(3_000)
    x.sum().item()


def _streams(gpu, clock):
    a = torch.ones(512, 512, device="meta")
    b = a @ a
    with gpu.stream(1):
        c = a.mul(2).add(1)
        ev = gpu.record_event()
        with gpu.host():
            torch.ones(8).add(1)  # host work, not the device's
    gpu.wait_event(ev, 0)
    d = b.add(c)
    clock.advance(50_000)
    gpu.synchronize(1)
    gpu.wait_stream(1, 0)
    with gpu.stream(1):
        d.mul(3)
    gpu.synchronize()
    d.cpu()


def _queue(gpu, clock):
    x = torch.ones(16, device="meta")
    for i in range(40):
        x = x.mul(2)
        clock.advance(1_000 * (i % 3))
    x.sum().item()


def _cpu_owned(gpu, clock):
    a, b = torch.ones(16), torch.ones(16)
    for i in range(50):
        a.add(b)
        clock.advance(400 + 100 * (i % 4))
    m = torch.ones(64, 64)
    (m @ m).sum().item()


PROGRAMS = {
    "mlp_adam_item": (_mlp, dict(profile="h100", seed=3, anchor_interval_ns=200_000)),
    "item_loop_kernel_jitter": (_item_loop, dict(profile="a100", seed=5, jitter=0.3,
                                                 bracket="kernel")),
    "side_stream_events": (_streams, dict(profile="h200", seed=7, cost={"aten::mm": 90_000},
                                          anchor_interval_ns=30_000)),
    "launch_queue_fills": (_queue, dict(profile="h100", seed=1, launch_queue=8,
                                        cost={"aten::mul": 200_000}, host_cost=3_000)),
    "cpu_tensors_owned": (_cpu_owned, dict(profile="h100", seed=2, owns=("cpu",))),
}


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    if a.dtype == object:
        return hashlib.sha256(repr(a.tolist()).encode()).hexdigest()[:16]
    return hashlib.sha256(str(a.dtype).encode() + a.tobytes()).hexdigest()[:16]


def recorded(name: str) -> dict[str, str]:
    """Digests of every column of program ``name``'s Timeline, its strings
    and its simulator meta."""
    program, opts = PROGRAMS[name]
    opts = dict(opts)
    clock = TickClock(250)
    gpu = SimGPU(opts.pop("profile"), clock=clock, pings=2, **opts)
    with on_clock(clock, _runqueue()):
        with ctl.record(device=gpu, measure=False) as rec:
            program(gpu, clock)
        tl = rec.timeline
    out = {}
    for table in ("ops", "events", "gpu", "syncs", "spans", "clocks", "truth"):
        for col, arr in tl.table(table).columns.items():
            out[f"{table}.{col}"] = _digest(arr)
        out[f"{table}.rows"] = str(len(tl.table(table)))
    # source lines name this file by its path: the same wherever the
    # checkout lies
    root = str(pathlib.Path(__file__).resolve().parents[2])
    strings = "\0".join(x.replace(root, "<repo>") for x in tl.strings)
    out["strings"] = hashlib.sha256(strings.encode()).hexdigest()[:16]
    out["meta.sim"] = hashlib.sha256(json.dumps(tl.meta["sim"], sort_keys=True)
                                     .encode()).hexdigest()[:16]
    return out


def driven() -> dict[str, str]:
    """The device driven by hand as the recorder drives it (BEGIN, run,
    END, waits, syncs), its Harvest's columns and host map."""
    clock = TickClock(250)
    gpu = SimGPU("h100", seed=11, clock=clock, anchor_interval_ns=20_000, launch_queue=3,
                 jitter=0.2)
    x = torch.ones(1024, device="meta")
    with on_clock(clock, _runqueue()):
        gpu.start()
        for seq in range(24):
            stream = seq % 2
            gpu.mark_dispatch(clock.read())
            gpu.begin(stream, seq)
            clock.advance(700)
            out = gpu.run(aten.mul.Tensor, (x, x), {})
            gpu.end(stream, seq, aten.mul.Tensor, (x, x), {}, out)
            clock.advance(300 * (seq % 5))
            if seq % 7 == 6:
                t0 = clock.read()
                gpu.wait(stream)
                gpu.note_sync("synchronize", stream, seq, t0, clock.read())
        h = gpu.harvest()
    out = {f"events.{k}": _digest(v) for k, v in h.events.items()}
    out.update({f"syncs.{k}": _digest(v) for k, v in h.syncs.items() if k != "ident"})
    out.update({f"truth.{k}": _digest(v) for k, v in h.truth.items()})
    out["host_map"] = _digest(np.stack(h.host_map))
    return out


def _stored() -> dict:
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing: run this file with --write on the tree whose "
                    f"simulation is the reference.")
    ref = json.loads(DATA.read_text())
    if ref["torch"] != torch.__version__.split("+")[0].rsplit(".", 1)[0]:
        pytest.skip(f"the digests were made with torch {ref['torch']}, whose op stream "
                    f"may differ from this torch {torch.__version__}'s")
    return ref


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_simulated_timeline_is_unchanged(name):
    want = _stored()["programs"][name]
    got = recorded(name)
    assert got == recorded(name), "the program does not record deterministically"
    moved = sorted(k for k in want if got.get(k) != want[k])
    assert not moved, f"{name}: these columns changed: {moved}"


def test_driven_device_harvest_is_unchanged():
    want = _stored()["driven"]
    got = driven()
    moved = sorted(k for k in want if got.get(k) != want[k])
    assert not moved, f"these Harvest columns changed: {moved}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/devices/test_sim_identity.py --write")
    ref = {"torch": torch.__version__.split("+")[0].rsplit(".", 1)[0],
           "programs": {n: recorded(n) for n in PROGRAMS}, "driven": driven()}
    DATA.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}")
