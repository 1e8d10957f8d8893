"""Write the CLI reference (docs/cli.md) from the Typer app: every command, its help, its options.

    .venv/bin/python scripts/gen_cli_docs.py            # regenerate docs/cli.md
    .venv/bin/python scripts/gen_cli_docs.py --check    # exit 1 if docs/cli.md is out of date

The reference is built from the command tree Typer makes (``typer.main.get_command``; Typer 0.29
vendors its own click, so the tree is walked by duck typing), so a new command shows up as soon as
it is registered on ``rubrictool.cli.app`` (or one of its sub-apps).
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from rubrictool.atomic import atomic_write_text

__all__ = ["DOC_PATH", "iter_commands", "main", "render"]

ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = ROOT / "docs" / "cli.md"
REGEN = ".venv/bin/python scripts/gen_cli_docs.py"


def _is_group(cmd: Any) -> bool:
    return isinstance(getattr(cmd, "commands", None), dict)


def iter_commands(group: Any, prefix: str = "rubrictool") -> Iterator[tuple[str, Any]]:
    """(full name, command) for every command and sub-group, depth first, in registration order."""
    yield prefix, group
    if _is_group(group):
        for name, cmd in group.commands.items():
            if getattr(cmd, "hidden", False):
                continue
            yield from iter_commands(cmd, f"{prefix} {name}")


def _param_row(p: Any) -> tuple[str, str, str]:
    if p.param_type_name == "option":
        names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        if p.is_flag and not p.secondary_opts:
            default = "off" if not p.default else "on"
        else:
            default = "" if p.default is None or p.required else f"`{p.default}`"
        if p.required:
            default = "required"
        return names, (p.help or "").replace("|", "\\|"), default
    help_text = getattr(p, "help", None) or ""
    kind = "argument" + ("s…" if p.nargs == -1 else "")
    default = "required" if p.required else (f"`{p.default}`" if p.default not in (None, ()) else "")
    return f"`{(p.name or '').upper()}` ({kind})", help_text.replace("|", "\\|"), default


# Spellings that changed, accepted for one release (hidden from help, one note on stderr when used): old, new.
# The commands of the --data and RUBRIC rows are read from the app (where the old spelling is still accepted).
RENAMED_BY_HAND = [
    ("`-n` (`rubric new`)", "`--name` (`-n` stays `annotate --limit`)"),
    ("`-l` (`rubric new`)", "`--levels` (`-l` stays `rubric points --labels`)"),
    ("`--race/--no-race`, `--opcc/--no-opcc`, `--lcec/--no-lcec` (`train`)",
     "`rubrictool ablate --variants NAME` (`--no-opcc`: also `--cfg stage1.lambda_r=0`)"),
    ("`--crossfit K` (`train`)", "`--cfg stage2.crossfit=K`"),
]


def _renamed(commands: list[tuple[str, Any]]) -> list[str]:
    """The "Renamed options" section: old spelling -> new, for one release."""
    where: dict[str, list[str]] = {"--items": [], "--table": [], "--rubric": []}
    for name, cmd in commands:
        params = getattr(cmd, "params", [])
        short = name.removeprefix("rubrictool ")
        if any("--data" in p.opts and p.hidden for p in params):
            new = next(w for w in ("--items", "--table") if any(w in p.opts for p in params))
            where[new].append(f"`{short}`")
        if any(p.param_type_name == "argument" and p.hidden for p in params):
            where["--rubric"].append(f"`{short}`")
    rows = [(f"`--data` ({', '.join(where['--items'])})", "`--items`: the answers"),
            (f"`--data` ({', '.join(where['--table'])})", "`--table`: an adjudicated table"),
            (f"the rubric as an argument ({', '.join(where['--rubric'])})", "`--rubric`/`-r`"),
            *RENAMED_BY_HAND]
    intro = ("The old spellings still work in this release, hidden from the help, each printing one `note:` "
             "line on stderr; they will be removed in the next release. The old and the new spelling together is "
             "an error.")
    return ["## Renamed options", "", intro, "", "| Old | New |", "|---|---|",
            *(f"| {old} | {new} |" for old, new in rows), ""]


def render(app: typer.Typer) -> str:
    """The whole reference as Markdown."""
    root = typer.main.get_command(app)
    out = [
        "# CLI reference",
        "",
        f"<!-- Generated from the Typer app by scripts/gen_cli_docs.py; do not edit by hand. Regenerate: {REGEN} -->",
        "",
    ]
    commands = list(iter_commands(root))
    out.append("Commands: " + ", ".join(f"[`{n}`](#{n.replace(' ', '-')})" for n, _ in commands[1:]))
    out.append("")
    out.extend(_renamed(commands))
    for name, cmd in commands:
        is_group = _is_group(cmd)
        out.append(f"## {name}")
        out.append("")
        usage = cmd.get_usage(typer.Context(cmd, info_name=name)).replace("Usage: ", "")
        out.append("```")
        out.append(usage)
        out.append("```")
        out.append("")
        out.append(inspect.cleandoc(cmd.help or "").strip())
        out.append("")
        if is_group:
            subs = [f"`{name} {n}`" for n, c in cmd.commands.items() if not getattr(c, "hidden", False)]
            if subs:
                out.append("Subcommands: " + ", ".join(subs))
                out.append("")
            continue
        params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            out.append("| Argument / option | Description | Default |")
            out.append("|---|---|---|")
            for p in params:
                out.append("| " + " | ".join(_param_row(p)) + " |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the generated text")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help="where the reference lives (docs/cli.md)")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from rubrictool.cli import app

    text = render(app)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), str(args.out), "generated", lineterm="", n=1
            )
            sys.stdout.write("\n".join(list(diff)[:60]) + "\n")
            print(f"{args.out} is out of date; regenerate it with: {REGEN}", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    atomic_write_text(args.out, text)
    print(f"wrote {args.out} ({text.count(chr(10) + '## rubrictool')} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
