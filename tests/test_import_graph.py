"""rubrictool's stages import each other one way only: a test walks every import (module level and inside functions)
and fails on a cycle between the stages (rubrictool.<stage>), and on a cycle between any two modules of rubrictool and
reccbm (an import moved into a function to dodge a cycle still counts); reccbm never imports rubrictool."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _unit(module: str) -> str:
    """rubrictool.report.page -> rubrictool.report (a stage: one module or one package)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}
    return out


def _graph(package: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        unit = _unit(module)
        for name in _imports(path, module):
            if not name.startswith("rubrictool."):
                continue
            target = _unit(name)
            where = ROOT / Path(*target.split("."))
            if target != unit and (where.is_dir() or where.with_suffix(".py").is_file()):  # a stage, not a name in one
                graph.setdefault(unit, set()).add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def test_no_cycle_between_rubrictools_stages() -> None:
    graph = _graph("rubrictool")
    assert "rubrictool.train" in graph["rubrictool.grade"]  # the walk sees imports (grade opens a run: train.runs)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``: annotations only, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _module_graph(packages: tuple[str, ...] = ("rubrictool", "reccbm"), root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports, at module level or inside a function (not under TYPE_CHECKING).
    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``; a module's import of its
    own package for a submodule is not an edge (the package is imported first anyway)."""
    files = {_module_of(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}

    def owner(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in files), None)

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        targets: set[str | None] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets |= {owner(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{source}.{a.name}"
                    targets.add(sub if sub in files else owner(source))
        targets -= {None, module}
        if targets:
            graph[module] = {t for t in targets if t is not None}
    return graph


def test_no_import_cycle_between_any_two_modules() -> None:
    """Module by module, in both packages, counting the imports inside functions: none leads back to itself."""
    graph = _module_graph()
    assert "rubrictool.curve.reading" in graph["rubrictool.curve.figure"]  # the walk sees module imports
    assert "rubrictool.report.markdown" in graph["rubrictool.report.write"]
    assert "reccbm.onnx_encoder" not in graph["reccbm.model"]  # an import for annotations only is not an edge
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_module_graph_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n")
    graph = _module_graph(("pkg",), tmp_path)
    assert graph["pkg.b"] == {"pkg.a"} and "pkg.c" not in graph
    assert _cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_reccbm_never_imports_rubrictool() -> None:
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / "reccbm").rglob("*.py")
            if any(n.split(".")[0] == "rubrictool" for n in _imports(p, "reccbm." + p.stem))]
    assert not hits, hits


def _module_of(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(path: Path, module: str | None = None) -> list[str]:
    """Where ``path`` reaches into another module's private names: ``from m import _x``, ``m._x`` on an imported
    project module, or an import from a ``_module`` of another package (a ``_module`` serves its own package)."""
    module = module or _module_of(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}  # local name -> project module it is bound to
    hits: list[str] = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] not in ("rubrictool", "reccbm"):
                continue
            parts = source.split(".")
            owner = next((".".join(parts[:i]) for i, p in enumerate(parts) if _private(p)), None)
            if owner is not None and package != owner and not package.startswith(owner + "."):
                hits.append(f"{where}:{node.lineno}: from {source} (a private module of {owner})")
            for a in node.names:
                if _private(a.name):
                    hits.append(f"{where}:{node.lineno}: from {source} import {a.name}")
                modules[a.asname or a.name] = f"{source}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("rubrictool", "reccbm"):
                    modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                hits.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return hits


def test_no_module_imports_another_modules_private_names() -> None:
    """What one module uses of another is public (no leading underscore, listed in ``__all__``); a ``_`` name is
    free to change inside its module. The lab, the benchmarks and the scripts use the packages' public names too."""
    hits = [h for pkg in ("rubrictool", "reccbm", "lab", "benchmarks", "scripts")
            for p in sorted((ROOT / pkg).rglob("*.py")) for h in _private_uses(p)]
    assert not hits, "\n".join(hits)


def test_the_private_name_check_finds_one(tmp_path: Path) -> None:
    f = tmp_path / "probe.py"
    f.write_text("from rubrictool.annotate import llm\nfrom rubrictool.io import _x, y\nfrom rubrictool.cli._common "
                 "import z\n\nllm._y()\nllm.y()\n", encoding="utf-8")
    hits = [h.split(": ", 1)[1] for h in _private_uses(f, "rubrictool.report.probe")]
    assert hits == ["from rubrictool.io import _x", "from rubrictool.cli._common (a private module of rubrictool.cli)",
                    "llm._y"]
    inside = [h.split(": ", 1)[1] for h in _private_uses(f, "rubrictool.cli.probe")]  # its own package's _module
    assert inside == ["from rubrictool.io import _x", "llm._y"]
