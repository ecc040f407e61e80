"""The README's "Try it without a GPU" lines, run as written (all but the first, which sets
up the environment these tests already run in)."""

from __future__ import annotations

from support.helpers import ROOT, section_block


def test_setup_line_is_the_test_setup() -> None:
    lines = section_block("Try it without a GPU")
    assert lines[0] == "bash scripts/setup-test-env.sh"
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/setup-test-env.sh && .venv/bin/python -m pytest" in readme
