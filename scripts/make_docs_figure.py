"""Regenerate the README's figures from the current code.

* ``docs/timeline.png``: the demo's training loop (``cutimeline.demo.run_demo``)
  recorded on a simulated H100 and drawn by ``ctl.plot`` — the picture
  ``cutimeline demo --device sim`` writes, limited to a few steps past the
  warm-up: the verdict strip, the lanes, the op names in the wide bars.
* ``docs/whatif.png``: the same recording over its replay under the fix
  the replay gains most from (``ctl.plot(tl, what_if=True)``).
* ``docs/nccl_overview.png``: the long shared torch.profiler trace
  ``nccl_data.json.gz`` (A100, 3 training steps, 14k ops) loaded by
  ``ctl.load`` and drawn whole as the overview of a dense window.

    python scripts/make_docs_figure.py [--out docs/timeline.png] [--steps 6] [--window 1-4]
                                       [--whatif-out docs/whatif.png]
                                       [--trace PATH] [--trace-out docs/nccl_overview.png]
"""

from __future__ import annotations

import argparse
import os
import sys

import cutimeline as ctl
from cutimeline.demo import run_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "..", "shared", "traces", "kineto", "nccl_parser_config",
                     "nccl_data.json.gz")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join("docs", "timeline.png"))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--window", default="1-4",
                   help="steps first-last to draw (default 1-4: past the "
                        "warm-up step 0), or 'all'")
    p.add_argument("--trace", default=TRACE,
                   help="the long real trace for the overview figure ('' to skip)")
    p.add_argument("--trace-out", default=os.path.join("docs", "nccl_overview.png"))
    p.add_argument("--whatif-out", default=os.path.join("docs", "whatif.png"))
    a = p.parse_args(argv)
    tl = run_demo(steps=a.steps, device="sim").timeline
    window = None
    if a.window and a.window != "all":
        first, last = (int(v) for v in a.window.split("-"))
        window = (first, last)
    ctl.plot(tl, a.out, window=window)
    print(tl)
    print(ctl.analyze(tl).summary())
    print(f"wrote {a.out}")
    ctl.plot(tl, a.whatif_out, what_if=True)
    print(f"wrote {a.whatif_out}")
    if a.trace:
        if not os.path.exists(a.trace):
            print(f"no {a.trace}: {a.trace_out} not regenerated", file=sys.stderr)
            return 1
        trace = ctl.load(a.trace)
        # forced: at another width the trace's 3,774 GPU rows could fall
        # just under the density threshold, and the README shows the overview
        ctl.plot(trace, a.trace_out, overview=True)
        print(trace)
        print(f"wrote {a.trace_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
