"""The README's example: what `moetune plan` prints for the header-only Qwen3-30B-A3B Q4_K_M
example (examples/models/) on a 16 GB card, run here as a child process, so that the README
never shows output moetune no longer prints.

    .venv/bin/python scripts/readme-example.py            # print the example
    .venv/bin/python scripts/readme-example.py --write    # rewrite README.md's example
    .venv/bin/python scripts/readme-example.py --check    # exit 1 when README.md differs

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
START = "<!-- readme-example:start (scripts/readme-example.py --write) -->"
END = "<!-- readme-example:end -->"
MODEL = "examples/models/Qwen3-30B-A3B-Q4_K_M.header.gguf"
ARGS = ("plan", MODEL, "--vram", "16G", "--ram", "64G")
COLUMNS = "100"
PHYSICAL_CORES = 8


def _child() -> None:
    """moetune ARGS with the host probe reporting PHYSICAL_CORES physical cores."""
    from moetune.hardware import host

    def physical_cores(cpu_sysfs: Path = host.CPU_SYSFS) -> int | None:
        return PHYSICAL_CORES

    host.physical_cores = physical_cores
    from moetune.cli import main

    sys.argv = ["moetune", *ARGS]
    main()


def example() -> str:
    """The section: the command and what it printed, between the markers."""
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "COLUMNS": COLUMNS, "MOETUNE_HOME": home, "MOETUNE_NO_MEASURE": "1"}
        env.pop("MOETUNE_LLAMA_SERVER", None)
        done = subprocess.run(
            [sys.executable, __file__, "--child"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"moetune {' '.join(ARGS)} failed:\n{done.stdout}{done.stderr}")
    output = "\n".join(line.rstrip() for line in done.stdout.rstrip().splitlines())
    return f"{START}\n```text\n$ moetune {' '.join(ARGS)}\n{output}\n```\n{END}"


def readme_section(text: str) -> str:
    """The section as ``text`` holds it now (empty if the markers are missing)."""
    if START not in text or END not in text:
        return ""
    return START + text.split(START, 1)[1].split(END, 1)[0] + END


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite README.md's example")
    group.add_argument("--check", action="store_true", help="exit 1 when README.md differs")
    group.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child()
        return
    section = example()
    if not (args.write or args.check):
        print(section)
        return
    text = README.read_text()
    current = readme_section(text)
    if not current:
        raise SystemExit(f"README.md has no {START!r} ... {END!r} markers")
    if args.write:
        README.write_text(text.replace(current, section))
    elif current != section:
        raise SystemExit("README.md's example differs: run scripts/readme-example.py --write")


if __name__ == "__main__":
    main()
