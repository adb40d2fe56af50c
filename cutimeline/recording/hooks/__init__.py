"""What a recording patches into torch and the user's program while it
records, each undone at stop: ``installer`` puts them in and takes them
out (steps at ``optimizer.step()``, DataLoader fetches, forward/backward/
optimizer phases, module paths, threads); ``cuda`` wraps the CUDA calls
that are not aten ops (syncs, events, streams); ``fetches`` times
DataLoader batches as they are without the recorder (worker processes on
a simulated host clock, single-process fetches off the dispatch stack);
``ranges`` makes ``record_function`` and NVTX ranges user spans;
``compiled`` makes each call of a torch.compile graph an op over the ops
it dispatches. They write host spans into the session; none of them knows
the recorder."""
