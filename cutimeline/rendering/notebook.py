"""How a Timeline shows itself in Jupyter: ``Timeline._repr_png_``.

``timeline_png`` is ``ctl.plot`` of the whole Timeline as PNG bytes, at a
size bounded in pixels (``MAX_PX``) so that a long or many-lane Timeline
cannot flood a notebook. The store draws nothing and may not import this
stage, so rendering registers the picture itself, when it loads, as
``Timeline.notebook_png`` (as pyinstrument registers its IPython extension
from its own UI layer); ``import cutimeline`` sets a stand-in that loads
this stage on the first picture a notebook asks for. The Report's HTML
needs no figure: ``cutimeline.analysis.notebook`` builds it.
"""

from __future__ import annotations

import io
from typing import Any

from ..errors import CutimelineError
from ..timeline.timeline import Timeline
from .figure import plot

__all__ = ["MAX_PX", "timeline_png"]

MAX_PX = (1400, 2000)    # largest PNG, width × height in pixels
WIDTH_IN, DPI = 14.0, 100


def timeline_png(tl: Any) -> bytes | None:
    """``ctl.plot(tl)`` as PNG bytes no larger than MAX_PX; None (no PNG,
    the notebook shows the text repr) for a Timeline that cannot be
    plotted, such as one not yet aligned."""
    try:
        fig = plot(tl, width=WIDTH_IN, dpi=DPI)
    except CutimelineError:
        return None
    w, h = fig.get_size_inches()
    dpi = min(DPI, MAX_PX[0] / w, MAX_PX[1] / h)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


Timeline.notebook_png = timeline_png
