import os

import pytest

# Tests must never be disabled by the user's environment.
os.environ.pop("CUTIMELINE_DISABLE", None)


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
