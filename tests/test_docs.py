"""Every module and file the prose names exists, and none lies outside the repository.

Docstrings and comments of ``cutimeline/``, ``benchmarks/`` and ``scripts/``,
and the Markdown maps (README.md, docs/ARCHITECTURE.md,
benchmarks/RESULTS.md), name modules as ``cutimeline.x.y`` and files as
``recording/opstream.py`` or ``benchmarks/bench_io.py``. When a module moves
the prose goes on naming its old place; this test resolves each name against
the tree so that the move has to update it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cutimeline"

#: Markdown files that serve as the project's map (HISTORY.md keeps old
#: runs verbatim, paths as they were then, so it is not checked).
MAPS = ("README.md", "docs/ARCHITECTURE.md", "benchmarks/RESULTS.md")

#: File names that stand for the user's own files in examples, not ours.
EXAMPLES = frozenset({
    "train.py", "run.ctl", "out.ctl", "script.py", "my_script.py", "model.py",
    "trace.json", "trace.json.gz", "run.json.gz", "timeline.png", "run.json",
    "whatif.png", "report.html", "rank-0.ctl",
})

#: Files of other projects, named by their authors' paths (pytorch/examples,
#: transformers' examples), and the example paths of docstrings.
THIRD_PARTY = frozenset({
    "mnist/main.py", "dcgan/main.py", "imagenet/main.py", "word_language_model/main.py",
    "run_clm_no_trainer.py", "run_glue_no_trainer.py",
    "text-classification/run_glue_no_trainer.py", "aten/src/ATen/autocast_mode.cpp",
    "pkg/module.py", "folder/base.png",
})

#: Modules that exist only once installed: pyproject.toml maps ``kernels/``
#: to ``cutimeline._cuda``.
INSTALLED = frozenset({"cutimeline._cuda"})

#: Where a relative path in prose may be rooted, besides the citing file's
#: own folder and the folders above it: the repository, the package
#: (``recording/opstream.py``), benchmarks (``frameworks/amp_train.py``).
BASES = (ROOT, PACKAGE, ROOT / "benchmarks", ROOT / "tests")

EXTENSIONS = ("py", "md", "toml", "json", "gz", "png", "ctl", "sh", "txt", "yml",
              "yaml", "cfg", "parquet", "html", "csv", "npz", "cpp", "cu", "h", "c",
              "svg", "pdf", "jsonl", "log", "so", "whl")

DOTTED = re.compile(r"(?<![\w.])cutimeline(?:\.[A-Za-z_]\w*)+")
# A path: words joined by "/", ending in a file name with an extension we
# know, or in a module followed by ".attribute" (``replay/compensation.costs``);
# not preceded by "/", "." or a word character (no absolute paths, no
# "../shared/...": those are inputs a command is given, not citations).
PATH = re.compile(r"(?<![\w./~$<>-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_][\w.-]*)")
BARE = re.compile(r"(?<![\w./~$<>-])([A-Za-z_]\w*\.(?:py|md))\b(?![\w/(])")


def _sources() -> list[Path]:
    found = []
    for top in ("cutimeline", "benchmarks", "scripts"):
        found += [p for p in sorted((ROOT / top).rglob("*.py"))
                  if "__pycache__" not in p.parts]
    return found


def _prose_of_python(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    try:
        text = path.read_text()
    except FileNotFoundError:  # moved while the tree was listed
        return []
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    # a docstring's lines, each with its own line number
    strings = []
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                strings.append(body[0])
        # "#:" attribute docs are comments; a string right after an
        # assignment is an attribute docstring.
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for prev, nxt in zip(node.body, node.body[1:]):
                if isinstance(prev, (ast.Assign, ast.AnnAssign)) and isinstance(nxt, ast.Expr) \
                        and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                    strings.append(nxt)
    for node in strings:
        out += [(node.lineno + i, line)
                for i, line in enumerate(node.value.value.splitlines())]
    return out


def _prose() -> list[tuple[str, int, str]]:
    """(file, line, text) of all prose the test checks."""
    out = []
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        out += [(rel, line, text) for line, text in _prose_of_python(path)]
    for name in MAPS:
        path = ROOT / name
        if path.exists():
            out += [(name, i, line) for i, line in enumerate(path.read_text().splitlines(), 1)]
    return out


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    names.add(sub.name)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
                elif isinstance(sub, ast.Assign):
                    for target in sub.targets:
                        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _resolves_dotted(name: str) -> bool:
    parts = name.split(".")[1:]
    here = PACKAGE
    for i, part in enumerate(parts):
        if (here / part).is_dir() and (here / part / "__init__.py").exists():
            here = here / part
            continue
        module = here / f"{part}.py"
        if module.exists():
            rest = parts[i + 1:]
            return not rest or rest[0] in _top_level_names(module)
        # an attribute of a package: defined in its __init__
        return part in _top_level_names(here / "__init__.py")
    return True


def _resolves_path(text: str, citing: Path) -> bool:
    text = text.rstrip(".,;:")
    candidates = [text]
    head, _, last = text.rpartition("/")
    if "." in last and last.rsplit(".", 1)[1] not in EXTENSIONS:
        # module.attribute: the module's file
        candidates = [f"{head}/{last.split('.')[0]}.py"]
    elif "." not in last:
        return True  # a folder or a word with a slash ("and/or"): not checked here
    bases = tuple(citing.parents[:len(citing.relative_to(ROOT).parts) - 1]) + BASES
    return any((base / c).exists() for base in bases for c in candidates)


_ALL_FILES = None


def _resolves_bare(name: str) -> bool:
    global _ALL_FILES
    if _ALL_FILES is None:
        _ALL_FILES = {p.name for top in ("cutimeline", "benchmarks", "scripts", "tests", "docs")
                      for p in (ROOT / top).rglob("*")} | {p.name for p in ROOT.iterdir()}
    return name in _ALL_FILES


def _references():
    for rel, line, text in _prose():
        for m in DOTTED.finditer(text):
            name = m.group(0)
            if name.split(".")[1] in EXTENSIONS or name in INSTALLED:
                continue  # a file name such as cutimeline.ctl
            yield rel, line, "module", name
        for m in PATH.finditer(text):
            token = m.group(1)
            if any(c in token for c in "*<>{}") or token.startswith(("http", "www.")):
                continue
            yield rel, line, "path", token
        for m in BARE.finditer(text):
            yield rel, line, "file", m.group(1)


def test_every_cited_module_and_file_exists():
    missing = []
    for rel, line, kind, ref in _references():
        ref = ref.rstrip(".,;:")
        name = ref.rpartition("/")[2]
        if name in EXAMPLES or ref in THIRD_PARTY or name.split(".")[0].isupper():
            continue  # an example, another project's file, a placeholder (SCRIPT.py)
        if kind == "module":
            ok = _resolves_dotted(ref)
        elif kind == "path":
            ok = _resolves_path(ref, ROOT / rel)
        else:
            ok = _resolves_bare(ref)
        if not ok:
            missing.append(f"{rel}:{line}: {ref}")
    assert not missing, "prose names what is not in the tree:\n" + "\n".join(missing)


def test_nothing_cites_a_design_doc_outside_the_repository():
    design = "DESIGN" + ".md"  # spelled apart so that this file does not cite it
    found = []
    for path in sorted(ROOT.rglob("*")):
        if path.suffix not in (".py", ".md", ".toml", ".cfg", ".txt", ".yml", ".yaml", ".sh") \
                or any(part.startswith(".") or part in ("__pycache__", "build", "wandb")
                       for part in path.relative_to(ROOT).parts) or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if design in line:
                found.append(f"{path.relative_to(ROOT)}:{i}")
    assert not found, f"{design} is not in the repository; cite docs/ARCHITECTURE.md:\n" \
        + "\n".join(found)
