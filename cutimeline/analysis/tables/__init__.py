"""Tables a report offers beside its verdicts: the op table
(``optable.py``, with self time from ``nesting.py``), one-off host costs
(``oneoff.py``), HolisticTraceAnalysis-compatible measures (``hta.py``),
and from the tables a recording may add: source lines (``sources.py``),
device memory (``memory.py``), FLOPs and MFU (``flops.py``)."""
