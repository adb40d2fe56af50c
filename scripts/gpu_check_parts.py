"""The parts of ``gpu_check.py``. Each ``part_<key>(part)`` runs in a process
of its own, puts its numbers with ``part.put`` as it goes (so a part that is
stopped keeps what it had), returns a one-line summary, and raises ``Skip``
when it cannot run here. Times are ns in the JSON unless a name says µs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from time import perf_counter_ns as now_ns

import numpy as np
import torch

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.timeline.schema import GpuKind

ROOT = Path(__file__).resolve().parent.parent
SPIN_OP = "ctlcheck::spin"
QUEUED_NS = 15_000   # a spin that starts this soon after the previous one was queued
_truth: list = []    # the Stamper the spin op writes its own globaltimer readings to


class Skip(Exception):
    """The part cannot run here; the message says why."""


def stats(x) -> dict:
    """Distribution of ``x`` (NaNs dropped): n, min, p1..p99, max, mean."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return {"n": 0}
    p = np.percentile(x, [1, 5, 50, 95, 99])
    return {"n": int(len(x)), "min": float(x.min()), "p1": p[0], "p5": p[1],
            "median": p[2], "p95": p[3], "p99": p[4], "max": float(x.max()),
            "mean": float(x.mean())}


def stamps_missing() -> str | None:
    """None when spins and stamps can run here, else why not (with what to
    install, from the kernel loader)."""
    from cutimeline.devices.cuda import loader as kernelloader
    try:
        kernelloader.import_cupy()
        # CuPy can import without NVRTC (no CUDA toolkit libraries): compile
        if torch.cuda.is_available():
            kernelloader.compiled("stamp", torch.cuda.current_device())
    except CutimelineError as exc:
        return str(exc)
    return None


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _bench_record():
    """benchmarks/overhead/bench_record.py, for its bare mode and tiny-op loop."""
    spec = importlib.util.spec_from_file_location("bench_record",
                                                  ROOT / "benchmarks" / "overhead" / "bench_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _clock(tl) -> dict:
    c = tl.clocks
    return {"slope_ppm": (float(c.slope[0]) - 1) * 1e6, "bound_ns": float(c.bound_ns[0]),
            "bound_max_ns": float(c.bound_max_ns[0]), "relax_ns": float(c.relax_ns[0]),
            "n_lower": int(c.n_lower[0]), "n_upper": int(c.n_upper[0]),
            "span_ns": int(np.ptp(tl.events.raw_ns)) if len(tl.events) else 0}


def _event_pool(tl) -> dict | None:
    """What a CUDA recording's event pool did and the event tick it
    measured (``meta["cuda"]``); None for other devices."""
    c = tl.meta.get("cuda")
    if not c:
        return None
    return {"event_tick_ns": c.get("event_tick_ns"),
            "event_tick_measured_ns": c.get("event_tick_measured_ns"),
            "clock_resolution_ns": tl.meta.get("clock_resolution_ns"),
            "events_created": c.get("events_created"),
            "events_read_inline": c.get("events_read_inline"),
            "pool_pauses": len(c.get("pool_pauses") or ()), "pool_pause_ns": c.get("pool_pause_ns")}


def environment() -> dict:
    """Versions and the GPU, for the record (no setting is changed)."""
    env = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "cutimeline": ctl.__version__}
    try:
        import cupy
        env["cupy"] = cupy.__version__
    except Exception as exc:  # absent or broken: the parts say what to install
        env["cupy"] = f"unavailable ({type(exc).__name__})"
    if env["cuda_available"]:
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return env


# -- b: the aligner against ground truth -------------------------------------------------

def _spin_op():
    """``ctlcheck::spin(x, duration_ns, slot)``, a custom op the recorder sees
    and brackets like any launch. On CUDA it is the spin kernel, writing its
    first and last globaltimer readings to slots 2·slot and 2·slot+1 of the
    truth stamper; on CPU it does nothing and the SimGPU costs it at
    ``duration_ns``."""
    if not hasattr(torch.ops, "ctlcheck") or not hasattr(torch.ops.ctlcheck, "spin"):
        # the schema is spelled out: torch < 2.5 cannot infer it from the
        # string annotations of ``from __future__ import annotations``
        @torch.library.custom_op(SPIN_OP, mutates_args=("x",),
                                 schema="(Tensor(a!) x, int duration_ns, int slot) -> ()")
        def spin(x: torch.Tensor, duration_ns: int, slot: int) -> None:
            if x.is_cuda:
                from cutimeline.devices.cuda import kernels
                kernels.spin(duration_ns, stamper=_truth[0], begin_slot=2 * slot,
                             end_slot=2 * slot + 1)
    return torch.ops.ctlcheck.spin


def _drive(op, x, durations, bursts: int, rng, sleep_s: tuple[float, float]) -> None:
    """Spins in bursts (queued behind each other); after each burst the host
    sleeps (the GPU drains and idles), syncs (an upper bound) or goes on."""
    after = rng.choice(["sleep", "item", "none"], bursts, p=[0.45, 0.4, 0.15])
    for b, idx in enumerate(np.array_split(np.arange(len(durations)), bursts)):
        for k in idx:
            op(x, int(durations[k]), int(k))
        if after[b] == "sleep":
            time.sleep(rng.uniform(*sleep_s))
        elif after[b] == "item":
            x.sum().item()


def _spin_rows(tl, n: int) -> np.ndarray:
    names = tl.decode(tl.ops["name"][tl.gpu.op])
    rows = np.flatnonzero([str(s).startswith(SPIN_OP) for s in names])
    if len(rows) != n:
        raise RuntimeError(f"the recording has {len(rows)} gpu rows of {SPIN_OP}, "
                           f"not the {n} spins launched")
    return rows  # in launch order: gpu rows follow op sequence numbers


def _placement(b, e, truth_b, truth_e, dur_true, queued, bound, extra=0.0) -> dict:
    """Where gpu rows [b, e] lie against the truth [truth_b, truth_e] (host
    ns): signed errors; how often the row brackets the truth when widened
    by the bound (``extra``: the truth's own bound), and without widening;
    how often both ends lie within the bound of the truth."""
    place = np.concatenate([b - truth_b, e - truth_e]).astype(np.float64)
    widen = bound + extra + 1  # +1: aligned times are rounded to whole ns
    return {"begin_minus_truth_ns": stats(b - truth_b), "end_minus_truth_ns": stats(e - truth_e),
            "abs_error_ns": stats(np.abs(place)),
            "duration_minus_truth_ns": {"queued": stats(((e - b) - dur_true)[queued]),
                                        "after_idle": stats(((e - b) - dur_true)[~queued])},
            "brackets_truth": float(np.mean((b - widen <= truth_b) & (e + widen >= truth_e))),
            "brackets_truth_unwidened": float(np.mean((b <= truth_b) & (e >= truth_e))),
            "within_bound_of_truth": float(np.mean(np.abs(place) <= widen))}


def part_b(part) -> str:
    rng = np.random.default_rng(0)
    if part.dry:
        return _aligner_sim(part, rng)
    why = stamps_missing()
    if why:
        raise Skip(f"spins and stamps need CuPy: {why}")
    from cutimeline.devices.cuda import kernels as K
    g = K.probe_granularity(1000)
    part.put("globaltimer_step_ns", {"min": g.min_step_ns, "typical": g.typical_step_ns,
                                     "max": g.max_step_ns, "reads_per_step": g.reads_per_step,
                                     "read_limited": g.read_limited})
    part.put("stream_cost_ns", _stream_cost(K))
    n, bursts = 240, 12
    durations = np.exp(rng.uniform(np.log(5e3), np.log(1e6), n)).astype(np.int64)
    _truth[:] = [K.Stamper(2 * n)]
    op, x = _spin_op(), torch.zeros(1, device="cuda")
    op(x, 0, 0)  # load the spin kernel outside the recording
    _truth[0].reset()
    with ctl.record(device="cuda", timing="both", measure=False) as rec:
        _drive(op, x, durations, bursts, rng, (0.08, 0.25))
    got = _truth[0].read()
    if not got.written.all():
        raise RuntimeError(f"{int((~got.written).sum())} spin readings were never written")
    res = _score_both(part, rec.timelines, got.globaltimer_ns[0::2],
                      got.globaltimer_ns[1::2], durations)
    e = res["events"]
    err = max(abs(e["begin_minus_truth_ns"]["p5"]), abs(e["end_minus_truth_ns"]["p95"]))
    return (f"{n} spins: event rows bracket the truth in {e['brackets_truth']:.0%} "
            f"(bounds ±{e['clock']['bound_max_ns'] / 1e3:.1f}+"
            f"{res['stamps']['clock']['bound_max_ns'] / 1e3:.1f} µs), "
            f"ends within {err / 1e3:.1f} µs of it (p5/p95); events vs stamps "
            f"{res['every_event_inside_both_bounds']:.0%} within bounds; "
            f"timer step {g.typical_step_ns} ns")


def _score_both(part, tls: dict, gt_b, gt_e, durations) -> dict:
    """Spins recorded with timing="both" against their own globaltimer
    readings ``gt_b``/``gt_e`` (ns), per timing; every event both ways."""
    from cutimeline.alignment.aligner import event_host_ns
    ev, st = tls["events"], tls["stamps"]
    for name, tl in (("events", ev), ("stamps", st)):
        if not len(tl.clocks):
            raise RuntimeError(f"the {name} Timeline was not aligned: "
                               f"{tl.meta.get('align_error', '?')}")
    n = len(durations)
    c = st.clocks  # truth on the host clock: the spin's own globaltimer, by the stamps' fit
    to_host = lambda gt: c.offset_ns[0] + np.floor(c.slope[0] * (gt - c.ref_raw_ns[0]) + 0.5)
    truth_b, truth_e, dur_true = to_host(gt_b), to_host(gt_e), gt_e - gt_b
    queued = np.r_[False, gt_b[1:] - gt_e[:-1] < QUEUED_NS]
    res = {"spins": n, "queued": int(queued.sum()), "requested_ns": stats(durations),
           "overshoot_ns": stats(dur_true - durations), "seconds": (ev.end_ns - ev.start_ns) / 1e9,
           "event_pool": _event_pool(ev),
           "truth": "each spin's first and last %globaltimer reading, on the host clock "
                    "through the stamps Timeline's clock fit (itself within its bound)"}
    bound_s = float(st.clocks.bound_max_ns[0])
    for name, tl in (("events", ev), ("stamps", st)):
        rows = _spin_rows(tl, n)
        gb, ge = tl.gpu.begin_ns[rows], tl.gpu.end_ns[rows]
        res[name] = {"clock": _clock(tl), **_placement(
            gb, ge, truth_b, truth_e, dur_true, queued, float(tl.clocks.bound_max_ns[0]),
            0.0 if name == "stamps" else bound_s)}
        part.put("aligner", res)
    res["stamps"]["note"] = ("same clock and fit as the truth: its placement errors are the "
                             "stream gaps between a BEGIN/END stamp and the spin")
    he, hs = event_host_ns(ev), event_host_ns(st)
    res["every_event_events_minus_stamps_ns"] = stats(he - hs)
    res["every_event_events_minus_stamps_abs_ns"] = stats(np.abs(he - hs))
    res["every_event_inside_both_bounds"] = float(np.mean(
        np.abs(he - hs) <= ev.clocks.bound_max_ns[0] + bound_s + 2))
    part.put("aligner", res)
    return res


def _stream_cost(K, n: int = 200) -> dict:
    """Device time one stamp, and one event, occupies its stream: ``n`` of
    them queued back to back behind a ~10 ms sleep, median step between
    neighbours (stamps by their own globaltimer, events by elapsed time)."""
    stamper = K.Stamper(n)
    torch.cuda._sleep(20_000_000)
    for i in range(n):
        stamper.stamp(i)
    gt = stamper.read().globaltimer_ns
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda._sleep(20_000_000)
    for e in events:
        e.record()
    events[-1].synchronize()
    ms = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    return {"stamp_median": float(np.median(np.diff(gt))),
            "event_median": float(np.median(ms)) * 1e6, "queued": n}


def _aligner_sim(part, rng) -> str:
    """The dry run: a SimGPU whose true event times are known."""
    from cutimeline.alignment.aligner import event_host_ns
    n, bursts = 60, 6
    durations = np.exp(rng.uniform(np.log(5e3), np.log(1e6), n)).astype(np.int64)
    cost = lambda name, args, kwargs, out: float(args[1]) if name.startswith(SPIN_OP) else 2e3
    # the spin op runs on CPU tensors; rows are exactly the simulated work
    gpu = ctl.SimGPU("h100", seed=3, cost=cost, owns=("cpu",), bracket="kernel")
    op, x = _spin_op(), torch.zeros(1)
    with ctl.record(device=gpu, measure=False) as rec:
        _drive(op, x, durations, bursts, rng, (0.002, 0.01))
    tl = rec.timeline
    truth = np.zeros(len(tl.events), np.int64)
    truth[tl.truth.event] = tl.truth.host_ns
    rows = _spin_rows(tl, n)
    g = tl.gpu
    truth_b, truth_e = truth[g.begin_event[rows]], truth[g.end_event[rows]]
    queued = np.r_[False, truth_b[1:] - truth_e[:-1] < QUEUED_NS]
    bound = float(tl.clocks.bound_max_ns[0])
    err = event_host_ns(tl) - truth
    res = {"spins": n, "queued": int(queued.sum()), "requested_ns": stats(durations),
           "truth": "SimGPU: the simulator's true host time of every event",
           # host = offset + slope·raw, and the device clock runs (1 + drift) fast
           "events": {"clock": _clock(tl),
                      "true_slope_ppm": (1 / (1 + gpu.drift_ppm * 1e-6) - 1) * 1e6,
                      "every_event_minus_truth_ns": stats(err),
                      "every_event_abs_minus_truth_ns": stats(np.abs(err)),
                      "every_event_inside_bound": float(np.mean(np.abs(err) <= bound + 1)),
                      **_placement(g.begin_ns[rows], g.end_ns[rows], truth_b, truth_e,
                                   durations, queued, bound)},
           "stamps": {"status": "skipped",
                      "reason": f"a SimGPU has no globaltimer; {stamps_missing() or ''}"}}
    part.put("aligner", res)
    e = res["events"]
    return (f"SIMULATED {n} spins: |event − truth| p99 {stats(np.abs(err))['p99'] / 1e3:.2f} µs, "
            f"{e['every_event_inside_bound']:.0%} inside ±{bound / 1e3:.2f} µs, rows bracket "
            f"the truth in {e['brackets_truth']:.0%}; stamps n/a")


# -- c: per-op overhead -------------------------------------------------------------------

def _tiny(dev: torch.device, n: int):
    """bench_record's tiny-op loop (add, mul, relu, sum on 16 elements) on dev."""
    x, y = torch.ones(16, device=dev), torch.full((16,), 2.0, device=dev)

    def run():
        for _ in range(n // 4):
            z = torch.add(x, y)
            z = torch.mul(z, y)
            z = torch.relu(z)
            z = torch.sum(z)
    return run


def _transformer(dev: torch.device, small: bool):
    torch.manual_seed(0)
    d, layers, batch, seq = (32, 1, 4, 16) if small else (512, 6, 32, 128)
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=4 if small else 8,
                                             dim_feedforward=4 * d, batch_first=True)
    net = torch.nn.TransformerEncoder(layer, num_layers=layers,
                                      enable_nested_tensor=False).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d, device=dev)

    def step():
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
    return step


def _variants(dev: torch.device, bench, stamps_ok: bool) -> dict:
    from torch.profiler import ProfilerActivity as A, profile
    where = str(dev) if dev.type == "cuda" else "cpu"
    acts = [A.CPU, A.CUDA] if dev.type == "cuda" else [A.CPU]
    v = {"nothing": contextlib.nullcontext, "bare mode": bench.Bare,
         "cutimeline": lambda: ctl.record(device=where, measure=False)}
    if stamps_ok:
        v["cutimeline stamps"] = lambda: ctl.record(device=where, timing="stamps",
                                                    measure=False)
    v["torch.profiler"] = lambda: profile(activities=acts, record_shapes=True)
    return v


def _ops_per_call(fn, dev: torch.device) -> int:
    with ctl.record(device="cpu", modules=False, measure=False) as rec:
        fn()
        sync(dev)
    return len(rec.timeline.ops)


def _overhead(part, fn, dev, variants: dict, calls: int, rounds: int) -> dict:
    ops = _ops_per_call(fn, dev)
    times: dict[str, list[float]] = {k: [] for k in variants}
    keys = list(variants)
    for r in range(rounds + 1):  # round 0 warms every path up
        if r > 1 and part.left() < 15:
            break
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:  # rotate who goes first
            sync(dev)
            with variants[k]():
                t = []
                for _ in range(calls):
                    t0 = now_ns()
                    fn()
                    sync(dev)
                    t.append(now_ns() - t0)
            if r:
                times[k].append(float(np.median(t)) / ops / 1e3)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"ops_per_call": ops, "calls_per_round": calls, "rounds": len(times["nothing"]),
            "us_per_op": med, "us_per_op_rounds": times,
            "overhead_us_per_op": {k: med[k] - med["nothing"] for k in med},
            "ratio": {k: med[k] / med["nothing"] for k in med}}


def part_c(part) -> str:
    bench = _bench_record()
    dev = torch.device("cpu" if part.dry else "cuda")
    why = stamps_missing() if dev.type == "cuda" else "no CUDA in a dry run"
    part.put("stamps", {"status": "ok"} if why is None else {"status": "skipped", "reason": why})
    variants = _variants(dev, bench, why is None)
    small = part.dry
    # bench_record's own loop on a CPU; the same ops on 16-element CUDA tensors
    tiny = (lambda: bench.workload(800)) if small else _tiny(dev, 2000)
    res = {}
    if dev.type == "cuda":  # host cost of the two points around one launch
        from cutimeline.devices.cuda import TIMINGS, CudaDevice
        res["launch_points_ns"] = {t: CudaDevice(timing=t).measure_launch_ns(256)
                                   for t in (("events",) if why else TIMINGS)}
        part.put("launch_points_ns", res["launch_points_ns"])
    res["tiny"] = _overhead(part, tiny, dev, variants, 3 if small else 5, 2 if small else 5)
    part.put("tiny", res["tiny"])
    if part.left() > 20:
        res["transformer"] = _overhead(part, _transformer(dev, small), dev,
                                       variants, 2 if small else 3, 2 if small else 5)
        part.put("transformer", res["transformer"])
    o = res["tiny"]["overhead_us_per_op"]
    text = (f"tiny: cutimeline +{o['cutimeline']:.1f} µs/op (bare +{o['bare mode']:.1f}"
            + (f", stamps +{o['cutimeline stamps']:.1f}" if "cutimeline stamps" in o else "")
            + f", profiler +{o['torch.profiler']:.1f})")
    if "transformer" in res:
        r = res["transformer"]["ratio"]
        text += f"; transformer ×{r['cutimeline']:.2f} (profiler ×{r['torch.profiler']:.2f})"
    return ("CPU " if part.dry else "") + text


# -- d: GPU time against torch.profiler -------------------------------------------------------

def _big_ops():
    """Ops of ≥ 0.1 ms each, queued behind a long sleep so every BEGIN event
    runs as the previous work ends (see tests/gpu/test_comparison_gpu.py)."""
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    x = torch.randn(64 << 20, device="cuda")

    def step():
        torch.cuda._sleep(50_000_000)
        c = a @ b
        return c, torch.relu(x) * 2.0 + x
    return step


def _recorder_us_per_op(dev: torch.device, runs: int = 5) -> float:
    """A recording's host cost per op here: µs per op of the tiny loop
    recorded, timed inside the recording, median of ``runs``."""
    fn, ops = _tiny(dev, 800), 800 // 4 * 4
    where = str(dev) if dev.type == "cuda" else "cpu"
    per_op = []
    for _ in range(runs):
        with ctl.record(device=where, measure=False, modules=False):
            t0 = now_ns()
            fn()
            sync(dev)
            per_op.append((now_ns() - t0) / ops / 1e3)
    return float(np.median(per_op))


def _after_compare(part, dev: torch.device, before: float) -> None:
    """A recording after compare() costs what one before it did, and the
    profiler is off (compare's profiler pass leaves nothing behind)."""
    from cutimeline.comparison.runner import profiler_left_on
    after = _recorder_us_per_op(dev)
    part.put("recorder_after_compare", {
        "before_us_per_op": before, "after_us_per_op": after, "ratio": after / before,
        "profiler_left_on": profiler_left_on(torch),
        "teardown_cupti_env": os.environ.get("TEARDOWN_CUPTI")})


def part_d(part) -> str:
    from cutimeline.comparison.runner import compare
    dev = torch.device("cpu" if part.dry else "cuda")
    _recorder_us_per_op(dev, 1)  # warm up
    before = _recorder_us_per_op(dev)
    if part.dry:
        cmp = compare(_tiny(torch.device("cpu"), 200), steps=2, warmup=1, device="cpu")
        print(cmp.table())
        part.put("tiny_cpu", cmp.to_dict())
        _after_compare(part, dev, before)
        part.put("gpu_time", {"status": "n/a", "reason": "GPU time per op needs CUDA: on a CPU "
                              "(or a SimGPU) torch.profiler sees no device work to compare"})
        part.put("compiled", _compiled_check(part, torch.device("cpu")))
        return (f"CPU op stream {100 * cmp.match.fraction:.1f} % matched; "
                f"GPU time n/a (no CUDA)")
    # no trace_dir: a device slot brings back few files (compare's own
    # temporary folder holds the traces)
    cmp = compare(_big_ops(), steps=5, warmup=2, device="cuda")
    print(cmp.table())
    part.put("big_ops", cmp.to_dict())
    _after_compare(part, dev, before)
    _plot(part, lambda: cmp.plot(part.out / "d_compare.png"), "plot")
    text = _gpu_text(cmp)
    if part.left() > 30:
        cmp2 = compare(_transformer(torch.device("cuda"), False), steps=3, warmup=2,
                       device="cuda")
        print(cmp2.table())
        part.put("transformer", cmp2.to_dict())
    part.put("note", "stamps: compare() records with events; part b sets stamps against "
                     "events op by op")
    if part.left() > 25:  # a cold Triton compile takes a while: last, and cut short safely
        part.put("compiled", _compiled_check(part, torch.device("cuda")))
    return text


def _compiled_mlp(dev: torch.device, small: bool):
    """A training step of an MLP compiled by Inductor (Triton on CUDA, C++
    on the CPU)."""
    torch.manual_seed(0)
    if small:  # tests/recording/hooks/test_compiled.py's: Inductor's cache has it compiled in CI
        net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 4)).to(dev)
        x = torch.randn(8, 16, device=dev)
    else:
        net = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                                  torch.nn.LayerNorm(2048), torch.nn.Linear(2048, 2048)).to(dev)
        x = torch.randn(512, 2048, device=dev)
    compiled = torch.compile(net)

    def step():
        net.zero_grad(set_to_none=True)
        compiled(x).square().mean().backward()
    return step


def _compiled_rows(tl) -> dict:
    """What a recording shows of compiled graphs: their ops, the COMPILED
    gpu rows (their fused kernels, bracketed together) and GPU busy."""
    names = np.array(tl.decode(tl.ops["name"]), dtype=object)
    graphs = np.flatnonzero([str(n).startswith("inductor::graph_") for n in names])
    g = tl.gpu
    rows = g.kind == GpuKind.COMPILED
    return {"graph_calls": int(len(graphs)), "graphs": sorted(set(names[graphs].tolist())),
            "compiled_rows": int(rows.sum()),
            "compiled_ns": int((g.end_ns[rows] - g.begin_ns[rows]).sum()) if tl.aligned else None,
            "gpu_busy": ctl.analyze(tl).overall["busy_frac"] if len(g) else None}


def _compiled_check(part, dev: torch.device) -> dict:
    """torch.compile'd MLP steps: on CUDA, ``compare`` them, and set the
    COMPILED rows (an upper bound on the fused kernels' time) against the
    Triton kernels torch.profiler lists, and GPU busy against GPU busy; in a
    dry run, record them on a SimGPU and count what shows."""
    import warnings
    step = _compiled_mlp(dev if not part.dry else torch.device("cpu"), part.dry)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: global module hooks
        step()
        compile_s = time.perf_counter() - t0
        if part.dry:
            with ctl.record(device=ctl.SimGPU(owns=("cpu",)), measure=False) as rec:
                step()
                step()
            return {"compile_s": compile_s, "cutimeline": _compiled_rows(rec.timeline),
                    "profiler": "n/a: on a CPU torch.profiler sees no device work"}
        from cutimeline.comparison.runner import compare
        cmp = compare(step, steps=3, warmup=1, device=dev)
    ours, theirs = _compiled_rows(cmp.ours), cmp.theirs
    tg = theirs.gpu
    triton = np.array([str(n).startswith("triton") for n in theirs.decode(tg["name"])], bool)
    triton_ns = int((tg.end_ns[triton] - tg.begin_ns[triton]).sum())
    return {"compile_s": compile_s, "cutimeline": ours,
            "profiler": {"triton_kernels": int(triton.sum()), "triton_ns": triton_ns,
                         "gpu_busy": ctl.analyze(theirs).overall["busy_frac"]},
            "compiled_over_triton": (ours["compiled_ns"] / triton_ns
                                     if triton_ns and ours["compiled_ns"] else None),
            "overhead": cmp.overhead}


def _gpu_text(cmp) -> str:
    g = cmp.gpu.summary() if cmp.gpu is not None else None
    if g is None:
        return f"GPU time not compared: {cmp.meta.get('gpu_not_compared', '?')}"
    return (f"{g['single_kernel_ops']} one-kernel ops: median |err| "
            f"{100 * g['median_abs_error']:.1f} %, {100 * g['within_tolerance']:.0f} % within "
            f"5 %; op match {100 * cmp.match.fraction:.1f} %")


def _plot(part, draw, name: str) -> None:
    """Draw a figure; a plotting failure is noted, not fatal to the part."""
    try:
        draw()
    except Exception as exc:  # the numbers matter more than the picture
        part.put(f"{name}_error", f"{type(exc).__name__}: {exc}")


# -- e: the demo -------------------------------------------------------------------------------

def part_e(part) -> str:
    from cutimeline.demo import run_demo
    res = run_demo(device="sim" if part.dry else "cuda", steps=3 if part.dry else 8)
    tl = res.timeline
    tl.save(part.out / "e_demo.ctl")
    info = {"device": res.device, "simulated": res.simulated, "ops": len(tl.ops),
            "gpu_rows": len(tl.gpu), "steps": int(len(tl.step_numbers())),
            "losses": res.losses, "clock": _clock(tl) if len(tl.clocks) else None,
            "event_pool": _event_pool(tl)}
    part.put("demo", info)
    report = ctl.analyze(tl)
    print(report.summary())
    part.put("summary", report.summary())
    png = part.out / "e_demo_timeline.png"
    ctl.plot(tl, png)
    _plot(part, lambda: ctl.plot(tl, part.out / "e_demo_step2.png", window=2), "step_plot")
    part.put("png", png.name)
    return (("SIMULATED " if res.simulated else "") +
            f"{info['steps']} steps, {info['ops']} ops, {info['gpu_rows']} gpu rows on "
            f"{res.device}; {png.name}")


# -- g: the GPU-side what-if edits against runs with the fix, through record_script ------------

GPU_SIDE_SCRIPT = '''"""A GPU-bound training loop written for CUDA; its flags make one fix."""
import sys
import torch
from torch import nn
args = sys.argv[1:]
torch.set_float32_matmul_precision("high" if "--tf32" in args else "highest")
width, batch = (512, 1024) if "--small" in args else (2048, 8192)
torch.manual_seed(0)
blocks = [nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                        nn.Linear(4 * width, width)) for _ in range(4)]
model = nn.Sequential(*blocks).cuda()
opt = torch.optim.AdamW(model.parameters(), fused=True if "--fused" in args else None)
x = torch.randn(batch, width, device="cuda")
for step in range(8):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled="--bf16" in args):
        loss = model(x).float().square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
'''

#: (edit, the flags of the run with it, the flags of the run it is predicted from)
GPU_SIDE_PAIRS = (("tf32", ["--tf32"], []), ("bf16", ["--bf16"], []),
                  ("fused_optimizer", ["--tf32", "--fused"], ["--tf32"]))


def _steady_ms(rep) -> float:
    d = rep.steps["predicted_ns"] if rep.compensation is not None else rep.steps["duration_ns"]
    return float(np.median(d[1:] if len(d) >= 3 else d)) / 1e6


def part_g(part) -> str:
    """The GPU-side edits (tf32, bf16, fused_optimizer) predicted from a
    recording of ``GPU_SIDE_SCRIPT`` and set against the same script run
    with the fix, every run through ``ctl.record_script`` (what ``cutimeline
    record`` runs): on a GPU its CUDA code as written; in a dry run on a
    SimGPU that CUDA is mapped to."""
    from cutimeline.analysis.replay.predictions import steady
    script = part.work / "g_gpu_side.py"
    script.write_text(GPU_SIDE_SCRIPT)
    small: list = []  # GPU-bound at full size on a SimGPU too (meta tensors cost no memory)
    device = "sim" if part.dry else "cuda"
    reps: dict = {}

    def recorded(flags):
        key = " ".join(flags) or "fp32"
        if key not in reps:
            tl = ctl.record_script(script, [*flags, *small], device=device, skip=1, steps=5)
            reps[key] = ctl.analyze(tl)
        return reps[key]

    rows = {}
    for edit, fixed, base in GPU_SIDE_PAIRS:
        if part.left() < 10:
            break
        rep = recorded(base)
        pred = next((p for p in rep.what_if() if p.edit.name == edit), None)
        after = _steady_ms(recorded(fixed))
        got = float(np.median(steady(pred.steps)["predicted_ns"])) / 1e6 if pred else None
        rows[edit] = {"before_ms": _steady_ms(rep), "predicted_ms": got, "after_ms": after,
                      "error": None if got is None else got / after - 1}
        part.put("pairs", rows)
    first = next(iter(reps.values()), None)
    if first is not None:
        part.put("verdict", first.to_dict()["verdict"]["text"])
    errs = [abs(r["error"]) for r in rows.values() if r["error"] is not None]
    return (f"{len(rows)} pairs, worst |error| {max(errs):.1%}" if errs else
            "no pair measured") + (" (SIMULATED)" if part.dry else "")


# -- v: the verdict scenarios ------------------------------------------------------------------

def part_v(part) -> str:
    """benchmarks/verdicts/bench_verdicts.py --fast --repeats 1, when the checkout has
    it: its exit code, its table, its last line ("8/8 right in 9 s")."""
    script = ROOT / "benchmarks" / "verdicts" / "bench_verdicts.py"
    if not script.exists():
        raise Skip(f"{script.relative_to(ROOT)} is not in this checkout")
    cmd = [sys.executable, str(script), "--fast", "--repeats", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=max(part.left() - 2, 1))
    print(p.stdout + p.stderr)
    lines = [x for x in p.stdout.splitlines() if x.strip()]
    last = next((x for x in reversed(lines) if " right in " in x), None)
    part.put("command", " ".join(["python", "benchmarks/verdicts/bench_verdicts.py", *cmd[2:]]))
    part.put("exit_code", p.returncode)
    part.put("right", last.split()[0] if last else None)
    part.put("table", p.stdout)
    part.put("stderr_tail", p.stderr[-2000:])
    if p.returncode != 0:
        raise RuntimeError(f"bench_verdicts exit code {p.returncode}: {last or 'no result line'}")
    return f"SIMULATED (SimGPU h100) {last}"


# -- a: the tests/gpu suite ------------------------------------------------------------------

class _Tally:
    """A pytest plugin that counts outcomes and writes them after every test."""

    def __init__(self, part):
        self.part = part
        self.counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        self.failures: list[str] = []

    def pytest_collection_finish(self, session):
        self.part.put("collected", len(session.items))

    def pytest_collectreport(self, report):  # a module skipped (no CuPy) or broken
        if report.outcome != "passed":
            self._count("skipped" if report.skipped else "errors", report)

    def pytest_runtest_logstart(self, nodeid, location):
        self.part.put("running", nodeid)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self._count(report.outcome if report.when == "call" or report.skipped
                        else "errors", report)

    def _count(self, kind: str, report) -> None:
        self.counts[kind] += 1
        if report.failed:
            self.failures.append(f"{report.nodeid}: {report.longreprtext[-400:]}")
        self.part.put("counts", self.counts)
        self.part.put("failures", self.failures)


def part_a(part) -> str:
    import pytest
    tally = _Tally(part)
    rc = pytest.main(["-q", "-rfEs", "-p", "no:cacheprovider", str(ROOT / "tests" / "gpu")],
                     plugins=[tally])
    part.put("pytest_exit_code", int(rc))
    part.put("running", None)
    c = tally.counts
    text = f"{c['passed']} passed, {c['failed']} failed, {c['errors']} errors, " \
           f"{c['skipped']} skipped"
    if int(rc) not in (0, 5) or c["failed"] or c["errors"]:
        raise RuntimeError(text)
    return text
