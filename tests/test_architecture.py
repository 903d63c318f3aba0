"""The layers (docs/architecture.md#architecture): import-linter's contracts hold, no module imports itself back through
others, the docs' picture lists the contracts' layers, and the action's scripts stay apart from the library.

The graph is read from the layout a wheel installs (``flows/`` becomes ``evaltasks.flows``, pyproject's
package-dir): a copy of ``evaltasks/`` with ``flows/`` inside, analysed by the real ``lint-imports`` and grimp in a
process whose first import path is that copy. grimp records every import statement, a function's lazy import and
a ``TYPE_CHECKING`` one included.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.process_env import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"
ACTION_DIR = REPO_ROOT / "action"
# what action/report.py renders results.json with (the installed evaltasks' own renderer and models)
REPORT_STEP_IMPORTS = ("evaltasks.reports", "evaltasks.results", "evaltasks.engine.compare")
# what action/baseline.py checks a cached baseline with: the very check `evaltasks run --baseline` applies, so a
# cache entry it passes is never refused as invalid input (exit 2) by the run it is handed to
BASELINE_STEP_IMPORTS = (
    "evaltasks.engine.baseline",
    "evaltasks.engine.compare",
    "evaltasks.errors",
)  # compare: before 1.1
# what action/missing_targets.py decides a fork's skipped targets with: the suite's target entries built by
# evaltasks' own suite code and asked their own missing_credentials() (no request is sent)
MISSING_TARGETS_STEP_IMPORTS = ("evaltasks.errors", "evaltasks.inputs")
STEP_IMPORTS = {
    "report.py": REPORT_STEP_IMPORTS,
    "baseline.py": BASELINE_STEP_IMPORTS,
    "missing_targets.py": MISSING_TARGETS_STEP_IMPORTS,
}

_GRAPH_SCRIPT = """
import json, grimp
graph = grimp.build_graph("evaltasks", include_external_packages=True, cache_dir=None)
internal = sorted(m for m in graph.modules if m == "evaltasks" or m.startswith("evaltasks."))
print(json.dumps({
    "imports": {m: sorted(graph.find_modules_directly_imported_by(m)) for m in internal},
    "lines": {f"{m} -> {t}": [d["line_number"] for d in graph.get_import_details(importer=m, imported=t)]
              for m in internal for t in graph.find_modules_directly_imported_by(m)},
}))
"""


def installed_layout(into: Path) -> Path:
    """Copy the package as a wheel lays it out (``flows/`` as ``evaltasks/flows``) under ``into``; returns ``into``."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "evaltasks", into / "evaltasks", ignore=skip)
    shutil.copytree(REPO_ROOT / "flows", into / "evaltasks" / "flows", ignore=skip)
    return into


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed layout of the working tree, in a temporary folder."""
    return installed_layout(tmp_path_factory.mktemp("layout"))


def import_cycles(imports: dict[str, list[str]]) -> list[list[str]]:
    """The import cycles of a module graph (``module -> modules it imports``): its strongly connected components
    of more than one module, and modules that import themselves; each sorted, the list sorted (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(imports):
        if start in index:
            continue
        work = [(start, iter(sorted(imports.get(start, []))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in imports:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in imports[node]:
                        cycles.append(sorted(component))
    return sorted(cycles)


def contract_layers() -> list[list[str]]:
    """The layers contract's layers, top to bottom, each a list of module names relative to ``evaltasks``
    (optional ones without their parentheses, and only where the module exists in the tree)."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "layers"]
    layers = []
    for layer in contract["layers"]:
        names = []
        for name in (part.strip() for part in re.split(r"[|:]", layer)):
            bare = name.strip("()")
            if name != bare and not any((REPO_ROOT / "evaltasks" / p).exists() for p in (bare, bare + ".py")):
                continue
            names.append(bare)
        layers.append(names)
    return layers


def docs_layers() -> list[list[str]]:
    """The layers the picture of docs/architecture.md lists, top to bottom (``cli.py`` -> ``cli``, ``flows/``
    -> ``flows``)."""
    page = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("# Architecture\n", 1)[1].split("\n## ", 1)[0]
    picture = section.split("```text\n", 1)[1].split("```", 1)[0]
    layers = []
    for line in picture.splitlines()[1:]:  # the first line names the package
        text = line.strip()
        if not text or text.startswith("↓"):
            continue
        expression = re.split(r"\s{2,}", text)[0]
        layers.append([part.strip().removesuffix("/").removesuffix(".py") for part in expression.split("|")])
    return layers


def python_imports(path: Path) -> set[str]:
    """Every module an ``import`` statement in ``path`` names, wherever it is (a function's lazy import too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.slow
def test_import_linter_contracts_hold(layout: Path) -> None:
    """``lint-imports`` (pyproject's ``[tool.importlinter]``: the layers, the core without Prefect, the core without
    the flows) passes on the installed layout."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", str(PYPROJECT), "--no-cache"], cwd=layout, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout, done.stdout


def test_no_import_cycles(layout: Path) -> None:
    """No module of evaltasks (flows included) imports itself back through others, lazily or not."""
    done = subprocess.run(
        [sys.executable, "-c", _GRAPH_SCRIPT], cwd=layout, capture_output=True, text=True, timeout=600, check=True
    )
    graph = json.loads(done.stdout)
    assert "evaltasks.flows.evaluate_suite" in graph["imports"]  # the copy was analysed, flows where they install
    cycles = import_cycles(graph["imports"])
    where = [
        f"{a} -> {b} (line {graph['lines'][f'{a} -> {b}']})"
        for cycle in cycles
        for a in cycle
        for b in graph["imports"][a]
        if b in cycle
    ]
    assert cycles == [], "\n".join(where)


def test_import_cycles_are_found() -> None:
    """The cycle search finds a cycle of three, a module importing itself, and nothing in a chain."""
    assert import_cycles({"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}) == [["a", "b", "c"], ["e"]]
    assert import_cycles({"a": ["b"], "b": ["c"], "c": []}) == []


def test_docs_list_the_contracts_layers() -> None:
    """docs/architecture.md draws exactly the layers of the layers contract, in its order."""
    assert docs_layers() == contract_layers()


@pytest.mark.slow
def test_action_stays_apart_from_the_library(layout: Path) -> None:
    """``action/``'s scripts import no evaltasks module, except the report step rendering results.json with the
    installed evaltasks' renderer, the baseline step checking a cached baseline with evaltasks' own check, and the
    missing-targets step asking the suite's targets whether this run has their secrets (names listed in
    ``STEP_IMPORTS``); and no evaltasks module imports an action script."""
    scripts = sorted(ACTION_DIR.glob("*.py"))
    assert {p.name for p in scripts} >= {"report.py", "prepare.py", "comment.py", "_github.py"}
    for script in scripts:
        used = {n for n in python_imports(script) if n == "evaltasks" or n.startswith("evaltasks.")}
        allowed = STEP_IMPORTS.get(script.name, ())
        stray = {n for n in used if not any(n == a or n.startswith(a + ".") for a in allowed)}
        assert stray == set(), f"{script.name} imports {sorted(stray)}"
    stems = {p.stem for p in scripts}
    library = [p for p in (layout / "evaltasks").rglob("*.py")]
    offenders = {
        str(p.relative_to(layout)): sorted({n.split(".")[0] for n in python_imports(p)} & stems) for p in library
    }
    assert {p: names for p, names in offenders.items() if names} == {}


def package_folders() -> set[str]:
    """Every package of the tree as it installs: folders with an ``__init__.py`` under ``evaltasks/``, and
    ``flows/`` as ``evaltasks.flows``."""
    found = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "evaltasks").rglob("__init__.py")}
    found |= {
        ".".join(("evaltasks", *p.parent.relative_to(REPO_ROOT).parts))
        for p in (REPO_ROOT / "flows").rglob("__init__.py")
    }
    return found


def test_pyproject_lists_every_package() -> None:
    """pyproject's explicit ``[tool.setuptools] packages`` names every package folder (a missing one installs without
    its modules, though an editable install works)."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert set(config["packages"]) == package_folders()


@pytest.mark.slow
def test_a_wheel_built_from_the_tree_imports_every_module(tmp_path: Path) -> None:
    """``pip wheel`` (no dependencies, setuptools as installed, nothing downloaded) of a copy of the tree holds every
    module and data file, and each module imports from the unpacked wheel (not from this checkout)."""
    import zipfile

    source = tmp_path / "source"
    installed_layout(source)
    shutil.rmtree(source / "evaltasks" / "flows")
    shutil.copytree(REPO_ROOT / "flows", source / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = (tmp_path / "dist").glob("evaltasks-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "unpacked")
    wanted = {
        p.relative_to(REPO_ROOT).as_posix()
        for p in (REPO_ROOT / "evaltasks").rglob("*")
        if p.is_file() and p.suffix in (".py", ".json", ".md", ".typed") and "__pycache__" not in p.parts
    }
    wanted |= {f"evaltasks/{p.relative_to(REPO_ROOT).as_posix()}" for p in (REPO_ROOT / "flows").glob("*.py")}
    assert wanted - names == set()
    script = (
        "import importlib, json, pkgutil, evaltasks\n"
        "names = [m.name for m in pkgutil.walk_packages(evaltasks.__path__, 'evaltasks.') if m.name != 'evaltasks.__main__']\n"
        "print(json.dumps({n: importlib.import_module(n).__file__ for n in names}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path / "unpacked", capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.splitlines()[-1])
    modules = {n.removeprefix("evaltasks.").replace(".", "/") for n in files}
    assert {
        m.removeprefix("evaltasks/").removesuffix(".py").removesuffix("/__init__")
        for m in wanted
        if m.endswith(".py") and m != "evaltasks/__init__.py" and m != "evaltasks/__main__.py"
    } == modules
    assert all(Path(f).is_relative_to(tmp_path / "unpacked") for f in files.values())
