"""The README's examples: what `moetune plan` prints for the header-only Qwen3-30B-A3B Q4_K_M
example (examples/models/) on a 16 GB card (README.md), and for it with gpt-oss-20b planned to
stay loaded together on a 24 GB card, and for four concurrent streams (docs/reference.md), each
run here as a child process, so that the pages never show output moetune no longer prints.

    .venv/bin/python scripts/readme-example.py            # print the examples
    .venv/bin/python scripts/readme-example.py --write    # rewrite the pages' examples
    .venv/bin/python scripts/readme-example.py --check    # exit 1 when a page differs

tests/unit/test_readme.py runs the check. What would make the output this machine's own is
fixed: the RAM (--ram 64G), the terminal (100 columns), an empty MOETUNE_HOME (no saved speed
points or RAM bandwidth), no RAM bandwidth measured for the forecast (MOETUNE_NO_MEASURE=1, as
--no-measure: the line that says this machine's figure is left out) and the physical cores
llama-server's -t is set to (8: psutil's count is replaced in the child, which is the only
change to the program).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MODEL = "examples/models/Qwen3-30B-A3B-Q4_K_M.header.gguf"
SECOND = "examples/models/gpt-oss-20b-MXFP4.header.gguf"
REFERENCE = ROOT / "docs" / "reference.md"
# each example: its markers' name ("": README's main example), the page, moetune's arguments
EXAMPLES: dict[str, tuple[Path, tuple[str, ...]]] = {
    "": (README, ("plan", MODEL, "--vram", "16G", "--ram", "64G")),
    "serving": (REFERENCE, ("plan", SECOND, MODEL, "--together", "--vram", "24G", "--ram", "64G")),
    "parallel": (REFERENCE, ("plan", MODEL, "--vram", "16G", "--ram", "64G", "--parallel", "4")),
}
ARGS = EXAMPLES[""][1]
COLUMNS = "100"
PHYSICAL_CORES = 8


def markers(name: str) -> tuple[str, str]:
    """The lines around an example in README.md."""
    tag = f"readme-example:{name}:" if name else "readme-example:"
    return f"<!-- {tag}start (scripts/readme-example.py --write) -->", f"<!-- {tag}end -->"


def _child(args: list[str]) -> None:
    """moetune ``args`` with the host probe reporting PHYSICAL_CORES physical cores."""
    from moetune.hardware import host

    def physical_cores(cpu_sysfs: Path = host.CPU_SYSFS) -> int | None:
        return PHYSICAL_CORES

    host.physical_cores = physical_cores
    from moetune.cli import main

    sys.argv = ["moetune", *args]
    main()


def example(name: str = "") -> str:
    """An example's section: the command and what it printed, between its markers."""
    args = EXAMPLES[name][1]
    start, end = markers(name)
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "COLUMNS": COLUMNS, "MOETUNE_HOME": home, "MOETUNE_NO_MEASURE": "1"}
        env.pop("MOETUNE_LLAMA_SERVER", None)
        done = subprocess.run(
            [sys.executable, __file__, "--child", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"moetune {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    output = "\n".join(line.rstrip() for line in done.stdout.rstrip().splitlines())
    return f"{start}\n```text\n$ moetune {' '.join(args)}\n{output}\n```\n{end}"


def readme_section(text: str, name: str = "") -> str:
    """An example's section as ``text`` holds it now (empty if its markers are missing)."""
    start, end = markers(name)
    if start not in text or end not in text:
        return ""
    return start + text.split(start, 1)[1].split(end, 1)[0] + end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite README.md's example")
    group.add_argument("--check", action="store_true", help="exit 1 when README.md differs")
    group.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child)
        return
    sections = {name: example(name) for name in EXAMPLES}
    if not (args.write or args.check):
        print("\n\n".join(sections.values()))
        return
    for name, section in sections.items():
        page = EXAMPLES[name][0]
        text = page.read_text()
        current = readme_section(text, name)
        if not current:
            raise SystemExit(f"{page.name} has no {' ... '.join(markers(name))} markers")
        if args.write:
            page.write_text(text.replace(current, section))
        elif current != section:
            raise SystemExit(
                f"{page.name}'s example {' '.join(EXAMPLES[name][1][:2])} ... differs: run "
                "scripts/readme-example.py --write"
            )


if __name__ == "__main__":
    main()
