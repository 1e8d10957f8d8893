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
