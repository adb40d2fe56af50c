"""Drawing: matplotlib figures of a Timeline and its analysis. Computes no
metric itself: ``scene`` asks ``analyze`` for them."""
