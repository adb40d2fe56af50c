"""Report._repr_html_ and Timeline._repr_png_ (rendering/notebook.py)."""

from __future__ import annotations

import struct

import pytest

from cutimeline.alignment.aligner import align
from cutimeline.analysis.analyzer import analyze
from cutimeline.devices.sim import synthetic_events
from cutimeline.rendering import notebook

from figurepixels import known_gaps


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def test_report_html_has_the_verdict_line_and_one_row_per_step():
    rep = analyze(known_gaps())
    page = rep._repr_html_()
    first = rep.summary().splitlines()[0]
    assert "Verdict: host-bound" in page and first.split(" (")[0] in page
    assert page.count("<tr>") == 1 + len(rep.steps)  # the header and the steps
    assert "mixed" in page and "sync-bound" in page
    assert "no host reads of GPU values inside the step −37%" in page  # step 1's fix
    assert "60 ms" in page and "72%" in page
    # every string escaped: the repr's angle brackets arrive as entities
    assert "&lt;Report" in page and "<Report" not in page


def test_long_step_tables_are_cut_in_the_middle(monkeypatch):
    monkeypatch.setattr(notebook, "MAX_ROWS", 1)
    page = analyze(known_gaps())._repr_html_()
    assert "more steps" in page


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


@pytest.mark.parametrize("obj", ["report", "timeline"])
def test_reprs_come_from_the_notebook_module(obj, monkeypatch):
    tl = known_gaps()
    monkeypatch.setattr(notebook, "report_html", lambda rep: "R")
    monkeypatch.setattr(notebook, "timeline_png", lambda t: b"T")
    assert (analyze(tl)._repr_html_() if obj == "report" else tl._repr_png_()) == \
        ("R" if obj == "report" else b"T")
