"""cutimeline/__init__.py: the public surface, loaded lazily; and the
package's layout rules (stages, module size, imports across modules)."""
import ast
import importlib
import re
import subprocess
import sys
import typing
import warnings

import pytest

import cutimeline as ctl

# The short list: the verbs, and the types a user holds.
PUBLIC = {"record", "record_script", "span", "schedule", "arm", "SimGPU", "analyze",
          "Report", "plot", "load", "export_chrome", "compare", "merge", "Timeline",
          "CutimelineError",
          "__version__"}
# Each deprecated top-level name and where it lives now (ctl.DEPRECATED says
# the spelling to use; README.md's "Deprecated names" lists the same).
MOVED = {"import_chrome": "cutimeline.formats.kineto",
         "plot_what_if": "cutimeline.rendering.whatif",
         "plot_compare": "cutimeline.rendering",
         "Comparison": "cutimeline.comparison",
         "align": "cutimeline.alignment",
         "Recorder": "cutimeline.recording.recorder",
         "ready_writer": "cutimeline.recording.control.schedule",
         "disarm": "cutimeline.recording.ondemand"}


def test_public_names_stay_functions_after_their_modules_load():
    # Every module loaded, each subpackage set on its parent: none of them may
    # be named like a public function (a subpackage ``analyze`` would replace
    # ``ctl.analyze`` once it loads).
    import importlib
    import pkgutil
    for m in pkgutil.walk_packages(ctl.__path__, "cutimeline."):
        if m.name != "cutimeline.__main__":
            importlib.import_module(m.name)
    for name in ("record", "record_script", "span", "schedule", "arm", "analyze", "plot",
                 "load", "export_chrome", "compare", "merge"):
        value = getattr(ctl, name)
        assert callable(value) and value.__name__ == name, name
    assert isinstance(ctl.SimGPU, type) and isinstance(ctl.Report, type)


def test_every_public_name_resolves():
    for name in ctl.__all__:
        assert getattr(ctl, name) is not None
    assert sorted(dir(ctl)) == sorted(ctl.__all__)
    assert set(ctl.__all__) == PUBLIC


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_deprecated_name_works_and_warns_with_the_new_spelling(name):
    home = importlib.import_module(MOVED[name])
    with pytest.warns(DeprecationWarning, match=re.escape(f"ctl.{name} is deprecated; use "
                                                          f"{ctl.DEPRECATED[name][1]}")):
        value = getattr(ctl, name)
    assert value is getattr(home, name)
    assert name not in dir(ctl) and name not in ctl.__all__
    with pytest.warns(DeprecationWarning):   # never cached: every use warns
        getattr(ctl, name)


def test_the_readme_lists_every_deprecated_name():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Deprecated names"):]
    table = table[:table.index("\n## ", 1)]
    assert sorted(re.findall(r"^\| `ctl\.(\w+)", table, re.M)) == sorted(ctl.DEPRECATED)


def test_the_types_public_functions_return_are_reachable():
    from cutimeline.comparison import Comparison
    from cutimeline.recording.ondemand import Trigger
    from cutimeline.recording.recorder import Recorder
    from cutimeline.recording.control.schedule import Schedule
    assert typing.get_type_hints(ctl.arm)["return"] is Trigger
    assert typing.get_type_hints(ctl.schedule)["return"] is Schedule
    assert typing.get_type_hints(ctl.record)["return"] is Recorder
    assert typing.get_type_hints(ctl.compare)["return"] is Comparison
    assert isinstance(ctl.schedule(), Schedule)


def test_import_loads_no_heavy_dependency():
    code = ("import sys, cutimeline; "
            "print(sorted(m for m in ('torch', 'numba', 'matplotlib', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'recrod'"):
        ctl.recrod


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
STAGES = ("recording", "devices", "timeline", "alignment", "numeric", "analysis",
          "rendering", "formats", "comparison", "dist", "integrations")


def test_the_stages_import_one_way_with_no_circles(capsys):
    # pyproject.toml's import-linter contracts: the layers of docs/ARCHITECTURE.md and
    # no circle between sibling modules or packages at any depth.
    from importlinter.cli import lint_imports
    rc = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "3 kept, 0 broken" in out


def test_the_listing_is_the_pipeline():
    pkg = ROOT / "cutimeline"
    folders = {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(STAGES)
    top = {p.name for p in pkg.glob("*.py")}
    # progress.py: the command's progress bars, apart so that cli.py stays small;
    # commands.py: its vocabulary (the parser), apart from running the commands;
    # at the bottom, under every stage: errors.py, text.py (how numbers and names
    # read, argument checks) and _version.py
    assert top == {"__init__.py", "__main__.py", "cli.py", "commands.py", "progress.py",
                   "demo.py", "errors.py", "text.py", "_version.py"}
    # the tests mirror the packages (gpu/: the tests that need CUDA)
    tests = {p.name for p in (ROOT / "tests").iterdir()
             if p.is_dir() and p.name not in ("data", "gpu", "bench", "__pycache__")}
    assert tests == set(STAGES)


#: a folder a reader takes in at a glance: modules and sub-packages of one
#: package, ``__init__``/``__main__`` not counted
FOLDER_MAX = 15


def test_every_package_is_a_short_listing():
    """Past ~15 entries a folder stops saying what the package does: the
    modules that change together move into a sub-package (timeline/ctlfile,
    recording/hooks) rather than a longer list."""
    long = []
    for init in sorted((ROOT / "cutimeline").rglob("__init__.py")):
        folder = init.parent
        if folder == ROOT / "cutimeline":
            continue  # the top is pinned entry by entry: test_the_listing_is_the_pipeline
        entries = [p for p in folder.iterdir()
                   if (p.suffix == ".py" and p.name not in ("__init__.py", "__main__.py"))
                   or (p / "__init__.py").exists()]
        if len(entries) > FOLDER_MAX:
            long.append(f"{folder.relative_to(ROOT)} ({len(entries)})")
    assert not long, f"packages of more than {FOLDER_MAX} entries: {', '.join(long)}"


# A hint, not a rule (README.md, "Contributing"): a module is split when it
# does two jobs, never to meet a number.
LINES_HINT = 400


class SizeHint(UserWarning):
    """A module over LINES_HINT lines: worth a look, not a failure."""


def test_every_module_says_its_job_and_big_ones_are_named():
    big = []
    for path in sorted((ROOT / "cutimeline").rglob("*.py")):
        text = path.read_text()
        if path.name != "__main__.py":
            assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)}: no docstring"
        lines = text.count("\n")
        if lines > LINES_HINT:
            big.append(f"{path.relative_to(ROOT)} ({lines})")
    if big:
        warnings.warn(SizeHint(f"{len(big)} modules over ~{LINES_HINT} lines: does each "
                               f"do one job? {', '.join(big)}"))


def _imports_of(path):
    """(line, module, names) of each ``from ... import`` of ``path``, the
    module resolved against its package ("cutimeline.x.y")."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, [a.name for a in node.names]


def test_no_module_imports_another_modules_private_name():
    # A name shared across modules is public inside its package: no
    # ``from .x import _name`` (docs/ARCHITECTURE.md; rename it without the underscore).
    found = [f"{path.relative_to(ROOT)}:{line} from {module} import {name}"
             for path in sorted((ROOT / "cutimeline").rglob("*.py"))
             for line, module, names in _imports_of(path)
             if module == "cutimeline" or module.startswith("cutimeline.")
             for name in names if name.startswith("_") and not name.startswith("__")]
    assert found == [], f"{len(found)} imports of private names:\n" + "\n".join(found)


def _code_strings(tree):
    """The string constants of a module that are not docstrings."""
    docs = {id(b[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            for b in [n.body] if b and isinstance(b[0], ast.Expr)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


BENCH_MODULE = re.compile(r"^(bench|verdict)_\w+$|^benchmarks(\.|$)")


def test_no_test_imports_a_benchmark():
    # Benchmarks measure; a test's oracle is a golden file under tests/data.
    # tests/bench/ runs the benchmarks whose goals are judged on real timing
    # (``bench``-marked: not in the README's test command), so it may
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        # test_docs.py reads benchmarks' docstrings as text (the files they
        # cite must exist) and imports or runs none of them
        if path.name in ("test_package.py", "test_docs.py") \
                or "bench" in path.relative_to(ROOT).parts[1:2]:
            continue
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        found += [f"{path.relative_to(ROOT)}: imports {m}" for m in names
                  if BENCH_MODULE.match(m)]
        # sys.path/PYTHONPATH pointed at benchmarks/, or code run from there
        found += [f"{path.relative_to(ROOT)}: names {s.strip()[:60]!r}"
                  for s in _code_strings(tree)
                  if s == "benchmarks" or re.search(r"benchmarks[/\\]\w+\.py", s)
                  or re.search(r"\bimport\b[^\n]*\b(bench|verdict)_\w+", s)]
    assert found == [], "\n".join(found)


# pytest's collection of tests/ as the README's command makes it (the
# project's ini, norecursedirs, the conftests), with each test file it finds
# printed and left unread: importing every test module took 13 s.
_COLLECT = """
import sys, pytest

found = []

class Unread(pytest.File):
    def collect(self):
        found.append(self.path.relative_to(self.config.rootpath).as_posix())
        return []

class StandIn:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(self, module_path, parent):
        return Unread.from_parent(parent, path=module_path)

rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                 plugins=[StandIn()])
print("\\n".join(found))
sys.exit(rc)
"""


@pytest.mark.slow
def test_every_stage_folder_of_tests_is_collected():
    # pytest skips folders named dist/ or build/ unless told otherwise
    proc = subprocess.run([sys.executable, "-c", _COLLECT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout + proc.stderr
    out = proc.stdout
    seen = {line.split("/")[1] for line in out.splitlines()
            if line.startswith("tests/") and line.count("/") >= 2}
    assert seen >= set(STAGES), sorted(set(STAGES) - seen)


def test_each_folder_of_tests_runs_alone():
    # a test file may import a sibling test file (its folder is on the path
    # when it runs) or a helper at the top of tests/, never another folder's
    import ast
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                assert (path.parent / f"{node.module}.py").exists(), \
                    f"{path.relative_to(ROOT)} imports {node.module} from another folder"
