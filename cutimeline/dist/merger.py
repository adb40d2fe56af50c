"""``ctl.merge``: the ranks' Timelines (``rank-<r>.ctl``, see ``recording/ranks.py``) as one.

Each rank's host clock is related to the reference rank's (its epoch, then
the collectives, ``rankclock.fit_rank_clocks``), and its tables are
renumbered and concatenated; see ``merge``.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Callable, Iterable

import numpy as np

from ..alignment.aligner import align
from ..errors import CutimelineError
from ..text import need_callable, need_flag
from ..timeline.invariants import check
from ..timeline.ranks import HOST_COLUMNS, apply
from ..timeline.schema import NONE, REFERENCES, SCHEMA, STRING_COLUMNS
from ..timeline.table import Strings
from ..timeline.timeline import Timeline, load
from .rankclock import fit_rank_clocks
from .straggler import slowest

__all__ = ["merge", "APART_NS"]

#: ranks of one run record at the same time: wall-clock spans further apart
#: than this (hosts' clocks agree to well under a second under NTP) are
#: recordings of different runs
APART_NS = 60 * 10 ** 9


def merge(dir_or_paths: str | os.PathLike | Iterable[Any], *,
          progress: Callable[[str, float], None] | None = None,
          force: bool = False) -> Timeline:
    """One Timeline of all ranks, on the host clock of the lowest rank.

    ``dir_or_paths``: a folder of ``rank-<r>.ctl`` files (what
    ``record(out_dir=...)`` writes), or a list of ``.ctl`` paths or
    Timelines (a Timeline without ``meta["rank"]`` takes its list position).

    Clocks: each rank's host clock is first related to the reference
    rank's through the wall-clock epochs its file stores, then refined by
    the collectives both saw (``rankclock.fit_rank_clocks``): the k-th
    collective of a group cannot complete on any rank before the last rank
    joined it. Those bounds, fitted with the aligner's convex-hull method
    (``clockfit.fit_clock``), give a band of feasible clock lines; the epoch
    line is kept when it satisfies every bound ("epoch+collectives"), else
    the band's middle ("collectives"); slope 1 is preferred where the
    bounds allow it. A rank with no two-sided bounds is related by its
    epoch alone ("epoch"). ``meta["ranks"][i]["clock"]`` gives the line
    (``t_merged = offset_ns + slope·(t_rank − ref_ns)``; ``shift_ns`` =
    t_merged − t_rank at ref_ns), ``bound_ns`` (no point of the band lies
    farther from the line over the span of its collectives; None for
    "epoch") and ``method``.

    Layout: tables are concatenated rank by rank (rank-major, each rank's
    rows in their order). Threads and devices are renumbered so each rank
    has its own: ``meta["thread_rank"]``/``meta["device_rank"]`` give the
    rank of each thread id/device index, ``meta["threads"]`` names them
    "rank r · name" and ``meta["devices"]`` lists each with its rank and
    local index. ``ops.seq`` is made unique by adding a per-rank base
    (``meta["ranks"][i]["seq_base"]``); the collectives table's rows follow
    their ops (a row's rank is its op's thread's) and its groups index the
    merged ``meta["groups"]``. Host times are mapped onto
    the reference clock (the rank files keep the raw ones); gpu times
    follow their rank's host clock. ``meta["ranks"]`` lists per rank its
    file, host, error (a rank whose code raised), partial (why a rank's
    recording was cut short: "SIGTERM at step 7"), truncated (cut at
    max_ops, by ``truncated_by``), thread and device ids.

    Completeness: ``meta["world_size"]`` is the largest world size a rank
    names; ``missing_ranks`` those below it without a file,
    ``partial_ranks`` and ``errors`` those marked partial or errored. And
    ``meta["stragglers"]``: who held the others up, per step and over the
    run (``straggler.slowest``). ``ctl.analyze(merged).summary()`` shows
    all of it (``analysis/ranks_report.py``).

    ``progress``: called as ``progress(stage, fraction)`` (fraction of the
    work done, 0 to 1) as the ranks load and the merge goes on (the
    command's progress bar).

    Only ranks of one run merge: recordings that name different run ids
    (``meta["run_id"]``, torchrun's) or world sizes, or whose wall-clock
    spans lie more than ``APART_NS`` apart, are refused with the reason;
    ``force=True`` merges them anyway and says so in ``Timeline.warnings``.
    Each rank's own warnings carry over, prefixed "rank r: ".
    """
    need_callable(progress, "progress", "merge")
    need_flag(force, "force", "merge")
    say = progress or (lambda stage, fraction: None)
    parts = _inputs(dir_or_paths, say)
    apart = _not_one_run(parts)
    if apart and not force:
        raise CutimelineError(f"merge: these recordings are not the ranks of one run: "
                              f"{'; '.join(apart)}. Give the rank files of one run, or "
                              f"merge them anyway with force=True (cutimeline merge "
                              f"--force).")
    carried = [f"rank {r}: {w}" for r, t, _ in parts for w in t.warnings]
    say("clocks", 0.7)
    clocks = fit_rank_clocks([(r, tl) for r, tl, _ in parts])
    say("tables", 0.8)
    tl = _concat(parts, clocks)
    say("stragglers", 0.9)
    tl.meta["stragglers"] = slowest(tl)  # for analyze's summary, which cannot import dist
    if apart:
        carried.append(f"Merged with force=True although these recordings are not the "
                       f"ranks of one run: {'; '.join(apart)}.")
    if carried:
        tl.meta["warnings"] = carried
    say("done", 1.0)
    return tl


def _inputs(src: Any, say: Callable[[str, float], None]
            ) -> list[tuple[int, Timeline, str | None]]:
    if isinstance(src, (str, os.PathLike)):
        folder = os.fspath(src)
        if not os.path.isdir(folder):
            raise CutimelineError(f"merge({folder!r}): there is no such folder; give "
                                  f"the out_dir of ctl.record(out_dir=...) or a list "
                                  f"of .ctl files.")
        items: list[Any] = sorted(glob.glob(os.path.join(folder, "rank-*.ctl")),
                                  key=_rank_in_name)
        if not items:
            raise CutimelineError(f"merge({folder!r}): the folder holds no rank-<r>.ctl "
                                  f"files; record with ctl.record(out_dir={folder!r}) "
                                  f"on every rank first.")
    else:
        try:
            items = list(src)
        except TypeError:
            raise CutimelineError(f"merge needs a folder or a list of .ctl paths or "
                                  f"Timelines, not {type(src).__name__}.") from None
        if not items:
            raise CutimelineError("merge was given an empty list; give at least one "
                                  ".ctl path or Timeline.")
    parts, seen = [], {}
    for i, item in enumerate(items):
        if isinstance(item, Timeline):
            tl, label = item, None
        elif isinstance(item, (str, os.PathLike)):
            tl, label = load(item), os.fspath(item)
        else:
            raise CutimelineError(f"merge's item {i} is a {type(item).__name__}; give "
                                  f".ctl paths or Timelines.")
        rank = tl.meta.get("rank", i)
        if not isinstance(rank, int) or rank < 0:
            raise CutimelineError(f"{label or f'Timeline {i}'} names rank {rank!r}; a "
                                  f"rank is a whole number ≥ 0.")
        if label is None:   # a file was checked as it loaded
            check({n: tl.table(n) for n in SCHEMA}, tl.strings, tl.meta,
                  f"merge's Timeline {i} is not one cutimeline can merge")
        if rank in seen:
            raise CutimelineError(f"Rank {rank} appears twice ({seen[rank]} and "
                                  f"{label or f'Timeline {i}'}); give each rank once.")
        seen[rank] = label or f"Timeline {i}"
        if len(tl.gpu) and not tl.aligned:
            try:
                tl = align(tl)
            except CutimelineError as exc:
                raise CutimelineError(f"Rank {rank} ({seen[rank]}) has gpu rows whose "
                                      f"clock cannot be aligned ({exc}); merge needs "
                                      f"every rank on its host clock.") from None
        parts.append((rank, tl, label))
        say(f"rank {rank}", 0.7 * (i + 1) / len(items))  # loading: most of the work
    return sorted(parts, key=lambda p: p[0])


def _not_one_run(parts: list[tuple[int, Timeline, str | None]]) -> list[str]:
    """Why ``parts`` are not the ranks of one run: different run ids or
    world sizes, or wall-clock spans apart; [] when nothing says so."""
    why = []
    for key, what in (("run_id", "run ids"), ("world_size", "world sizes")):
        named = {r: tl.meta[key] for r, tl, _ in parts
                 if isinstance(tl.meta.get(key), (str, int)) and not isinstance(
                     tl.meta.get(key), bool)}
        if len(set(named.values())) > 1:
            why.append(f"they name different {what} (" + ", ".join(
                f"rank {r}: {v!r}" for r, v in sorted(named.items())[:4]) + ")")
    spans = []
    for r, tl, _ in parts:
        off = _wall_offset(tl.meta)
        if off is not None and (len(tl.ops) or len(tl.spans) or len(tl.gpu)):
            spans.append((tl.start_ns + off, tl.end_ns + off, r))
    if len(spans) > 1:
        first_end = min(spans, key=lambda x: x[1])
        last_begin = max(spans, key=lambda x: x[0])
        if last_begin[0] - first_end[1] > APART_NS:
            why.append(f"they were recorded at different times (rank {first_end[2]}'s "
                       f"recording ended {(last_begin[0] - first_end[1]) / 1e9:,.0f} s "
                       f"before rank {last_begin[2]}'s began, by their wall clocks)")
    return why


def _wall_offset(meta: dict) -> int | None:
    """wall-clock − host-clock ns of a rank's file, if it stores them."""
    e, h = meta.get("start_epoch_ns"), meta.get("start_host_ns")
    if isinstance(e, int) and isinstance(h, int):
        return e - h
    off = meta.get("epoch_offset_ns")
    return off if isinstance(off, int) and off != 0 else None


def _rank_in_name(path: str) -> int:
    m = re.search(r"rank-(\d+)\.ctl$", path)
    return int(m.group(1)) if m else -1


def _concat(parts: list[tuple[int, Timeline, str | None]], clocks: dict[int, dict]) -> Timeline:
    """The merged Timeline (see ``merge``). Each rank's tables are released
    once copied into the preallocated columns."""
    strings = Strings()
    out = {name: {c: np.empty(sum(len(tl.table(name)) for _, tl, _ in parts), dt)
                  for c, dt in SCHEMA[name]} for name in SCHEMA}
    at = dict.fromkeys(SCHEMA, 0)
    thread_rank, thread_names, device_rank, devices, ranks = [], [], [], [], []
    groups: dict[tuple, int] = {}
    seq_base = 0
    for i, (rank, tl, label) in enumerate(parts):
        meta, clock = tl.meta, clocks[rank]
        lut = np.array([strings.intern(s) for s in tl.strings] + [NONE], np.int32)
        t_base, names = len(thread_rank), meta.get("threads") or []
        for t in range(max([len(names)] + [int(tl.table(n).thread.max()) + 1
                                           for n in ("ops", "spans", "syncs")
                                           if len(tl.table(n))])):
            n = names[t] if t < len(names) else f"thread {t}"
            thread_names.append(f"rank {rank} · {n.get('name', '') if isinstance(n, dict) else n}")
            thread_rank.append(rank)
        local = _local_devices(tl)
        dev_lut = np.full(int(local.max(initial=-1)) + 2, NONE, np.int16)  # [-1] is NONE
        described = {d.get("index"): d for d in meta.get("devices") or [] if isinstance(d, dict)}
        for d in local:
            dev_lut[d] = len(device_rank)
            devices.append({**described.get(int(d), {}), "index": len(device_rank),
                            "rank": rank, "local_index": int(d)})
            device_rank.append(rank)
        f, shift, slope = _clock_map(clock)
        # the rank's process groups in the merged meta["groups"] ([-1]: NONE)
        g_lut = np.array([groups.setdefault((g["name"], tuple(g["ranks"])), len(groups))
                          for g in meta.get("groups") or []] + [NONE], np.int32)
        bases = dict(at)
        for name in SCHEMA:
            t = tl.table(name)
            for col, _ in SCHEMA[name]:
                v = t[col]
                if (name, col) in STRING_COLUMNS:
                    v = lut[v]
                elif (name, col) in REFERENCES:
                    v = np.where(v == NONE, NONE, v + bases[REFERENCES[name, col]])
                elif col == "thread":  # syncs.thread may be NONE (unknown)
                    v = np.where(v == NONE, NONE, v + t_base)
                elif col in ("device", "seq"):
                    v = dev_lut[v] if col == "device" else v + seq_base
                elif (name, col) == ("collectives", "group"):
                    v = g_lut[np.where((v >= 0) & (v < len(g_lut) - 1), v, NONE)]
                elif col in HOST_COLUMNS.get(name, ()):
                    v = apply(f, v)
                elif name == "clocks":  # host = offset + slope·raw composes with f
                    v = v * slope if col != "ping_offset_ns" else apply(lambda x: x + shift, v)
                out[name][col][at[name]:at[name] + len(t)] = v
            at[name] += len(t)
        ranks.append({
            "rank": rank, "file": label, "host": meta.get("host"), "pid": meta.get("pid"),
            "world_size": meta.get("world_size"), "error": meta.get("error"),
            "partial": meta.get("partial"), "truncated": meta.get("truncated") is True,
            **{k: meta.get(k) for k in ("truncated_by", "max_ops") if k in meta},
            "threads": list(range(t_base, len(thread_rank))),
            "devices": [int(x) for x in dev_lut[local]], "seq_base": seq_base,
            "ops": len(tl.ops), "clock": clock,
            **{k: meta.get(k) for k in ("overhead_ns_per_op", "overhead_ns_per_launch",
                                        "simulated", "device_name", "test_clock_skew_ns")}})
        seq_base += int(tl.ops.seq.max()) + 1 if len(tl.ops) else 0
        parts[i] = (rank, None, label)  # release this rank's tables
    meta = _merged_meta(ranks, clocks, devices, groups)
    meta.update(threads=thread_names, thread_rank=thread_rank, device_rank=device_rank)
    return Timeline(out, strings, meta)


def _local_devices(tl: Timeline) -> np.ndarray:
    """Device indices a rank's Timeline uses (ops on other GPUs included)."""
    found = [np.unique(tl.table(t).device) for t in ("ops", "gpu", "syncs", "events", "clocks")]
    found.append(np.array([d["index"] for d in tl.meta.get("devices") or []
                           if isinstance(d, dict) and isinstance(d.get("index"), int)], np.int64))
    allv = np.unique(np.concatenate(found).astype(np.int64))
    return allv[allv >= 0]


def _clock_map(clock: dict) -> tuple[Any, int, float]:
    """(f, f(t) − t at the line's reference time, slope) of a rank's clock."""
    off, ref, slope = int(clock["offset_ns"]), int(clock["ref_ns"]), float(clock["slope"])
    if slope == 1.0:
        return (lambda t: t + (off - ref)), off - ref, 1.0
    return (lambda t: off + np.rint((t - ref) * slope).astype(np.int64)), off - ref, slope


def _merged_meta(ranks: list[dict], clocks: dict[int, dict], devices: list[dict],
                 groups: dict[tuple, int]) -> dict[str, Any]:
    """Meta of the merged Timeline; the reference rank's clock pair relates
    it to the wall clock."""
    ref = ranks[0]
    # a world size no rank names sensibly (not a whole number up to 2^20)
    # is not believed: it would list millions of missing ranks
    world = max([w for w in (r["world_size"] for r in ranks) if isinstance(w, int)
                 and not isinstance(w, bool) and 0 < w <= 2 ** 20]
                + [len(ranks), max(r["rank"] for r in ranks) + 1])
    present = {r["rank"] for r in ranks}
    meta: dict[str, Any] = {
        "source": "merge", "aligned": True, "reference_rank": ref["rank"],
        "world_size": world, "ranks": ranks, "devices": devices,
        "groups": [{"name": n, "ranks": list(rs)} for n, rs in groups],
        "truncated": any(r["truncated"] for r in ranks),
        "start_epoch_ns": clocks[ref["rank"]].get("epoch_ns"),
        "start_host_ns": clocks[ref["rank"]].get("host_ns"),
        "host": ref["host"], "hosts": sorted({str(r["host"]) for r in ranks}),
        "missing_ranks": [r for r in range(world) if r not in present],
        "simulated": any(r["simulated"] for r in ranks), "device_name": ref["device_name"]}
    # overhead replay (compensation.py) models one host's op stream; the
    # ranks' own costs stay in meta["ranks"]
    meta["overhead_ns_per_op"] = meta["overhead_ns_per_launch"] = None
    if any(r["error"] for r in ranks):
        meta["errors"] = [r["rank"] for r in ranks if r["error"]]
    meta["partial_ranks"] = [r["rank"] for r in ranks if r["partial"]]
    return meta
