"""The CUDA calls that are not aten ops, wrapped while recording: host syncs, user events, graph replays and captures, the event pool's pauses.

``install`` is called by ``Hooks.install`` when the recording's device is
a ``CudaDevice``, patching through ``Hooks._patch``, so every wrapper is
removed, and the attribute restored exactly, at stop.

* SYNC: ``torch.cuda.synchronize``, ``torch.accelerator.synchronize``
  (torch ≥ 2.6), ``Stream.synchronize`` and ``Event.synchronize`` of
  ``torch.cuda`` (and ``Event.record``, to know what an event covers):
  each a sync of what it waited for, and a SYNC span. ``empty_cache``
  synchronizes only when its cudaFree calls free anything: a SYNC span and
  a sync that bounds no event (``CudaDevice.note_host_wait``), since the
  aligner must be told nothing that may be untrue. A ``query()`` of an
  Event or Stream that returns True is a sync with no span (the host did
  not wait, but then knew the work was done: a polling loop's end), kinds
  "event_query" and "stream_query"; our own device queries through the C
  method, unwrapped.
* Not seen: ``Event.wait`` and ``Stream.wait_event``/``wait_stream`` (the
  device waits, not the host), and the methods of the device-generic
  ``torch.Stream`` and ``torch.Event`` (immutable C types that refuse any
  attribute; their ``torch.cuda`` subclasses are wrapped).
* Graphs: ``CUDAGraph.replay`` is a launch (``Session.launch_graph``);
  ``capture_begin``/``capture_end`` count captures in progress, during
  which the device queries no event (a query from another thread would
  invalidate a global-mode capture).
* USER "cutimeline event pool": the recorder's own time when its event
  pool grew (``devices/cuda/eventclock.py``), on the thread that took the
  event, so that analysis can tell it from the program's.
"""

from __future__ import annotations

from time import perf_counter_ns as _now
from typing import Any, Callable

from ...devices.cuda.eventclock import POOL_SPAN
from ...timeline.schema import NONE, SpanKind

__all__ = ["install", "install_sim"]

_SYNC, _USER = int(SpanKind.SYNC), int(SpanKind.USER)


def install(torch: Any, s: Any, patch: Callable[[Any, str, Callable[[Any], Any]], None]) -> None:
    """Wrap the CUDA calls above for session ``s`` (its device a CudaDevice)."""
    dev = s.device

    def device_wide(args: tuple, kwargs: dict, t0: int, t1: int) -> None:
        # torch.cuda.synchronize(device=None) waits for the current device
        d = args[0] if args else kwargs.get("device")
        if _cuda_index(torch, d) == dev.index:
            dev.note_sync("synchronize", None, NONE, t0, t1)

    def stream_wide(args: tuple, kwargs: dict, t0: int, t1: int) -> None:
        if args[0].device_index == dev.index:
            dev.note_sync("stream_synchronize", args[0].stream_id, NONE, t0, t1)

    def event(args: tuple, kwargs: dict, t0: int, t1: int) -> None:
        dev.note_event_sync(args[0], t0, t1)

    def host_wait(args: tuple, kwargs: dict, t0: int, t1: int) -> None:
        dev.note_host_wait("empty_cache", t0, t1)

    def event_done(event: Any, t0: int, t1: int) -> None:
        dev.note_event_sync(event, t0, t1, kind="event_query")

    def stream_done(stream: Any, t0: int, t1: int) -> None:
        if stream.device_index == dev.index:
            dev.note_sync("stream_query", stream.stream_id, NONE, t0, t1)

    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    patch(torch.cuda, "synchronize", _synced(s, "synchronize", device_wide))
    if _has(accelerator, "synchronize"):
        patch(accelerator, "synchronize", _synced(s, "synchronize", device_wide))
    for owner in (torch.cuda, accelerator):
        if _has(owner, "empty_cache"):
            patch(owner, "empty_cache", _synced(s, "empty_cache", host_wait))
    patch(torch.cuda.Stream, "synchronize", _synced(s, "stream_synchronize", stream_wide))
    patch(torch.cuda.Event, "synchronize", _synced(s, "event_synchronize", event))
    for cls, done in ((torch.cuda.Event, event_done), (torch.cuda.Stream, stream_done)):
        if _has(cls, "query"):
            patch(cls, "query", _queried(s, done))
    if hasattr(dev, "on_pause"):
        patch(dev, "on_pause", lambda original: _pool_pause(s))
    patch(torch.cuda.Event, "record", lambda original: _event_record(s, original))
    patch(torch.cuda.CUDAGraph, "replay", lambda original: _graph_replay(s, original))
    # While any thread captures a graph (torch's default capture mode is
    # global), querying an event from another thread would invalidate
    # the capture: the device grows its pool instead of reaping then.
    if hasattr(dev, "captures") and all(
            n in torch.cuda.CUDAGraph.__dict__ for n in ("capture_begin", "capture_end")):
        patch(torch.cuda.CUDAGraph, "capture_begin",
              lambda original: _capture_begin(dev, original))
        patch(torch.cuda.CUDAGraph, "capture_end", lambda original: _capture_end(dev, original))


def install_sim(s: Any, patch: Callable[[Any, str, Callable[[Any], Any]], None]) -> None:
    """A SimGPU's ``synchronize`` (where ``torch.cuda.synchronize`` and the
    Stream and Event syncs of ``SimGPU.as_cuda()`` arrive too) gets the SYNC
    span, with its source line, that CUDA's wrapped syncs get, on the
    sync's own times; the device notes the sync row itself."""
    def on_sync(kind: str, t0: int, t1: int) -> None:
        if not s.off:
            s.span(s.writer(), _SYNC, s.intern(kind), 0, t0, NONE, t1)
    patch(s.device, "on_sync", lambda original: on_sync)


def _capture_begin(dev: Any, original: Any) -> Any:
    def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
        dev.captures += 1
        try:
            return original(graph, *args, **kwargs)
        except BaseException:
            dev.captures -= 1
            raise
    return capture_begin


def _capture_end(dev: Any, original: Any) -> Any:
    def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(graph, *args, **kwargs)
        finally:
            dev.captures = max(dev.captures - 1, 0)
    return capture_end


def _synced(s: Any, kind: str,
            note: Callable[[tuple, dict, int, int], None]) -> Callable[[Any], Any]:
    """Wrap a host-blocking CUDA call: note the sync and a SYNC span."""
    sid = s.intern(kind)

    def make(original: Any) -> Any:
        def blocking(*args: Any, **kwargs: Any) -> Any:
            t0 = _now()
            out = original(*args, **kwargs)
            t1 = _now()
            if not s.off:
                note(args, kwargs, t0, t1)
                s.span(s.writer(), _SYNC, sid, 0, t0, NONE, t1)
            return out
        return blocking
    return make


def _queried(s: Any, note: Callable[[Any, int, int], None]) -> Callable[[Any], Any]:
    """Wrap the ``query`` method of a CUDA Event or Stream: when it returns
    True, note the sync it proves (no span: the host did not wait)."""
    def make(original: Any) -> Any:
        def query(obj: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = _now()
            done = original(obj, *args, **kwargs)
            if done and not s.off:
                note(obj, t0, _now())
            return done
        return query
    return make


def _pool_pause(s: Any) -> Callable[[int, int], None]:
    """The device's ``on_pause``: a USER span of the recorder's own time."""
    sid = s.intern(POOL_SPAN)

    def pause(t0: int, t1: int) -> None:
        if not s.off:
            w = s.writer()
            s.span(w, _USER, sid, len(w.users), t0, NONE, t1)
    return pause


def _has(owner: Any, name: str) -> bool:
    """Whether ``owner`` (a module, a class or None) defines ``name`` itself
    (a class: not only through a base, whose method must stay unwrapped)."""
    if owner is None:
        return False
    return name in owner.__dict__ if isinstance(owner, type) else hasattr(owner, name)


def _cuda_index(torch: Any, d: Any) -> int:
    """The device index ``torch.cuda`` and ``torch.accelerator`` calls mean
    by ``d`` (None, an int, a string or a torch.device; unindexed: the
    current device); -1 for a device that is no CUDA GPU."""
    if d is None:
        return torch.cuda.current_device()
    if isinstance(d, int):
        return d
    d = torch.device(d)
    if d.type != "cuda":
        return NONE
    return torch.cuda.current_device() if d.index is None else d.index


def _event_record(s: Any, original: Any) -> Any:
    def record(event: Any, stream: Any = None) -> Any:
        out = original(event, stream)
        if not s.off:
            s.device.note_user_event(event, stream)
        return out
    return record


def _graph_replay(s: Any, original: Any) -> Any:
    def replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
        if s.off:
            return original(graph, *args, **kwargs)
        return s.launch_graph(original, graph, args, kwargs)
    return replay
