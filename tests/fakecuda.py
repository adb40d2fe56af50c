"""Stand-ins for the torch.cuda layer ``CudaDevice`` calls (``devices/cuda/api.py``):
a fake GPU with a host clock that moves only when told and a device clock
of its own, read as float32-millisecond elapsed times as CUDA allows, and
its globaltimer stamps. ``tests/devices/cuda/test_api.py`` holds their
surface against torch's real one."""

import numpy as np

from cutimeline.devices.cuda import CudaDevice

OFFSET, DRIFT_PPM = 3_000_000_000_000, 40.0


class FakeEvent:
    def __init__(self):
        self.dev_ns = None   # device clock when it ran
        self.done_ns = None  # host time when it ran


class FakeCuda:
    """torch.cuda as CudaDevice uses it. Host time moves only by ``advance``,
    by ``call_ns`` per call into the fake (0: calls are free), and by
    synchronize, to the last event. An event runs ``lag_ns`` after it is
    recorded, and no sooner than ``spacing_ns`` after the event before it
    (one queue for the device: a slow device falls behind), at device time
    offset + (1 + drift)·host, floored to the event clock's ``tick_ns``.
    ``hold`` keeps the device busy, so the events after it run back to back.
    ``queries`` counts queries, ``syncs`` synchronizes; no call waits
    for an event but synchronize."""

    def __init__(self, lag_ns=2_000):
        self.t = 1_000_000_000
        self.lag_ns = lag_ns
        self.spacing_ns, self.tick_ns, self.call_ns = 0, 1, 0
        self.created = self.records = self.syncs = self.queries = self.holds = 0
        self.capture = False
        self.stream = 0
        self.last_done = 0
        self.busy = 0  # the device runs the next event no sooner than this

    def now(self):
        return self.t

    def _call(self):
        self.t += self.call_ns

    def _run(self):
        """Host time at which an event recorded now runs."""
        done = max(self.t + self.lag_ns, self.busy + self.spacing_ns)
        self.busy = done
        self.last_done = max(self.last_done, done)
        return done

    def advance(self, ns):
        self.t += int(ns)

    def device_ns(self, host_ns):
        return OFFSET + host_ns + int(host_ns * DRIFT_PPM * 1e-6)

    def event_ns(self, host_ns):
        """What an event that ran at host time ``host_ns`` reads: the device
        clock on the event clock's tick."""
        t = self.device_ns(host_ns)
        return t - t % self.tick_ns

    def current_device(self):
        return 0

    def device_name(self, index):
        return "Fake GPU"

    def current_stream(self, index):
        return self.stream

    def capturing(self, index):
        self.capture_checked = index
        return self.capture

    def new_event(self):
        self._call()
        self.created += 1
        return FakeEvent()

    def record(self, event, stream, index):
        self._call()
        self.records += 1
        event.done_ns = self._run()
        event.dev_ns = self.event_ns(event.done_ns)

    def stream_id(self, stream, index):
        return self.stream if stream is None else stream

    def _done(self, event):
        return event.done_ns is not None and event.done_ns <= self.t

    def query(self, event):
        self._call()
        self.queries += 1
        return self._done(event)

    def elapsed_ms(self, a, b):
        self._call()
        assert self._done(a) and self._done(b), "elapsed of an event not done"
        return float(np.float32((b.dev_ns - a.dev_ns) / 1e6))

    def hold(self, index, ns):
        self._call()
        self.holds += 1
        self.busy = max(self.busy, self.t) + ns

    def synchronize(self, index):
        self.syncs += 1
        self.t = max(self.t, self.last_done)

    def memory_counters(self, index):
        """The allocator's (allocated, freed, in use) bytes: set by a test."""
        return getattr(self, "memory", (0, 0, 0))


class CpuAsCuda(CudaDevice):
    """The fake GPU 'runs' CPU tensors, so the recorder drives it end to end."""

    def owns(self, device):
        return device.type == "cpu"


GT_OFFSET, GT_DRIFT_PPM, GT_STEP = 1_700_000_000_000_000_000, -25.0, 32


class FakeStamper:
    def __init__(self, slots):
        self.slots = np.full(slots, -1, np.int64)


class FakeStampCuda(FakeCuda):
    """FakeCuda with the stamp kernel: a stamp runs ``lag_ns`` after it is
    enqueued and writes globaltimer, a clock of its own (offset, drift,
    32 ns steps). Events and stamps both run at ``now()`` + lag."""

    def __init__(self, lag_ns=2_000):
        super().__init__(lag_ns)
        self.stamps, self.stampers, self.checked = 0, [], []
        self.drop = None  # a slot whose stamp never lands
        self.point = None  # when the event just recorded ran

    def globaltimer(self, host_ns):
        t = GT_OFFSET + host_ns + int(host_ns * GT_DRIFT_PPM * 1e-6)
        return t - t % GT_STEP

    def record(self, event, stream, index):
        super().record(event, stream, index)
        self.point = event.done_ns

    def check_stamps(self, index):
        self.checked.append(index)

    def new_stamper(self, slots, index):
        s = FakeStamper(slots)
        self.stampers.append(s)
        return s

    def stamp(self, stamper, slot, stream, index):
        self.stamps += 1
        # beside an event (timing="both") the stamp marks the event's instant
        done = self._run() if self.point is None else self.point
        self.point = None
        if (stamper, slot) != self.drop:
            stamper.slots[slot] = self.globaltimer(done)
        self.last_done = max(self.last_done, done)

    def synchronize(self, index):
        super().synchronize(index)
        self.point = None  # a stamp after it marks an instant of its own

    def read_stamps(self, stamper):
        assert self.t >= self.last_done, "stamps read before the device was synchronized"
        return stamper.slots.copy()
