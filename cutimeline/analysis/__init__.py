"""Analysis: pure functions Timeline -> metrics, gathered in ``analyze()``'s
``Report``. Nothing is drawn and the Timeline is not changed.

Each level imports only the levels below it (a contract in
``pyproject.toml`` keeps it so):

* ``analyzer.py`` (``analyze``), ``report.py`` (the ``Report``),
  ``summary.py`` (its text and dict), ``notebook.py`` (its HTML in
  Jupyter), ``advice.py`` (what to try for each
  verdict), ``ranks_report.py`` (the summary's lines on a cut, partial or
  merged run);
* ``verdicts/`` — the verdict rule with its margin, the step table, the
  offenders behind a verdict;
* ``replay/`` — the replay engine: the run without the recorder's cost,
  and under each fix (what-if);
* ``tables/`` — the op table, one-off costs, HTA-compatible measures,
  source lines, memory, FLOPs;
* ``idle/`` — lanes, the gap-cause rules, idle time by cause, queues, CPU
  lead, exposed communication, step windows.

Below every level, outside this package: ``numeric.columns`` (what a time
column holds, read once) and ``cutimeline.text`` (how numbers read in text).

Interval work runs in Numba kernels (``engine="numba"``) or in their NumPy
twins (``engine="numpy"``), which give equal results.

What a later stage reads (``__all__``; rendering, the integrations and the
command line import nothing else from here, ``tests/test_imports.py`` holds
it so): ``analyze`` and its ``Report``
(whose methods give the measures: ``idle_amounts``, ``fetches``,
``queue_depth``, ``headline``, ...), ``CAUSES`` (the idle causes' names, in
the order of the amounts' columns), ``EDITS`` and ``edit_named`` (the
what-if fixes by name) and ``steady`` (the steady-state rows of a step
table).
"""

from .analyzer import analyze
from .idle.gaps import CAUSES
from .replay.edits import EDITS, edit_named
from .replay.predictions import steady
from .report import Report

__all__ = ["analyze", "Report", "CAUSES", "EDITS", "edit_named", "steady"]
