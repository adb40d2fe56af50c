"""Analysis: pure functions Timeline -> metrics, gathered in ``analyze()``'s
``Report``: gap causes, lanes and queues, per-step verdicts, the op table,
the replay without the recorder's cost, HTA-compatible measures, the summary."""
