"""Saving and loading ``.ctl`` files: format 2's writer ("before", kept
below as it was) against today's (format 3), side by side in one run.

    python benchmarks/bench_io.py [--sizes 1e5 1e6] [--reps 5] [--streams 4]
                                  [--demo DIR]

The Timelines are ``bench_analyze.synthetic(n, streams=...)`` (one gpu row
per op; no events) and the demo's recording (``python -m cutimeline demo
--out DIR``, run here unless ``--demo`` names a folder that has
``demo.ctl``). Each repetition saves with both writers and loads both files
(``ctl.load`` reads either format), in turn, after one warm-up round; the
times are medians. "B/op" is the file's size over the Timeline's ops. Each
file is checked to load back equal to the Timeline it was written from.
Goal (10^6 ops): save ≤ 0.3 s at ≤ 8 B/op, load no slower than before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import cutimeline as ctl
from cutimeline.timeline.fileformat import _NPZ_ENCODING
from cutimeline.timeline.schema import SCHEMA
from cutimeline.timeline.timeline import Timeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_analyze import synthetic  # noqa: E402

# -- before: format 2's writer, as cutimeline/timeline/fileformat.py had it --
_ENCODING_2 = _NPZ_ENCODING  # frozen there: files of version 2 are read with it


def _encode_2(table: str, col: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    a = cols[col]
    enc = _ENCODING_2.get((table, col))
    if enc is None or not len(a):
        return a
    if enc[0] == "delta":
        out = np.empty_like(a)
        out[0] = a[0]
        np.subtract(a[1:], a[:-1], out=out[1:])
        return out
    return a - cols[enc[1]]


def save_before(tl: Timeline, path: str) -> None:
    """Format 2: one np.savez_compressed archive (deflate level 6)."""
    meta_json = json.dumps({"format": "cutimeline", "format_version": 2,
                            "meta": tl.meta}, allow_nan=False)
    members: dict[str, np.ndarray] = {}
    for name in SCHEMA:
        cols = tl.table(name).columns
        for col in cols:
            members[f"{name}.{col}"] = _encode_2(name, col, cols)
    encoded = [s.encode("utf-8", "surrogatepass") for s in tl.strings]
    members["strings.blob"] = np.frombuffer(b"".join(encoded), np.uint8)
    members["strings.offsets"] = np.concatenate(
        [[0], np.cumsum([len(b) for b in encoded], dtype=np.int64)]).astype(np.int64)
    members["meta.json"] = np.frombuffer(meta_json.encode(), np.uint8)
    fd, tmp = tempfile.mkstemp(prefix=".ctl-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **members)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save_after(tl: Timeline, path: str) -> None:
    tl.save(path)


# -- the run -------------------------------------------------------------------

def same(a: Timeline, b: Timeline) -> bool:
    return a.strings == b.strings and a.meta == b.meta and all(
        np.array_equal(a.table(n)[c], b.table(n)[c]) and a.table(n)[c].dtype == b.table(n)[c].dtype
        for n in SCHEMA for c, _ in SCHEMA[n])


def measure(tl: Timeline, folder: str, reps: int) -> dict[str, dict[str, float]]:
    writers = {"before": save_before, "after": save_after}
    times: dict[str, dict[str, list[float]]] = {w: {"save": [], "load": []} for w in writers}
    for rep in range(reps + 1):  # round 0 warms up
        for w, save in writers.items():
            path = os.path.join(folder, f"{w}.ctl")
            t0 = time.perf_counter()
            save(tl, path)
            t1 = time.perf_counter()
            back = ctl.load(path)
            t2 = time.perf_counter()
            if rep:
                times[w]["save"].append(t1 - t0)
                times[w]["load"].append(t2 - t1)
            elif not same(tl, back):
                raise SystemExit(f"the {w} file did not load back equal")
            del back
    return {w: {"save": statistics.median(t["save"]), "load": statistics.median(t["load"]),
                "bytes": os.path.getsize(os.path.join(folder, f"{w}.ctl"))}
            for w, t in times.items()}


def demo_timeline(folder: str | None) -> Timeline:
    if folder is None or not os.path.exists(os.path.join(folder, "demo.ctl")):
        folder = folder or tempfile.mkdtemp(prefix="bench-io-demo-")
        subprocess.run([sys.executable, "-m", "cutimeline", "demo", "--out", folder],
                       check=True, stdout=subprocess.DEVNULL)
    return ctl.load(os.path.join(folder, "demo.ctl"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--demo", metavar="DIR", help="a folder with the demo's demo.ctl")
    args = ap.parse_args()
    label = f"synthetic, {args.streams} stream{'s' * (args.streams != 1)}"
    cases = [(label, synthetic(int(n), streams=args.streams)) for n in args.sizes]
    cases.append(("demo", demo_timeline(args.demo)))
    print("| Timeline | ops | writer | save s | load s | file | B/op |")
    print("|---|---:|---|---:|---:|---:|---:|")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        for label, tl in cases:
            n = len(tl.ops)
            r = measure(tl, folder, args.reps)
            for w in ("before", "after"):
                m = r[w]
                print(f"| {label} | {n:,} | {w} | {m['save']:.3f} | {m['load']:.3f} "
                      f"| {m['bytes'] / 1e6:.3f} MB | {m['bytes'] / n:.2f} |")
            b, a = r["before"], r["after"]
            ratios.append((label, n, b["save"] / a["save"], b["load"] / a["load"],
                           b["bytes"] / a["bytes"]))
    print("\n| Timeline | ops | save: before ÷ after | load: before ÷ after | size: before ÷ after |")
    print("|---|---:|---:|---:|---:|")
    for label, n, s, lo, b in ratios:
        print(f"| {label} | {n:,} | {s:.1f}× | {lo:.2f}× | {b:.2f}× |")


if __name__ == "__main__":
    main()
