"""The lanes of one Timeline, as every figure draws them: which lane each
row is on and what the lanes are called (``layout``), the phase that colours
an op and its GPU work (``phases``), names inside the GPU bars wide enough
(``names``), the per-pixel-column overview of a dense window (``overview``),
and ``Scene`` (``scene``): a Timeline over one window with the analysis
behind its shading, drawn into a matplotlib Axes."""

from .scene import Scene

__all__ = ["Scene"]
