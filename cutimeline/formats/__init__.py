"""Other files: Chrome-trace/Perfetto export (``chrome``), torch.profiler
(Kineto) import (``kineto``; its host side ``kinetohost``, device side
``kinetodevice``, names ``kinetoschema``), reading Chrome-trace JSON
(``tracefile``), and ``ctl.load``, which opens either kind of file
(``files``)."""
