"""Recording overhead per op, side by side in one run: tiny ops and an MLP training step.

    python benchmarks/overhead/bench_record.py [--ops 2000] [--steps 20] [--reps 15] [--clock cpu]
    python benchmarks/overhead/bench_record.py --instructions --ops 400 --steps 2
    python benchmarks/overhead/bench_record.py --trees /tmp/before . --ops 50000 --steps 300

Two workloads: a loop of tiny CPU ops (``add``, ``mul``, ``relu``, ``sum``
on 16-element tensors; the ops where dispatch dominates) and a training
step of a small MLP (three ``Linear`` layers, forward, ``backward``,
``Adam.step``: module hooks, autograd nodes, FLOPs of every matmul, the
optimizer's many small ops; 107 ops per step). Six ways to run each:
nothing; a bare pass-through TorchDispatchMode (this design's floor);
cutimeline's recorder; the same with ``out_dir`` (its journal, which a
background thread appends to every ``flusher.PERIOD_S``: give ``--ops``
and ``--steps`` that make a round outlast that, e.g. ``--ops 50000
--steps 300``, or no flush falls inside the timed part); the recorder with its previous per-op path
(``Before``, to see a change side by side); torch.profiler with
``record_shapes=True``. The variants are interleaved round by round (a
garbage collection before each, so that none pays for another's garbage;
the order turns each round) so drift on a shared machine hits them alike; each figure is the median
over rounds of µs per op. Also: bytes per op of the saved .ctl file beside
torch.profiler's Kineto JSON of the same ops, and the memory held per op
while recording (``held``): the Python heap's growth over N tiny ops
inside the recording (tracemalloc, which sees numpy's arrays too), and
the session's op rows counted object by object (``OpRows.held_bytes``),
right after the ops and once the converter has had its rounds.

``--trees A B``: the recorder of each checkout (its cutimeline first on
the path), in alternating fresh processes ``--runs`` times; each times
rounds of a bare mode and ``record(device="cpu", measure=False)`` in
turn and reports the recorder's µs per op over the bare mode inside the
recording (what the program feels) and including start and stop (the
assembly at stop), medians of ``--reps`` rounds, and its bytes held per
op at ``--ops`` tiny ops. Give ``--ops`` and ``--steps`` large enough that
rows are converted while recording (every ``opstream.CHUNK`` ops of a
thread): at the defaults no round converts anything.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import gzip
import operator
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cutimeline as ctl
from cutimeline.recording import recorder
from cutimeline.recording.opstream import Mode
from cutimeline.recording.session import Session
from cutimeline.recording.signatures import RULE_COLL, RULE_WAIT, ragged_key
from cutimeline.timeline.schema import NONE, OpFlag

# ``Before`` is a historical baseline: it keeps its own copy of the op
# stream's per-op helpers as they were then, so that opstream.py may change
# its private ones freely; what it shares with the recorder (the session,
# the signature rules, the key of a nested tensor) is public there.
_VIEW, _TRUNCATED = int(OpFlag.VIEW), int(OpFlag.TRUNCATED)
_Tensor = torch.Tensor
_node = torch._C._current_autograd_node
_ident = threading.get_ident
_now = time.perf_counter_ns
_NO_KWARGS: dict = {}  # never written: ops get their kwargs unpacked


def _first_device(args: tuple, kwargs: dict):
    """The device of an op whose first argument is no tensor: its first
    tensor's (in a list, or a keyword argument), else a factory's
    ``device`` argument (None when it has none)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            return a.device
        if type(a) is list or type(a) is tuple:
            for b in a:
                if isinstance(b, _Tensor):
                    return b.device
    return kwargs.get("device")


def _work_device(args: tuple, kwargs: dict, cpu):
    """Where an op whose first argument is a CPU scalar tensor runs: the
    first other tensor's device that is not the CPU (``cpu`` if none)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor) and a.device.type != "cpu":
            return a.device
        if type(a) is list or type(a) is tuple:
            for b in a:
                if isinstance(b, _Tensor) and b.device.type != "cpu":
                    return b.device
    return cpu


class Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Before(Mode):
    """The op stream's per-op path before this round of savings (the key in
    one expression only for ops with one or two leading tensors and no
    keywords; every view with a list of sizes, every three-argument op and
    every op with keywords in the loop), kept here to be timed beside the
    current one."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        s = self.s
        if s.off:
            return func(*args, **(kwargs or _NO_KWARGS))
        t0 = _now()
        seq = next(self.count)
        # The key: id(func) (OpOverload hashes in Python; the signature keeps
        # func alive), each tensor's dtype and shape, flat, and the device,
        # read once. One or two tensor arguments and no keywords (most ops)
        # build it in one expression; anything else takes the loop below.
        try:
            a = args[0] if args else None
            if isinstance(a, _Tensor):
                dev = a.device
                if self.scalar_first and dev.type == "cpu" and a.ndim == 0:
                    dev = _work_device(args, kwargs or _NO_KWARGS, dev)
                if kwargs or len(args) > 2:
                    key = None
                elif len(args) == 1:
                    key = (id(func), a.dtype, a.shape, dev)
                else:
                    b = args[1]
                    if isinstance(b, _Tensor):
                        key = (id(func), a.dtype, a.shape, b.dtype, b.shape, dev)
                    elif type(b) is list or type(b) is tuple:
                        key = None
                    else:
                        key = (id(func), a.dtype, a.shape, dev)
            else:
                key = dev = None
            if key is None:  # any other arguments
                if kwargs is None:
                    kwargs = _NO_KWARGS
                key = [id(func)]
                for a in args:
                    if isinstance(a, _Tensor):
                        key += (a.dtype, a.shape)
                    elif type(a) is list or type(a) is tuple:
                        for b in a:
                            if isinstance(b, _Tensor):
                                key += (b.dtype, b.shape)
                if kwargs:
                    for a in kwargs.values():
                        if isinstance(a, _Tensor):
                            key += (a.dtype, a.shape)
                if dev is None:
                    dev = _first_device(args, kwargs)
                key.append(dev)
                key = tuple(key)
        except RuntimeError:  # a nested tensor has no sizes (no cost when none is)
            kwargs = kwargs or _NO_KWARGS
            a = args[0] if args else None
            dev = a.device if isinstance(a, _Tensor) else _first_device(args, kwargs)
            key = (id(func), *ragged_key(args, kwargs), dev)
        try:
            sid, flags, rule, call = self.sigs.get(key) or s.signature(
                key, func, dev, args, kwargs)
        except TypeError:  # symbolic shapes do not hash: key them by text
            key = tuple(tuple(map(str, k)) if isinstance(k, tuple) else k for k in key)
            sid, flags, rule, call = self.sigs.get(key) or s.signature(
                key, func, dev, args, kwargs)
        w = self.w
        gid = NONE
        if s.backward:  # only then can an autograd node be running
            node = _node()
            if node is not None:
                gid = s.nodes.get(type(node))
                if gid is None:
                    gid = s.node(node)
                if _ident() != self.ident:  # an autograd engine device thread
                    w = s.writer()
        if seq >= self.max_ops:
            if seq > self.max_ops:
                return func(*args, **(kwargs or _NO_KWARGS))
            s.truncate()
            flags |= _TRUNCATED
        if rule >= RULE_COLL:  # collectives, and ops measured (FLOPs, allocations)
            kwargs = kwargs or _NO_KWARGS
            if rule > RULE_WAIT:
                return s.measured(w, func, args, kwargs, seq, t0, sid, gid, flags,
                                  rule, dev, call)
            return s.collective(w, func, args, kwargs, seq, t0, sid, gid, flags, dev)
        if self.host_only or flags & (_VIEW | _TRUNCATED) or dev is None:
            pass
        elif rule:
            return s.launch_ruled(w, func, args, kwargs or _NO_KWARGS, seq, t0, sid, gid,
                                  flags, rule, dev)
        elif not (w.data and dev.type == "cpu") and s.device.owns(dev):
            return s.launch(w, func, args, kwargs or _NO_KWARGS, seq, t0, sid, gid, flags,
                            False)
        try:  # without keywords, no dict is built for the call
            out = call(*args, **kwargs) if kwargs else call(*args)
        except BaseException:
            w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
            raise
        w.ops.append((seq, t0, _now(), sid, w.ctx, gid, flags))
        return out


class _BeforeSession(Session):
    def mode_for(self, w):
        return Before(self, w)


@contextlib.contextmanager
def record_before(measure: bool = False):
    """``ctl.record(device="cpu", measure=measure)`` with the previous per-op path."""
    recorder.Session = _BeforeSession
    try:
        with ctl.record(device="cpu", measure=measure) as rec:
            yield rec
    finally:
        recorder.Session = Session


def workload(n_ops: int) -> None:
    x = torch.ones(16)
    y = torch.full((16,), 2.0)
    for _ in range(n_ops // 4):
        z = torch.add(x, y)
        z = torch.mul(z, y)
        z = torch.relu(z)
        z = torch.sum(z)


class MLP:
    """A small MLP's training step (forward, backward, ``Adam.step``) on
    its own tensors and random state."""

    def __init__(self) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                torch.nn.ReLU(), torch.nn.Linear(64, 10))
            self.x, self.y = torch.randn(16, 32), torch.randint(0, 10, (16,))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.steps(2)  # Adam's state exists: every step has the same ops
        counter = _Count()
        with counter:
            self.steps(1)
        self.ops = counter.n  # ops per step

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(self.net(self.x), self.y).backward()
            self.opt.step()


class _Count(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


_JOURNALS = tempfile.mkdtemp(prefix="bench-record-")  # out_dir's files, removed at exit
atexit.register(shutil.rmtree, _JOURNALS, True)


def variants() -> dict:
    from torch.profiler import ProfilerActivity, profile
    return {"nothing": contextlib.nullcontext, "bare mode": Bare,
            "cutimeline": lambda: ctl.record(device="cpu", measure=False),
            "cutimeline out_dir": lambda: ctl.record(device="cpu", measure=False,
                                                     out_dir=_JOURNALS),
            "cutimeline before": record_before,
            "torch.profiler": lambda: profile(activities=[ProfilerActivity.CPU],
                                              record_shapes=True)}


def rotated(modes: dict, i: int) -> dict:
    """The modes in the ``i``-th turn order: each follows each other as often
    over the rounds (the one right after the bare mode read slower: an MLP
    +2.87 against +2.50 µs/op with the order fixed, +2.29 against +2.40
    with it swapped)."""
    keys = list(modes)
    i %= len(keys)
    return {k: modes[k] for k in keys[i:] + keys[:i]}


def one_round(work: dict, modes: dict, clock=time.perf_counter_ns) -> dict:
    """µs per op of each workload under each mode, once each."""
    out = {}
    for w, (run, n, ops) in work.items():
        for k, make in modes.items():
            gc.collect()  # none pays for another's garbage
            with make():
                t0 = clock()
                run(n)
                out[w, k] = (clock() - t0) / ops / 1e3
    return out


def instructions(a: argparse.Namespace) -> None:
    """Instructions per op of each workload and mode, counted by callgrind
    (deterministic: blind to the other jobs of a shared machine, though not
    to cache misses). Each count runs in a process forked after the
    imports, and only inside ``operator.call`` (``--toggle-collect``)."""
    import glob
    import json
    import re
    import shutil
    import subprocess
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind).")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=*operator_call*",
                        f"--callgrind-out-file={d}/%p.out", sys.executable, __file__,
                        "--_counted", d, "--ops", str(a.ops), "--steps", str(a.steps)],
                       check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        got = {}
        for f in glob.glob(os.path.join(d, "*.name")):
            w, k, ops = json.load(open(f))
            text = open(f[:-len(".name")] + ".out").read()
            got[w, k] = int(re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)[1]) / ops
    work = sorted(dict.fromkeys(w for w, _ in got), reverse=True)  # tiny ops first
    print(f"# instructions per op (callgrind), {a.ops} tiny ops, {a.steps} MLP steps")
    print("| instructions/op | " + " | ".join(work) + " |")
    print("|---|" + "---:|" * len(work))
    for k in variants():
        print(f"| {k} | " + " | ".join(
            f"{got[w, k]:,.0f} ({got[w, k] - got[w, 'bare mode']:+,.0f})" for w in work) + " |")


def _counted(d: str, work: dict, modes: dict) -> None:
    """The child under callgrind: one forked process per workload and mode."""
    import json
    for w, (run, n, ops) in work.items():
        for k, make in modes.items():
            pid = os.fork()
            if pid == 0:
                with make():
                    run(n)  # warm: caches and signatures filled
                    gc.collect()
                    operator.call(run, n)
                with open(os.path.join(d, f"{os.getpid()}.name"), "w") as f:
                    json.dump([w, k, ops], f)
                os._exit(0)
            os.waitpid(pid, 0)


def held(n: int) -> str:
    """Bytes held per op while recording ``n`` tiny ops: the heap's growth
    (tracemalloc) and the op rows counted (``OpRows.held_bytes``, absent in
    checkouts before it)."""
    workload(400)  # torch's first-use allocations, outside the measure
    tracemalloc.start()
    try:
        with ctl.record(device="cpu", measure=False, modules=False) as rec:
            workload(400)
            rows = getattr(rec._session, "rows", None)
            base = tracemalloc.get_traced_memory()[0]
            workload(n)
            now = tracemalloc.get_traced_memory()[0] - base
            counted = rows.held_bytes() if rows is not None else None
    finally:
        tracemalloc.stop()
    line = f"held while recording {n:,} ops: {now / n:.0f} B/op (tracemalloc)"
    if counted is not None:
        line += f"; op rows counted: {counted / n:.0f} B/op (OpRows.held_bytes)"
    return line


def _tree_child(a: argparse.Namespace) -> None:
    """One process of ``--trees``: this checkout's recorder, as JSON."""
    import json
    assert os.path.abspath(ctl.__file__).startswith(os.path.abspath(a._tree)), ctl.__file__
    torch.set_num_threads(1)
    mlp = MLP()
    work = {"tiny ops": (workload, a.ops, a.ops),
            "MLP fwd+bwd+Adam": (mlp.steps, a.steps, a.steps * mlp.ops)}
    modes = {"bare mode": Bare, "cutimeline": lambda: ctl.record(device="cpu", measure=False)}
    inside, total = {}, {}
    for i in range(a.reps + 1):  # the first: warm-up
        for w, (run, n, ops) in work.items():
            for k, make in rotated(modes, i).items():
                gc.collect()
                t0 = time.perf_counter_ns()
                with make():
                    t1 = time.perf_counter_ns()
                    run(n)
                    t2 = time.perf_counter_ns()
                t3 = time.perf_counter_ns()
                if i:
                    inside.setdefault((w, k), []).append((t2 - t1) / ops / 1e3)
                    total.setdefault((w, k), []).append((t3 - t0) / ops / 1e3)
    out = {w: {"inside": statistics.median(x - y for x, y in zip(
                   inside[w, "cutimeline"], inside[w, "bare mode"])),
               "total": statistics.median(x - y for x, y in zip(
                   total[w, "cutimeline"], total[w, "bare mode"])),
               "bare": statistics.median(inside[w, "bare mode"])} for w in work}
    out["held"] = held(a.ops)
    print("RESULT " + json.dumps(out))


def trees(a: argparse.Namespace) -> None:
    """``--trees``: each checkout's recorder, alternating processes."""
    import json
    import subprocess
    got: dict[str, list] = {t: [] for t in a.trees}
    for r in range(a.runs):
        order = a.trees if r % 2 == 0 else a.trees[::-1]
        for t in order:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(t)}
            p = subprocess.run([sys.executable, __file__, "--_tree", t, "--ops", str(a.ops),
                                "--steps", str(a.steps), "--reps", str(a.reps)],
                               capture_output=True, text=True, env=env, check=True)
            res = json.loads(p.stdout.split("RESULT ", 1)[1])
            got[t].append(res)
            print(f"run {r + 1}, {t}: " + "; ".join(
                f"{w} {res[w]['inside']:+.3f} inside, {res[w]['total']:+.3f} with stop"
                for w in res if w != "held") + f"; {res['held']}", flush=True)
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"# {a.runs} runs a checkout, alternating; each the median of {a.reps} rounds of "
          f"{a.ops} tiny ops and {a.steps} MLP steps; µs/op over a bare mode, "
          f"median of the runs (range)")
    work = [w for w in got[a.trees[0]][0] if w != "held"]
    print("| checkout | " + " | ".join(f"{w} inside | {w} with stop" for w in work) + " |")
    print("|---|" + "---:|" * (2 * len(work)))
    for t, runs in got.items():
        cells = []
        for w in work:
            for part in ("inside", "total"):
                xs = [r[w][part] for r in runs]
                cells.append(f"{statistics.median(xs):+.3f} ({min(xs):+.3f}…{max(xs):+.3f})")
        print(f"| {t} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000, help="tiny ops per round")
    ap.add_argument("--steps", type=int, default=20, help="MLP steps per round")
    ap.add_argument("--reps", type=int, default=15, help="rounds (medians over them)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: perf_counter; cpu: this thread's CPU time (on a "
                         "shared machine, blind to the time other jobs take the core)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions per op under callgrind instead (try "
                         "--ops 400 --steps 2: valgrind runs ~50x slower)")
    ap.add_argument("--trees", nargs="+", metavar="CHECKOUT",
                    help="time the recorder of each checkout in alternating processes")
    ap.add_argument("--runs", type=int, default=3, help="with --trees: runs a checkout")
    ap.add_argument("--_counted", help=argparse.SUPPRESS)
    ap.add_argument("--_tree", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.instructions:
        return instructions(a)
    if a.trees:
        return trees(a)
    if a._tree:
        return _tree_child(a)
    clock = time.perf_counter_ns if a.clock == "wall" else time.thread_time_ns
    torch.set_num_threads(1)
    mlp = MLP()
    work = {"tiny ops": (workload, a.ops, a.ops),
            "MLP fwd+bwd+Adam": (mlp.steps, a.steps, a.steps * mlp.ops)}
    modes = variants()
    if a._counted:
        return _counted(a._counted, work, modes)
    one_round(work, modes, clock)  # warm-up
    rounds = [one_round(work, rotated(modes, i), clock) for i in range(a.reps)]
    print(f"# {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
          f"{torch.__version__}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"# {a.reps} rounds of {a.ops} tiny ops and {a.steps} MLP steps "
          f"({mlp.ops} ops each); µs/op ({a.clock} clock), median (fastest) round")
    print("| µs/op | " + " | ".join(work) + " |")
    print("|---|" + "---:|" * len(work))
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    low = {key: min(r[key] for r in rounds) for key in rounds[0]}
    for k in modes:
        print(f"| {k} | " + " | ".join(f"{med[w, k]:.2f} ({low[w, k]:.2f})" for w in work)
              + " |")
    for k in ("cutimeline", "cutimeline out_dir", "cutimeline before"):
        print(f"| **{k} − bare mode** | " + " | ".join(
            f"**{med[w, k] - med[w, 'bare mode']:+.2f}** "
            f"({low[w, k] - low[w, 'bare mode']:+.2f})" for w in work) + " |")
    print("| cutimeline − bare, median of each round's difference | " + " | ".join(
        f"{statistics.median(r[w, 'cutimeline'] - r[w, 'bare mode'] for r in rounds):+.2f}"
        for w in work) + " |")
    print("| cutimeline out_dir − cutimeline, median of each round's difference | " +
          " | ".join(f"{statistics.median(r[w, k] - r[w, 'cutimeline'] for r in rounds):+.2f}"
                     for w in work for k in ["cutimeline out_dir"]) + " |")
    print("| cutimeline / torch.profiler | " + " | ".join(
        f"{med[w, 'cutimeline'] / med[w, 'torch.profiler']:.2f}" for w in work) + " |")
    print("goals (cutimeline − bare mode): tiny ops ≤ +0.7, MLP ≤ +1.5 µs/op")

    n = 20000
    for m in (n, 200_000):
        print(held(m))
    with ctl.record(device="cpu", measure=False) as rec:
        workload(n)
    tl = rec.timeline
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        workload(n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.ctl")
        tl.save(path)
        size = os.path.getsize(path)
        kineto = os.path.join(d, "run.json")
        prof.export_chrome_trace(kineto)
        with open(kineto, "rb") as f:
            raw = f.read()
    per = len(tl.ops)
    print(f"file: {size / per:.1f} B/op on disk (.ctl, goal ≤ 40); torch.profiler's "
          f"Kineto JSON of the same ops: {len(raw) / per:.0f} B/op, "
          f"{len(gzip.compress(raw)) / per:.0f} B/op gzipped")


if __name__ == "__main__":
    sys.exit(main())
