"""The replay: the timeline run again on a model of host, launch queues and
streams (``replaying.py``, on plain arrays), without the recorder's cost
(``costs.py`` prices it, ``compensation.py`` reads the Timeline and maps
host times) or under a fix the user could make (``edits.py`` says what
each fix changes, ``whatif.py`` replays and predicts the step times)."""
