"""Collecting: ``record()`` / ``Recorder`` (``recorder.py``) and ``arm()``
(``ondemand.py``, with the files it is asked through and whom they trust:
``capture/``); the private TorchDispatchMode that logs the op stream
(``opstream.py``, ``signatures.py``) into one recording's state
(``session.py``); the recorder's measurement of its own cost
(``selfcost.py``); the Timeline made at stop (``assembly.py``) and a
rank's meta and file (``ranks.py``); a training script run unedited, some
of its steps recorded (``script.py``: ``record_script``, ``cutimeline
record``).

Three more sub-packages hold what changes apart from the op stream: ``hooks/``,
what the recorder patches into torch and the user's program for the time
it records and the host spans they write (steps, DataLoader fetches,
phases, modules, ``record_function`` and NVTX ranges, the CUDA calls that
are not aten ops, torch.compile's graphs); ``control/``, when a recording
starts and stops beyond ``start()``/``stop()`` (schedule windows, step
boundaries, signals, exit and kills, forks); ``measures/``, what the
session measures beside each op row (source lines, FLOPs, device memory,
collectives), one optional log each, read into its own Timeline table.
"""
