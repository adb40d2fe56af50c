"""SimGPU's per-thread state: what each thread's dispatch of a simulated op
has told the simulator so far, shared by the simulator's parts.

One ``SimLocal`` per SimGPU, handed to each part (host clock, streams, ops,
collectives, data-dependent ops) at construction; each thread sees its own
values. Which part writes which field is noted beside it.
"""

from __future__ import annotations

import threading

__all__ = ["SimLocal"]


class SimLocal(threading.local):
    """SimGPU's per-thread state, with its defaults as class attributes: a
    thread's first read of one finds the default without the
    ``AttributeError`` a missing attribute of a plain ``threading.local``
    raises inside ``getattr`` (about 0.3 µs each, several per op)."""
    host = 0          # depth of ``with gpu.host():`` blocks (SimGPU.host)
    stream = 0        # the current stream (SimStreams.stream)
    t0 = None         # the recorder's first look at the op being dispatched (mark_dispatch)
    mark = None       # (real, virtual) start of that op's dispatch (SimGPU.begin)
    ns = None         # its dispatch cost, when run() or a launch waiting for room priced it
    op = None         # (name, args, kwargs) of the op running, for wait() (SimGPU.run)
    pending = None    # BEGINs waiting for their work (bracket="kernel")
    waited = None     # (stream, last event) of the last wait, for note_sync
    count = None      # (ns, args) of a data-dependent op's count kernel (datadep.py)
    rq = None         # runqueue time at this thread's last knot (SimHost)
    sched_fd = None   # its /proc/thread-self/schedstat (SimHost.runqueue_ns)
    since = None      # real time the last launch's dispatch ended (SimGPU.end, recorder_left)
    discount = 0      # ns of its time that were the simulator's own, outside any
    #                   dispatch, cumulative (cuda/mapping.py; SimHost.runqueue_ns)
