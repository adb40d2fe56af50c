"""cutimeline/__init__.py: the public surface, loaded lazily."""
import subprocess
import sys

import cutimeline as ctl


def test_public_names_stay_functions_after_their_modules_load():
    import importlib
    for module in ("recorder", "aligner", "analysis", "figure", "comparison",
                   "chrome", "dist", "sim"):
        importlib.import_module(f"cutimeline.{module}")
    for name in ("record", "align", "analyze", "plot", "plot_compare", "compare",
                 "export_chrome", "import_chrome", "merge", "span"):
        value = getattr(ctl, name)
        assert callable(value) and value.__name__ == name, name
    assert isinstance(ctl.SimGPU, type) and isinstance(ctl.Report, type)


def test_every_public_name_resolves():
    for name in ctl.__all__:
        assert getattr(ctl, name) is not None
    assert sorted(dir(ctl)) == sorted(ctl.__all__)


def test_import_loads_no_heavy_dependency():
    code = ("import sys, cutimeline; "
            "print(sorted(m for m in ('torch', 'numba', 'matplotlib', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


def test_unknown_attribute_is_an_attribute_error():
    import pytest
    with pytest.raises(AttributeError, match="no attribute 'recrod'"):
        ctl.recrod
