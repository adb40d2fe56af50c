"""torch.profiler (Kineto) traces → Timeline: ``import_chrome`` (``importer``),
which reads the file (``tracefile``: gzip or plain JSON, checked, exact
µs → ns), the host side (``host``: threads, ops linked to their launch
calls, spans), which ranges make the steps (``steps``), the device side (``device``: GPU rows, syncs, the op flags
they imply), and FLOPs, memory and call stacks (``extra``), in Kineto's
vocabulary (``schema``, which ``formats.chrome`` writes too)."""

from .importer import import_chrome

__all__ = ["import_chrome"]
