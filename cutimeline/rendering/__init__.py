"""Drawing: matplotlib figures of a Timeline and its analysis. Computes no
metric itself: ``lanes.Scene`` asks ``analyze`` for them.

The figures (``figure``: ``plot``, ``plot_compare``; ``whatif``: the
recording over its replay; ``notebook``: a Timeline's picture in Jupyter,
registered on ``Timeline`` when this package loads) are laid out
by ``placement`` and framed by ``frame`` and ``titles``; each draws the
lanes of its Timelines (``lanes/``), the verdict strip (``strip``) and the
panels under them (``panels``: queue depth, CPU lead; ``memory``), from
rows reduced to pixel columns (``pixels``) as collections (``artists``) in
the colours of ``palette``.

``plot_compare`` draws two Timelines on one time axis (``Comparison.plot``
uses it). matplotlib is imported inside the functions that draw, so that
loading this package costs nothing until a figure is drawn."""

from . import notebook  # noqa: F401  (sets Timeline.notebook_png)
from .figure import plot, plot_compare

__all__ = ["plot", "plot_compare"]
