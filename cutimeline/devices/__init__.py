"""The devices the recorder talks to: the interface (``device.py``), the
CUDA device (``cuda/``: its torch.cuda calls, and CuPy kernels for
``kernels/*.cu``), and ``SimGPU`` (``sim/``), a simulated GPU behind the
same interface. What both share: how a device clock is read
(``clockread.py``); and what an op call's work is, which the recorder's
FLOP count reads too (``opwork.py``)."""
