"""The README's set-up lines: "Try it without a GPU" builds only what its lines need (the rig's
CPU and RPC backends), and the test command is the one the tests run under
(server/test_readme.py runs the "Try it without a GPU" lines)."""

from __future__ import annotations

from support.helpers import ROOT, section_block


def test_setup_line_is_the_test_setup() -> None:
    lines = section_block("Try it without a GPU")
    assert lines[0] == "bash scripts/setup-test-env.sh --rig"  # CPU and RPC only: no Vulkan
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/setup-test-env.sh && .venv/bin/python -m pytest" in readme
