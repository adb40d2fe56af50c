"""What the session measures beside each op row, one optional log each:
source lines (``sources.py``, ``record(stack=)``), FLOPs (``flops.py``),
device memory (``memory.py``, ``record(memory=)``) and torch.distributed
collectives (``collectives.py``). Each is a leaf the session fills and the
assembly reads into a table or meta of the Timeline; they change with
those tables (the file format), not with the op stream's path."""
