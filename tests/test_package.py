"""cutimeline/__init__.py: the public surface, loaded lazily."""
import subprocess
import sys

import cutimeline as ctl


def test_public_names_stay_functions_after_their_modules_load():
    # Every module loaded, each subpackage set on its parent: none of them may
    # be named like a public function (a subpackage ``analyze`` would replace
    # ``ctl.analyze`` once it loads).
    import importlib
    import pkgutil
    for m in pkgutil.walk_packages(ctl.__path__, "cutimeline."):
        if m.name != "cutimeline.__main__":
            importlib.import_module(m.name)
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
