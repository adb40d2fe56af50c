import pytest

pytestmark = pytest.mark.gpu
