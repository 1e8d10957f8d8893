"""The code stays in pieces a reader can hold: in rubrictool/ and reccbm/ no module over 600 lines, no function over 80
lines or over 12 parameters (positional, keyword-only, *args and **kwargs; not self or cls). The Typer command
functions of rubrictool/cli/ are exempt: their parameters are the command's options."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 12

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _parameters(fn: Function) -> int:
    a = fn.args
    named = [x for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def _last_name(node: ast.expr) -> str | None:
    """``f`` -> f, ``module.f`` -> f, ``wrap(module.f)`` -> f (the function a registration names)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call) and node.args:
        return _last_name(node.args[0])
    return None


def _is_command_call(node: ast.expr) -> bool:
    """``app.command`` or ``app.command("name", ...)``: Typer's command decorator."""
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "command"


def _registered_commands(trees: list[ast.Module]) -> set[str]:
    """Names of the functions registered as commands with ``app.command(...)(function)``."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Call) and _is_command_call(node.func):
                name = _last_name(node.args[0]) if node.args else None
                if name:
                    names.add(name)
    return names


def shape_offenders(root: Path, packages: tuple[str, ...] = ("rubrictool", "reccbm")) -> list[str]:
    """Every module and function of ``packages`` under ``root`` over a limit, each named with its size."""
    files = {p: ast.parse(p.read_text(encoding="utf-8")) for pkg in packages
             for p in sorted((root / pkg).rglob("*.py"))}
    cli = root / "rubrictool" / "cli"
    commands = _registered_commands([t for p, t in files.items() if p.is_relative_to(cli)])
    found: list[str] = []
    for path, tree in files.items():
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel}: {lines} lines (at most {MAX_MODULE_LINES}; split it along a seam)")
        for fn in sorted((n for n in ast.walk(tree) if isinstance(n, Function)), key=lambda n: n.lineno):
            if path.is_relative_to(cli) and (fn.name in commands or any(map(_is_command_call, fn.decorator_list))):
                continue  # a Typer command: its parameters are its options
            size = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if size > MAX_FUNCTION_LINES:
                found.append(f"{rel}:{fn.lineno} {fn.name}: {size} lines (at most {MAX_FUNCTION_LINES})")
            n = _parameters(fn)
            if n > MAX_PARAMETERS:
                found.append(f"{rel}:{fn.lineno} {fn.name}: {n} parameters (at most {MAX_PARAMETERS}; group those "
                             "that travel together in a frozen dataclass)")
    return found


def test_no_module_or_function_over_its_limit() -> None:
    found = shape_offenders(ROOT)
    assert not found, "over the code-shape limits:\n" + "\n".join(found)


def test_the_checker_finds_each_kind_of_offender(tmp_path: Path) -> None:
    pkg = tmp_path / "rubrictool"
    (pkg / "cli").mkdir(parents=True)
    many = ", ".join(f"a{i}" for i in range(13))
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    (pkg / "wide.py").write_text(f"class C:\n    def m(self, {many}):\n        pass\n\n\ndef long():\n{body}")
    (pkg / "big.py").write_text("x = 1\n" * 601)
    (pkg / "fine.py").write_text(f"def f(self, {', '.join(f'a{i}' for i in range(12))}):\n    pass\n")
    (pkg / "cli" / "cmd.py").write_text(
        f"@app.command('a')\ndef a_cmd({many}):\n    pass\n\n\ndef b_cmd({many}):\n    pass\n\n\n"
        f"def helper({many}):\n    pass\n\n\napp.command('b')(handle_errors(b_cmd))\n")
    found = shape_offenders(tmp_path, ("rubrictool",))
    group = "group those that travel together in a frozen dataclass"
    assert found == [
        "rubrictool/big.py: 601 lines (at most 600; split it along a seam)",
        f"rubrictool/cli/cmd.py:10 helper: 13 parameters (at most 12; {group})",
        f"rubrictool/wide.py:2 m: 13 parameters (at most 12; {group})",
        "rubrictool/wide.py:6 long: 81 lines (at most 80)",
    ]
