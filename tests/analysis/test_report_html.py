"""Report._repr_html_ (analysis/notebook.py): the verdict line over the
step table, every string escaped."""

from __future__ import annotations

from cutimeline.analysis import notebook
from cutimeline.analysis.analyzer import analyze

from figurepixels import known_gaps


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


def test_the_report_html_comes_from_the_notebook_module(monkeypatch):
    monkeypatch.setattr("cutimeline.analysis.report.report_html", lambda rep: "R")
    assert analyze(known_gaps())._repr_html_() == "R"
