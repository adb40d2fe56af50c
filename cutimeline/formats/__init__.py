"""Other files: Chrome-trace/Perfetto export (``chrome``), torch.profiler
(Kineto) import (``kineto``), and reading Chrome-trace JSON (``tracefile``)."""
