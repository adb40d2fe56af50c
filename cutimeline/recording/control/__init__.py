"""When a recording happens beyond ``start()``/``stop()``: a schedule's
windows and the step boundaries they start and stop at (``schedule.py``,
``stepwatch.py``, which ``ondemand.py``'s triggers and ``record_script``'s
first steps after a warm-up, ``firststeps.py``, use too), a recording
that SIGTERM, Ctrl-C or an exit ends (``lifecycle.py``) and its journal,
kept on disk as it goes for a kill no handler sees (``flusher.py``), and a
process forked while recording (``forks.py``). These change with the lifetime of a
recording, not with what is recorded per op; the recorder builds on them,
none of them on the recorder."""
