"""Why the GPU waits: the host's activity (``activity.py``: fetches, syncs,
dispatching), the gap-cause rules (``gaps.py``), the gpu rows as lanes by
stream and by device with every idle gap (``lanes.py``), idle time by
cause over windows (``attribution.py``; ``overlap.py``: a stream's idle
time that other streams of its device filled), queue depth and CPU lead
(``queues.py``), exposed communication (``communication.py``), and the
steps' host and device windows these are measured over (``steps.py``)."""
