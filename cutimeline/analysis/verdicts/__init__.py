"""Verdicts: the rule that turns a window's busy time and idle time by
cause into a verdict with its margin (``margins.py``), the step table that
applies it to every step (``steptable.py``), and the offenders behind a
verdict (``offenders.py``)."""
