"""Other files: Chrome-trace/Perfetto export (``chrome``; its event templates
``chromeevents``, column-to-JSON formatting ``jsonrows``, chunked parallel
gzip ``chunkwriter``), torch.profiler
(Kineto) import (``kineto``; its host side ``kinetohost``, device side
``kinetodevice``, names ``kinetoschema``), reading Chrome-trace JSON
(``tracefile``), and ``ctl.load``, which opens either kind of file
(``files``)."""
