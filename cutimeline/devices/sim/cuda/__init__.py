"""CUDA mapped to a SimGPU: unmodified CUDA code on the simulated GPU —
the mapping (``mapping.py``: a function mode, the values kept outside
recordings), the ``torch.cuda`` calls it answers (``api.py``),
``torch.autocast("cuda")``'s casts (``autocast.py``), and module moves
that keep their Parameter objects (``moves.py``)."""

from .mapping import CudaMapping, mapped_gpu

__all__ = ["CudaMapping", "mapped_gpu"]
