"""verdicts/offenders.py: what each verdict names as its offenders."""

import re

import torch

import cutimeline as ctl
from cutimeline.analysis.verdicts.offenders import offenders


def test_the_recorders_pings_are_not_among_a_steps_syncs():
    """A sync-bound step's count and top kinds are the program's syncs: the
    recorder's calibration pings (sync kind "ping") are its own."""
    gpu = ctl.SimGPU("h100")
    w = torch.randn(2048, 2048, device="meta")
    with ctl.record(device=gpu) as rec:
        for _ in range(4):
            x = torch.randn(2048, 2048, device="meta")
            for _ in range(8):
                x = x @ w
                gpu.synchronize()
            rec.step()
    tl = rec.timeline
    assert (tl.decode(tl.syncs.kind) == "ping").any()  # they are recorded
    # the whole recording read as sync-bound: its start and stop pings inside
    off = offenders(tl, None, tl.start_ns, tl.end_ns + 1, "sync-bound")
    assert [n for n, _ in off["ops"]] == ["synchronize"] and off["count"] == 4 * 8
    rep = ctl.analyze(tl)
    said = [r["advice"] for r in rep.ranges() if r["verdict"] == "sync-bound"]
    assert all(re.search(r": \d+ host syncs, top synchronize;", t) for t in said), said
    assert not re.search(r"\bping\b", rep.summary())
