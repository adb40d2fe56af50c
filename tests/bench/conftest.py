"""Tests that time real work or run a benchmark: marked ``bench``, which the
README's test command (and ``.ci/run``) leaves out (``addopts`` in
pyproject.toml); ``python -m pytest -m bench`` runs them. Their verdicts
depend on wall-clock speed (SimGPU's host runs on real time), so they do
not gate a commit; the suite checks the same logic on hand-built Timelines
with known times."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/bench/" in str(item.fspath):
            item.add_marker(pytest.mark.bench)
