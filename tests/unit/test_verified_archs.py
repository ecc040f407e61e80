"""The verified architectures are one list: the fixture matrix's (tests/archfix.py), which
README.md shows (written by scripts/verified-archs.py) and core/dims.py's VERIFIED_ARCHS
holds. Cheap: no server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from moetune.core.dims import KNOWN_ARCHS, VERIFIED_ARCHS

from support.archfix import README, matrix_archs, readme_archs, readme_section

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "verified-archs.py"


def test_readme_lists_the_matrix() -> None:
    assert readme_archs(README.read_text()) == readme_section(matrix_archs()), (
        "run scripts/verified-archs.py --write"
    )


def test_verified_archs_are_the_matrix() -> None:
    assert sorted(VERIFIED_ARCHS) == matrix_archs()


def test_verified_archs_are_known() -> None:
    assert VERIFIED_ARCHS <= KNOWN_ARCHS


def test_script_prints_the_matrix() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == matrix_archs()
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
