"""Collecting: ``record()`` / ``Recorder`` (``recorder.py``), ``arm()``
(``ondemand.py``) and ``record_script`` (``script.py``); the op stream
(``opstream.py``, ``signatures.py``) into one recording's state
(``session.py``), the recorder's own cost (``selfcost.py``), the Timeline
made at stop (``assembly.py``), a rank's meta and file (``ranks.py``).

What changes apart from the op stream lives in sub-packages: ``hooks/``
(what the recorder patches into torch while it records, and the host
spans they write), ``control/`` (when a recording starts and stops beyond
``start()``/``stop()``: schedules, steps, signals, exits, forks),
``measures/`` (source lines, FLOPs, memory, collectives: one optional log
each, read into its own table) and ``capture/`` (on-demand capture's
files). The map: docs/ARCHITECTURE.md.
"""
