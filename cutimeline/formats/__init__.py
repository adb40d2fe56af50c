"""Other files: Chrome-trace/Perfetto export (``chrome``; its event templates
``chromeevents``, column-to-JSON formatting ``jsonrows``, chunked parallel
gzip ``chunkwriter`` and ``gzipstream``), torch.profiler (Kineto) import
(the ``kineto`` package), and ``ctl.load``, which opens either kind of file
(``files``)."""
