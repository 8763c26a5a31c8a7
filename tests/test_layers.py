"""The import structure (docs/architecture.md#layers): the layer contracts in .importlinter hold (lint-imports,
which counts every import, TYPE_CHECKING ones too), every module of the library sits in a layer, no module
imports another's private name, and no import circles among the imports that run (module level or deferred),
in the library or among the DAG files. No Spark; a few seconds."""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LIBRARY = REPO / "src"
DAGS = REPO / "dags"

pytestmark = pytest.mark.unit


def module_files(base: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` of ``package`` under ``base``."""
    out = {}
    for path in sorted((base / package).rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(modules: dict[str, Path], typing: bool = True) -> list[tuple[str, str, str | None, int]]:
    """Every import between the given modules (module level or deferred; with ``typing``, those under
    ``if TYPE_CHECKING:`` too), as (importer, imported module, imported name or None, line)."""
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = [
            (node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        ]
        for node in ast.walk(tree):
            if not typing and any(a <= node_line(node) <= b for a, b in typing_only):
                continue
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = package.split(".")
                    source = ".".join(parts[: len(parts) - node.level + 1] + ([source] if source else []))
                targets = [
                    (f"{source}.{a.name}", None) if f"{source}.{a.name}" in modules else (source, a.name)
                    for a in node.names
                ]
            else:
                continue
            for target, imported in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.append((name, target, imported, node.lineno))
    return found


def node_line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def private_imports(modules: dict[str, Path]) -> list[str]:
    """``from other_module import _name``: a private name used outside the module that owns it."""
    return [
        f"{a}:{line}: {name} from {b}"
        for a, b, name, line in imports(modules)
        if name is not None and name.startswith("_") and not name.startswith("__")
    ]


def circles(modules: dict[str, Path], ignored: frozenset[tuple[str, str]] = frozenset()) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each a set of modules whose imports
    that run go around a circle. A package's ``__init__`` importing its own submodules does not count, nor do
    the ``ignored`` imports (the contract's documented exceptions)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for a, b, _, _ in imports(modules, typing=False):
        if (
            not a.startswith(b + ".") and (a, b) not in ignored
        ):  # a submodule reaching its own package's __init__
            edges[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def contract() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    return config["importlinter:contract:layers"]


def contract_layers() -> list[str]:
    """The module names the layers contract of .importlinter lists."""
    names = []
    for line in contract()["layers"].split("\n"):
        names += [n.strip() for n in line.replace("|", ":").split(":") if n.strip()]
    return names


def contract_ignores() -> frozenset[tuple[str, str]]:
    """The imports the layers contract lets through, each named in .importlinter with its reason."""
    lines = [line.strip() for line in contract().get("ignore_imports", "").split("\n") if line.strip()]
    return frozenset(tuple(part.strip() for part in line.split("->")) for line in lines)  # type: ignore[misc]


def test_the_layer_contracts_hold():
    """lint-imports fails on an import from a lower layer to a higher one (the message names the import)."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache", str(REPO / ".importlinter")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_every_module_of_the_library_is_in_a_layer():
    layers = contract_layers()
    modules = module_files(LIBRARY, "changelake")
    outside = [
        m
        for m in modules
        if m != "changelake"
        and not any(m == layer or m.startswith(layer + ".") for layer in layers)
        and m not in {layer.rpartition(".")[0] for layer in layers}  # a package whose modules are layers
    ]
    assert outside == [], f"add these modules to a layer in .importlinter: {outside}"


def test_no_private_name_is_imported_across_modules():
    found = private_imports(module_files(LIBRARY, "changelake")) + private_imports(
        module_files(DAGS, "changelake_dags")
    )
    assert found == [], "make the name public (and say so in its docstring), or move the code: " + "; ".join(
        found
    )


def test_no_import_circles():
    library = circles(module_files(LIBRARY, "changelake"), contract_ignores())
    dags = module_files(DAGS, "changelake_dags")
    dags.update({p.stem: p for p in DAGS.glob("*.py")})
    assert library == [] and circles(dags) == []


def test_the_contract_lets_nothing_through():
    """No exceptions: a spec's source section is checked against the formats' declarations
    (source_options.py, below the spec), not against their decoders."""
    assert contract_ignores() == set()


def test_the_checks_find_what_they_look_for(tmp_path):
    """Planted problems are found: a private import, a circle through a deferred import."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg import a\n")
    (package / "a.py").write_text("from pkg.b import _hidden, shown\n")
    (package / "b.py").write_text("def f():\n    from pkg import a\n\n_hidden = shown = 1\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n"
    )
    (package / "e.py").write_text("from pkg import d\n")
    (package / "c.py").write_text("from . import b\n")
    modules = module_files(tmp_path, "pkg")
    assert set(modules) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e"}
    assert [p.split(": ", 1)[1] for p in private_imports({**modules})] == ["_hidden from pkg.b"]
    assert circles(modules) == [["pkg.a", "pkg.b"]]  # d <-> e only for type checking: no circle that runs
    assert circles(modules, frozenset({("pkg.b", "pkg.a")})) == []
    assert ("pkg.d", "pkg.e", None, 3) in imports(modules) and ("pkg.d", "pkg.e", None, 3) not in imports(
        modules, typing=False
    )
    assert ("pkg.c", "pkg.b", None, 1) in imports(modules)
