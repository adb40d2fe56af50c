"""A workload side by side under cutimeline and under torch.profiler
(``comparison``), with the two aten op streams matched op by op (``opmatch``)."""
