"""The package's import graph as it runs: no cycle between modules, and no
module imported by name.

The import linter (``pyproject.toml``, ``test_package.py``) checks the
layers from the ``import`` statements it sees; a module loaded by name
(``importlib.import_module("cutimeline.x")``) is invisible to it, and so is
the order in which a module's parent packages run. This test reads every
module's ``import`` and ``from ... import`` statements, at module level and
inside functions alike (a lazy import runs too, only later), and builds the
graph of what runs what:

* importing ``cutimeline.a.b`` from a module outside ``cutimeline.a`` runs
  ``cutimeline.a``'s ``__init__`` and then ``cutimeline.a.b``: one edge to
  each (a module's own parent packages have run before it, so no edge);
* ``from .pkg import name`` is an edge to ``pkg.name`` too when that is a
  module;
* imports under ``if TYPE_CHECKING:`` run never and count not.

The only import by name is the root's lazy ``__getattr__`` (``import
cutimeline`` stays cheap); its tables (``_LAZY``, ``DEPRECATED``) are read
here as edges of the root.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "cutimeline"

#: calls that import the module their first argument names
IMPORTERS = {"import_module", "__import__"}
#: modules that import by a name they are given, and the function each does
#: it in: every call of that function must name a package outside cutimeline
#: as a string (``need("wandb", ...)``: an optional dependency)
BY_A_GIVEN_NAME = {"cutimeline.integrations.logged": "need"}


def _name_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own)."""
    return {_name_of(p): p for p in sorted(PKG.rglob("*.py"))
            if "__pycache__" not in p.parts and p.name != "__main__.py"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.AST):
    """The import statements and calls of ``tree`` that run, skipping the
    bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _absolute(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    """``node``'s module, relative levels resolved from module ``name``."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if is_package else name.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _lazy_targets(tree: ast.Module) -> list[str]:
    """The root's lazy tables: ``_LAZY`` name -> module, ``DEPRECATED`` name
    -> (module, spelling)."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("_LAZY", "DEPRECATED")
                   for t in targets):
                for v in ast.literal_eval(node.value).values():
                    found.append("cutimeline." + (v[0] if isinstance(v, tuple) else v))
    return found


def _by_name(name: str, node: ast.Call, where: str,
             given: set[str]) -> tuple[str | None, str | None]:
    """(the complaint, the module it names) of a call that imports by name;
    ``given``: the names of ``BY_A_GIVEN_NAME``'s functions in this module."""
    arg = node.args[0]
    literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    ours = literal and arg.value.startswith(("cutimeline", "."))
    if _called(node) in given:
        if literal and not ours:
            return None, None
        return f"{where} imports {ast.unparse(arg)} by name ({_called(node)})", None
    if _called(node) not in IMPORTERS:
        return None, None
    if name == "cutimeline" and _called(node) == "import_module":
        return None, None   # the lazy __getattr__: its tables are read instead
    if literal and not ours:
        return None, None   # a package outside cutimeline
    if not literal and isinstance(arg, ast.Name) and name in BY_A_GIVEN_NAME:
        return None, None   # need(module, ...): its calls are checked
    return f"{where} imports {ast.unparse(arg)} by name", arg.value if ours else None


@functools.cache
def graph() -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the modules importing it runs, the imports by name found)."""
    paths = modules()
    edges: dict[str, set[str]] = {m: set() for m in paths}
    by_name: list[str] = []
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: list[str] = []
        given = {BY_A_GIVEN_NAME[name]} if name in BY_A_GIVEN_NAME else set()
        given |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  for a in n.names
                  if BY_A_GIVEN_NAME.get(_absolute(name, path.name == "__init__.py", n))
                  == a.name}
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(name, path.name == "__init__.py", node)
                targets.append(module)
                targets += [f"{module}.{a.name}" for a in node.names]
                if module in paths and module != name and any(
                        f"{module}.{a.name}" not in paths for a in node.names):
                    # a name from a package's body (its own parent's too, as
                    # ``from .. import __version__``): that body must have run
                    edges[name].add(module)
            elif node.args:
                complaint, named = _by_name(name, node, f"{path.relative_to(ROOT)}:{node.lineno}",
                                            given)
                if complaint:
                    by_name.append(complaint)
                if named and named.startswith("cutimeline"):
                    targets.append(named)   # an edge all the same
        if name == "cutimeline":
            targets += _lazy_targets(tree)
        own = name.split(".")
        for target in targets:
            parts = target.split(".")
            if parts[0] != "cutimeline":
                continue
            for i in range(1, len(parts) + 1):
                step = ".".join(parts[:i])
                # importing a.b runs a, then a.b; a module's own parents have
                # run before it; a name that is no module is no edge
                if step in paths and own[:i] != parts[:i]:
                    edges[name].add(step)
    return edges, by_name


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's,
    without recursion), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def shortest_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (to say
    in a failure how it closes)."""
    start, inside = component[0], set(component)
    came: dict[str, str | None] = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(edges[v] & inside):
            if w == start:
                path = [v]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return path[::-1] + [start]
            if w not in came:
                came[w] = v
                queue.append(w)
    return component


def test_no_module_of_the_package_is_imported_by_name():
    # importlib.import_module("cutimeline.x") hides an edge from the import
    # linter; a stage that needs a higher one is upside down (a lower
    # stage offers a hook the higher fills: Timeline.notebook_png)
    _, by_name = graph()
    assert by_name == [], "imports by name:\n" + "\n".join(by_name)


def test_the_modules_import_one_another_with_no_cycle():
    edges, _ = graph()
    found = cycles(edges)
    short = lambda m: m.removeprefix("cutimeline.")  # noqa: E731
    assert found == [], "\n".join(
        f"{len(c)} modules import one another at run time: {', '.join(map(short, c))}; "
        f"e.g. {' -> '.join(map(short, shortest_cycle(edges, c)))}" for c in found)


def test_the_graph_sees_what_python_runs():
    # the rules of graph() on known modules: a lazy import inside a
    # function, a relative one, the root's lazy table, a package's body
    edges, _ = graph()
    assert "cutimeline.rendering.notebook" in edges["cutimeline"]          # _first_picture
    assert "cutimeline.analysis.analyzer" in edges["cutimeline"]           # _LAZY["analyze"]
    assert "cutimeline.recording.ondemand" in edges["cutimeline"]          # DEPRECATED
    assert {"cutimeline.timeline", "cutimeline.timeline.timeline"} <= \
        edges["cutimeline.integrations.logged"]                             # parents run
    assert "cutimeline.analysis" in edges["cutimeline.integrations.logged"]  # a name of its body
    assert "cutimeline.analysis.analyzer" in edges["cutimeline.analysis"]   # a package's body
    assert "cutimeline.rendering" not in edges["cutimeline.rendering.figure"]  # its own parent
    assert "cutimeline._version" in edges["cutimeline.timeline.parquet"]
    assert edges["cutimeline._version"] == set()
    # and they find a cycle where there is one
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: the stages above analysis that read it only through its public names
#: (a package with all its modules, or one module)
READERS = ("cutimeline.rendering", "cutimeline.integrations", "cutimeline.cli",
           "cutimeline.commands")


@pytest.mark.parametrize("reader", READERS)
def test_readers_read_the_analysis_through_its_public_names(reader):
    # A renderer draws what the Report says, an integration logs it, the
    # command line prints it (docs/ARCHITECTURE.md): each reads the
    # Report's methods and the names ``cutimeline.analysis`` exports (its
    # ``__all__``), never a module inside analysis, whose internals may
    # then change without a figure, a logger or the CLI knowing.
    import cutimeline.analysis as analysis
    edges, _ = graph()
    mine = {m: path for m, path in modules().items()
            if m == reader or m.startswith(reader + ".")}
    assert mine, f"{reader} is no module of the package"
    inside = [f"{m} imports {t}" for m in sorted(mine)
              for t in sorted(edges[m]) if t.startswith("cutimeline.analysis.")]
    assert inside == [], f"{reader} imports analysis internals:\n" + "\n".join(inside)
    names = [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}"
             for m, path in mine.items()
             for node in _statements(ast.parse(path.read_text()))
             if isinstance(node, ast.ImportFrom)
             and _absolute(m, path.name == "__init__.py", node) == "cutimeline.analysis"
             for a in node.names if a.name not in analysis.__all__]
    assert names == [], f"{reader} imports names analysis does not export:\n" + \
        "\n".join(names)
