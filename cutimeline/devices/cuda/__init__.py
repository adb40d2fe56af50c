"""The CUDA device: ``CudaDevice`` behind the recorder's Device interface
(``gpu.py``), timed by a pool of CUDA events (``eventclock.py``), by
globaltimer stamps (``stampclock.py``) or both; the torch.cuda calls it
makes, behind one object CPU tests replace (``api.py``); and the CuPy
kernels of ``kernels/*.cu`` (``kernels.py``, compiled by ``loader.py``).
Importing it loads neither torch nor CuPy."""

from .gpu import TIMINGS, CudaDevice, CudaMemory

__all__ = ["CudaDevice", "CudaMemory", "TIMINGS"]
