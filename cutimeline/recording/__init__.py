"""Collecting: ``record()`` / ``Recorder``, the private TorchDispatchMode
that logs the op stream, host spans and hooks, torch.compile's graphs, the
recorder's measurement of its own cost, and a rank's collectives and file."""
