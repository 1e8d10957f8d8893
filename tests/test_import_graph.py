"""rubrictool's stages import each other one way only: a test walks every import (module level and inside functions)
and fails on a cycle between the stages (rubrictool.<stage>), and reccbm never imports rubrictool."""

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
    assert "rubrictool.train" in graph and "rubrictool.runs" in graph["rubrictool.train"]  # the walk sees imports
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_reccbm_never_imports_rubrictool() -> None:
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / "reccbm").rglob("*.py")
            if any(n.split(".")[0] == "rubrictool" for n in _imports(p, "reccbm." + p.stem))]
    assert not hits, hits


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
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
    free to change inside its module."""
    hits = [h for pkg in ("rubrictool", "reccbm") for p in sorted((ROOT / pkg).rglob("*.py")) for h in _private_uses(p)]
    assert not hits, "\n".join(hits)


def test_the_private_name_check_finds_one(tmp_path: Path) -> None:
    f = tmp_path / "probe.py"
    f.write_text("from rubrictool.annotate import llm\nfrom rubrictool.io import _x, y\nfrom rubrictool.cli._common import z\n"
                 "\nllm._y()\nllm.y()\n", encoding="utf-8")
    hits = [h.split(": ", 1)[1] for h in _private_uses(f, "rubrictool.report.probe")]
    assert hits == ["from rubrictool.io import _x", "from rubrictool.cli._common (a private module of rubrictool.cli)",
                    "llm._y"]
    inside = [h.split(": ", 1)[1] for h in _private_uses(f, "rubrictool.cli.probe")]  # its own package's _module
    assert inside == ["from rubrictool.io import _x", "llm._y"]
