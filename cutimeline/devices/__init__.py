"""The devices the recorder talks to: the interface, the CUDA device (its
torch.cuda calls, and CuPy kernels for ``kernels/*.cu``), and ``SimGPU``,
a simulated GPU behind the same interface (its clocks and roofline cost model)."""
