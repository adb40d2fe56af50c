"""The device interface the recorder talks to: ``Device``, and the ``Harvest`` it returns.

The recorder never calls ``torch.cuda`` itself. For every op that launches
device work it asks the device for the current stream and to record a BEGIN
event before the launch and an END event after it; around host-blocking
points it notes a sync. At stop, ``harvest()`` turns the device's events into
raw device-clock times (chained from segment anchors) and hands back the
calibration pings and syncs, as plain columns for the Timeline's tables.

Implementations: ``CudaDevice`` in ``cuda/gpu.py``, ``SimGPU`` in ``sim/gpu.py``.

``begin`` may return ``NONE`` (-1): the device records no event now (a CUDA
stream is capturing a graph). The recorder then flags the op CAPTURED and
calls neither ``end`` nor ``wait``/``note_sync`` for it.

Beyond this interface, ``CudaDevice`` takes what the recorder's CUDA hooks
(``recording/hooks/cuda.py``) see of calls that are not aten ops: a user's
event recorded (``note_user_event``), synchronized or found complete
(``note_event_sync``), a call that may or may not have waited for the GPU
(``note_host_wait``: a sync row that bounds no event); and it hands them
the host time its event pool took to grow (``on_pause``), which they make
a span of the recorder's own.

Optional, with a default: ``memory_meter()`` for ``record(memory=True)``,
an object whose ``read(func, args, kwargs, out)`` gives (bytes allocated,
bytes freed, both since the previous read, bytes in use) after op
``func`` returned ``out``, and whose ``close()`` ends it; None (the default): the
device's memory cannot be read.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Device", "Harvest"]


@dataclass
class Harvest:
    """What a device hands the recorder at stop.

    ``events`` and ``syncs`` are dicts of columns for the Timeline tables of
    those names. In ``events`` the ``op`` column holds the recorder's op
    *sequence number* (or -1): the recorder maps it to a row. In ``syncs`` the
    ``op`` column likewise holds a sequence number (or -1) and ``last_event``
    an index into these events; its ``kind`` column holds str (the recorder
    interns them), and an optional ``ident`` column the
    ``threading.get_ident()`` of the thread that waited (the recorder maps
    it to the syncs' ``thread``). ``truth`` (simulators only) holds the
    true host-clock time of each event. ``meta`` is merged into the
    Timeline's meta (device names, clock truth for simulators, ...).
    ``meta["clock_resolution_ns"]`` (``{"<device index>": ns}``) says how
    far a raw reading may lie from the instant it marks (see ``aligner``).
    ``alternates`` maps a timing name to a second ``raw_ns`` column for the
    same event rows, read from another clock (``timing="both"``: the
    globaltimer stamps beside the events), and ``alternate_resolution_ns``
    that clock's resolution. ``host_map`` (simulators whose host clock is
    virtual, see ``sim/host.py``): (real, virtual) knots of a non-decreasing
    piecewise-linear map the recorder applies to every host time.
    """
    events: dict[str, np.ndarray]
    syncs: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)
    truth: dict[str, np.ndarray] | None = None
    alternates: dict[str, np.ndarray] = field(default_factory=dict)
    alternate_resolution_ns: dict[str, int] = field(default_factory=dict)
    host_map: tuple[np.ndarray, np.ndarray] | None = None


class Device(abc.ABC):
    """One accelerator as the recorder sees it. Methods called per op must
    be cheap; all may be called from several threads at once."""

    #: "cuda" or "sim"
    kind: str = ""
    #: device index written to the Timeline's ``device`` columns
    index: int = 0

    @abc.abstractmethod
    def owns(self, device: Any) -> bool:
        """Whether an op on tensors of this torch.device runs on this device."""

    @abc.abstractmethod
    def start(self) -> None:
        """Begin a recording: calibration pings, the first segment anchor."""

    @abc.abstractmethod
    def current_stream(self) -> int:
        """Id of the stream ops launched now go to."""

    @abc.abstractmethod
    def begin(self, stream: int, seq: int) -> int:
        """Record a BEGIN event on ``stream`` for op ``seq``; its index."""

    @abc.abstractmethod
    def end(self, stream: int, seq: int, func: Any, args: tuple, kwargs: dict,
            out: Any) -> int:
        """Record an END event after op ``seq`` was launched; its index.
        A simulator enqueues the op's work here (it sees func and tensors)."""

    @abc.abstractmethod
    def wait(self, stream: int | None) -> None:
        """Called inside a host-blocking op, before it returns. A real device
        needs nothing (the op blocked already); a simulator makes the host
        wait until ``stream`` (None: every stream) has drained."""

    @abc.abstractmethod
    def note_sync(self, kind: str, stream: int | None, seq: int,
                  host_begin_ns: int, host_end_ns: int) -> None:
        """Remember that the host was blocked from host_begin_ns to
        host_end_ns until ``stream`` (None: the whole device) drained; the
        sync covers every event recorded on it so far."""

    @abc.abstractmethod
    def harvest(self) -> Harvest:
        """End the recording (closing pings, synchronize) and return raw
        event times and syncs. Called once, after the last op."""

    def recorder_work(self, ns: int) -> int:
        """The calling thread just spent ``ns`` on the recorder's own work
        (moving its rows into chunks; on a device that ``keeps_host_clock``,
        all of it: ``opstream.ExactMode``). Nothing for a real device; a
        simulator with a host clock of its own leaves it out. Returns the
        ns its host clock left out."""
        return 0

    def keeps_host_clock(self) -> bool:
        """Whether the host time this device's recordings show is its own
        clock's, which the recorder's time can leave exactly as it is
        spent (``recorder_work``, ``recorder_left``): a simulator's virtual
        host. A real device's host is the real one (False): the
        recorder's cost is priced and removed afterwards (compensation)."""
        return False

    def recorder_left(self, now: int, since: int | None, entry_ns: int) -> None:
        """The recorder's dispatch of an op returns at ``now``: its time
        since the op's own work ended (``since``, or, for a launch, the
        device's end of it) and ``entry_ns`` (torch's call into the mode
        and back) are the recorder's. Called only when ``keeps_host_clock``."""

    def metadata_ns(self, device: Any, func: Any, args: tuple, kwargs: dict) -> int | None:
        """What an op that launches nothing (a view, ``empty``) on
        ``device`` costs this device's host clock, in ns, when the device
        prices it rather than the op's real time (None). Asked only when
        ``keeps_host_clock``: a simulator prices the metadata ops of its
        own tensors, whose real time here is a stand-in kernel's."""
        return None

    def memory_meter(self) -> Any:
        """A new meter of this device's memory for one recording (see the
        module doc), or None when it cannot be read."""
        return None
