"""Timeline._repr_png_: the picture rendering/notebook.py registers on
Timeline, and the stand-in ``import cutimeline`` sets before it loads."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from cutimeline.alignment.aligner import align
from cutimeline.devices.sim import synthetic_events
from cutimeline.rendering import notebook
from cutimeline.timeline.timeline import Timeline

from figurepixels import known_gaps


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def test_timeline_png_is_a_bounded_png():
    tl = known_gaps()
    data = tl._repr_png_()
    w, h = png_size(data)
    assert 0 < w <= notebook.MAX_PX[0] and 0 < h <= notebook.MAX_PX[1]


def test_timeline_png_shrinks_to_the_bound(monkeypatch):
    monkeypatch.setattr(notebook, "MAX_PX", (600, 300))
    w, h = png_size(known_gaps()._repr_png_())
    assert w <= 600 and h <= 300


def test_a_timeline_that_cannot_be_drawn_has_no_png():
    unaligned = synthetic_events(100)
    assert unaligned._repr_png_() is None
    assert png_size(align(unaligned)._repr_png_())[0] > 0


def test_the_timeline_png_is_what_rendering_registered(monkeypatch):
    assert Timeline.notebook_png is notebook.timeline_png
    monkeypatch.setattr(Timeline, "notebook_png", lambda t: b"T")
    assert known_gaps()._repr_png_() == b"T"
    monkeypatch.setattr(Timeline, "notebook_png", None)   # nothing registered: text
    assert known_gaps()._repr_png_() is None


def test_import_cutimeline_alone_gives_timelines_their_picture():
    # a notebook that did only ``import cutimeline``: rendering loads on
    # the first picture asked for, and registers its own in the stand-in's place
    code = ("import sys, cutimeline as ctl; from figurepixels import known_gaps; "
            "tl = known_gaps(); assert 'cutimeline.rendering' not in sys.modules; "
            "png = tl._repr_png_(); assert png[:4] == b'\\x89PNG', png; "
            "from cutimeline.rendering import notebook; "
            "assert ctl.Timeline.notebook_png is notebook.timeline_png")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1],
                   env={**os.environ, "MPLBACKEND": "Agg"})
