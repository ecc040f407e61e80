"""The verified architectures are one list: the fixture matrix's (tests/archfix.py), which
docs/verified-architectures.md shows (written by scripts/verified-archs.py) and core/archs.py's
records mark verified. Cheap: no server."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from moetune.core import archs
from moetune.core.archs import arch_of, known_archs, untaught_record, verified_archs

from support.archfix import ARCHS_DOC, fixture, matrix, matrix_archs, readme_archs, readme_section

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "verified-archs.py"


def test_readme_lists_the_matrix() -> None:
    assert readme_archs(ARCHS_DOC.read_text()) == readme_section(matrix_archs()), (
        "run scripts/verified-archs.py --write"
    )


def test_verified_archs_are_the_matrix() -> None:
    assert sorted(verified_archs()) == matrix_archs()


def test_verified_archs_are_known() -> None:
    assert verified_archs() <= known_archs()


def test_an_architecture_without_a_record_is_untaught() -> None:
    record = arch_of("rnd1")
    assert record == untaught_record("rnd1")
    assert not record.known and not record.verified
    assert record.swa_pattern is None and not record.mla and record.recurrence == "ssm_conv"
    assert arch_of("qwen3moe").known and arch_of("qwen3moe").verified


def test_records_module_is_a_leaf() -> None:
    """core/archs.py imports nothing from moetune, so that no import circle can pass by it."""
    tree = ast.parse(Path(archs.__file__).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("moetune")], imported


def test_an_architecture_has_one_fixture() -> None:
    case = matrix()["qwen3moe"]
    with pytest.raises(ValueError, match="has fixtures in both factory and"):
        fixture("qwen3moe")(case.write)
    assert matrix()["qwen3moe"] is case


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
