"""SimGPU: a simulated GPU behind the recorder's Device interface, made of
its parts — the virtual host clock (``host.py``), the streams and the
recording's log (``streams.py``), the op stream (``ops.py``), collectives
(``comm.py``), data-dependent ops (``datadep.py``), the values reads
return (``values.py``) and memory (``memory.py``) — over a roofline cost
model (``roofline.py``) and a simulated device clock (``clock.py``); and
synthetic simulated Timelines made with NumPy alone (``synthetic.py``)."""

from .clock import FakeClock, HostClock
from .gpu import SimGPU
from .roofline import PROFILES, GpuProfile
from .synthetic import synthetic_events

__all__ = ["SimGPU", "FakeClock", "HostClock", "GpuProfile", "PROFILES", "synthetic_events"]
