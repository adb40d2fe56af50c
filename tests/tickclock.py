"""A host clock the test moves, for SimGPU and the recorder both: recordings
whose times, and so verdicts, do not depend on how fast the machine is.

``TickClock`` moves ``tick`` ns at each of SimGPU's reads (its dispatches
and bookkeeping) and by ``advance`` (the user's Python); ``on_clock``
points the recorder's clock reads at ``clock.read`` (which does not move
it) and SimGPU's run-queue reading at ``runqueue`` for the ``with`` block
(a stand-in for monkeypatch, so ``test_sim_identity.py --write`` runs
without pytest).

DataLoader workers (``recording/hooks/fetches.py``) read two clocks of
their own: the real time a fetch began, and each thread's CPU time (what a
worker spent on a batch, what the main thread spent in the fetch).
``on_clock`` points both at ``clock.read``: on this clock the test's time
is the only time. A worker forked inside the block (``DataLoader(...,
multiprocessing_context="fork")``) gets a copy of the patched module and
of the clock, so a dataset that ``advance``s the clock costs its worker
exactly that, however fast the machine runs it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cutimeline.devices.sim import FakeClock
from cutimeline.devices.sim.host import SimHost


class TickClock(FakeClock):
    def __init__(self, tick: int):
        super().__init__()
        self.tick = tick

    def now(self) -> int:
        self.t += self.tick
        return self.t

    def read(self) -> int:
        return self.t


@contextmanager
def on_clock(clock: TickClock, runqueue: Callable[[], int]) -> Iterator[TickClock]:
    from cutimeline.recording import opstream, recorder, session
    from cutimeline.recording.hooks import fetches, installer
    saved = []
    for owner, name, value in ((opstream, "_now", clock.read), (session, "_now", clock.read),
                               (installer, "_now", clock.read), (recorder, "_now", clock.read),
                               (fetches, "_now", clock.read), (fetches, "_cpu", clock.read),
                               (SimHost, "runqueue_ns", lambda self: runqueue())):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    try:
        yield clock
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
