"""Drawing: matplotlib figures of a Timeline and its analysis. Computes no
metric itself: ``lanes.Scene`` asks ``analyze`` for them.

The figures (``figure``: ``plot``, ``plot_compare``; ``whatif``: the
recording over its replay; ``notebook``: the Jupyter reprs) are laid out
by ``placement`` and framed by ``frame`` and ``titles``; each draws the
lanes of its Timelines (``lanes/``), the verdict strip (``strip``) and the
panels under them (``panels``: queue depth, CPU lead; ``memory``), from
rows reduced to pixel columns (``pixels``) as collections (``artists``) in
the colours of ``palette``.

``plot_compare`` draws two Timelines on one time axis (``Comparison.plot``
uses it). matplotlib is imported inside the functions that draw, so that
loading this package for a notebook's HTML repr does not pay for it."""

from .figure import plot, plot_compare

__all__ = ["plot", "plot_compare"]
