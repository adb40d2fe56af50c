"""Why the GPU waits: the gpu rows as lanes (by stream and by device),
every idle gap with its cause by the rules of ``gaps.py``, idle time by
cause over windows (``attribution.py``; ``overlap.py``: a stream's idle
time that other streams of its device filled), queue depth and CPU lead
(``queues.py``), exposed communication (``communication.py``), and the
steps' host and device windows these are measured over (``steps.py``)."""
