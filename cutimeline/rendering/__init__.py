"""Drawing: matplotlib figures of a Timeline and its analysis. Computes no
metric itself: ``scene`` asks ``analyze`` for them.

``plot`` (``ctl.plot``) and ``plot_compare`` (two Timelines on one time
axis; ``Comparison.plot`` draws a ``ctl.compare`` result with it) are in
``figure``. matplotlib is imported inside the functions that draw (0.3 s):
loading this package for a notebook's HTML repr or a figure's arguments
does not pay it."""

from .figure import plot, plot_compare

__all__ = ["plot", "plot_compare"]
