"""llama.cpp refuses the headers moetune refuses (tests/support/badheaders.py), so a refusal
never stands between a user and a model llama-server would run; only the non-finite floats
load in llama-server, and moetune refuses them on purpose. A context_length of 0, which
moetune reads with a warning, loads with -c."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFValueType as VT

from support.badheaders import REFUSED, base_model, edited, write_refused
from support.factory import ModelFactory
from support.llama import LlamaBinaryError, running_server

ARGS = ("-c", "256", "--no-warmup")


@pytest.mark.parametrize("name", REFUSED)
def test_llama_server_refuses_what_moetune_refuses(
    model_factory: ModelFactory, tmp_path: Path, name: str
) -> None:
    path = write_refused(model_factory, name, tmp_path / f"{name}.gguf")
    if REFUSED[name].llama_loads:
        with running_server(path, *ARGS, timeout=60):
            return
    with pytest.raises(LlamaBinaryError, match="exited with"), running_server(path, *ARGS):
        pass


def test_a_context_length_of_0_loads_with_c(model_factory: ModelFactory, tmp_path: Path) -> None:
    path = edited(
        base_model(model_factory, "qwen3moe"),
        tmp_path / "ctx0.gguf",
        keys={"{arch}.context_length": (VT.UINT32, 0)},
    )
    with running_server(path, *ARGS, timeout=60):
        pass
