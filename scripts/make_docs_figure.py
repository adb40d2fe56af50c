"""Regenerate docs/timeline.png: the demo's training loop
(``cutimeline.demo.run_demo``) recorded on a simulated H100 and drawn by
``ctl.plot`` — the picture ``cutimeline demo --device sim`` writes, limited
to a few steps past the warm-up.

    python scripts/make_docs_figure.py [--out docs/timeline.png] [--steps 6] [--window 1-4]
"""

from __future__ import annotations

import argparse
import os
import sys

import cutimeline as ctl
from cutimeline.demo import run_demo


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join("docs", "timeline.png"))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--window", default="1-4",
                   help="steps first-last to draw (default 1-4: past the "
                        "warm-up step 0), or 'all'")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
