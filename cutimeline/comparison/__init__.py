"""A workload side by side under cutimeline and under torch.profiler: the
passes run and measured (``runner``), what they found (``result``), with the
two aten op streams matched op by op (``opmatch``)."""
