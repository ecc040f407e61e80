"""docs/options.md: every command and option of moetune, read off the CLI itself (the help
text, value names and defaults `moetune COMMAND --help` shows), so that the reference never
lacks an option or shows one that is gone.

    .venv/bin/python scripts/cli-reference.py            # print it
    .venv/bin/python scripts/cli-reference.py --write    # rewrite docs/options.md
    .venv/bin/python scripts/cli-reference.py --check    # exit 1 when docs/options.md differs

tests/unit/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's moetune, whatever is installed

DOC = ROOT / "docs" / "options.md"
HEADER = """# Every command and option

Generated from the CLI by `scripts/cli-reference.py --write` (do not edit by hand): each
command's help, its arguments and options as `moetune COMMAND --help` shows them. What the
commands do and the `--json` documents they print are described in
[reference.md](reference.md); the shared names (`--target-vram`, `--ctx`, sizes) mean the same
everywhere ([reference.md](reference.md#one-vocabulary)).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _command(path: str, command: Any) -> str:
    from typer import Context

    from moetune.cli.typer_app import PassThroughCommand

    helptext = (command.help or "").strip()
    paragraphs = [" ".join(p.split()) for p in helptext.split("\n\n") if p.strip()]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    arguments = " ".join(
        (p.metavar or p.name.upper()) + ("..." if p.nargs == -1 else "")
        for p in params
        if p.param_type_name == "argument"
    )
    usage = f"moetune {path} {arguments}".rstrip() + " [OPTIONS]"
    if isinstance(command, PassThroughCommand):
        usage += " [-- LLAMA-SERVER ARGS]"
    context = Context(command, info_name=path)
    records = [p.get_help_record(context) for p in params]
    rows = [f"| `{_cell(name)}` | {_cell(text)} |" for name, text in filter(None, records)]
    parts = [f"## `moetune {path}`", "", *[f"{p}\n" for p in paragraphs], f"`{usage}`", ""]
    if rows:
        parts += ["| option | what it is |", "|---|---|", *rows, ""]
    return "\n".join(parts)


def reference() -> str:
    """The whole page."""
    import typer.main

    from moetune.cli import app, load_commands

    load_commands()  # every command (moetune's main registers only the one it runs)

    root = typer.main.get_command(app)
    found: list[tuple[str, Any]] = []

    def walk(command: Any, prefix: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            found.append((prefix, command))

    walk(root, "")
    index = ", ".join(f"[{path}](#moetune-{path.replace(' ', '-')})" for path, _ in found)
    body = "\n".join(_command(path, command) for path, command in found)
    return f"{HEADER}\nCommands: {index}.\n\n{body}".rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite docs/options.md")
    group.add_argument("--check", action="store_true", help="exit 1 when docs/options.md differs")
    args = parser.parse_args()
    text = reference()
    if args.write:
        DOC.write_text(text)
    elif args.check:
        if not DOC.exists() or DOC.read_text() != text:
            raise SystemExit("docs/options.md differs: run scripts/cli-reference.py --write")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
