"""Other files: Chrome-trace/Perfetto export (``chrome``), torch.profiler
(Kineto) import (``kineto``; its host side ``kinetohost``, device side
``kinetodevice``, names ``kinetoschema``), and reading Chrome-trace JSON
(``tracefile``)."""
