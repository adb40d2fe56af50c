import os

import pytest

# Tests must never be disabled by the user's environment.
os.environ.pop("CUTIMELINE_DISABLE", None)


def _selects_bench(config) -> bool:
    """Whether ``-m`` selects the bench tests (``python -m pytest -m bench``)."""
    from _pytest.mark.expression import Expression
    expr = config.option.markexpr
    return bool(expr) and Expression.compile(expr).evaluate(lambda name, **kw: name == "bench")


def pytest_configure(config):
    # addopts runs the suite on two pytest-xdist workers, but the bench tests
    # time real work (a second worker would share the cores with them) and
    # print their numbers (-s; a worker's output never reaches the terminal):
    # they run in this process. (xdist's own pytest_configure, trylast, reads
    # this before it starts any worker.)
    if _selects_bench(config) and hasattr(config.option, "dist"):
        config.option.dist = "no"
    # One intra-op thread: on a 2-core machine where another process holds
    # a core, torch's second OpenMP thread makes every parallel op wait a
    # scheduler slice, and the tests that record real loops through SimGPU
    # read that stall as dispatch time (their verdicts flipped to
    # launch-bound with one core busy). The analysis under test is the same.
    try:
        import torch
    except ImportError:  # a broken torch install is reported by other tests
        return
    torch.set_num_threads(1)


def _cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # a broken torch install is reported by other tests
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords or "/tests/gpu/" in str(item.fspath):
            item.add_marker(skip)
