"""A workload side by side under cutimeline and under torch.profiler: the
passes run and measured (``runner``), what they found (``result``: the
``Comparison`` that ``ctl.compare`` returns), with the two aten op streams
matched op by op (``opmatch``)."""

from .result import Comparison

__all__ = ["Comparison"]
