"""llamacpp.client against the real llama-server on a tiny model: props, tokenizing, exact
prompts, completions, filling the context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from moetune.errors import BadValueError, ServerFailedError
from moetune.llamacpp import process as srv
from moetune.llamacpp.client import ServerClient, fill_context

from support.llama import bin_path

# --- a real tiny model ------------------------------------------------------------------------

N_CTX = 512


@pytest.fixture(scope="module")
def live(
    tiny_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerClient]:
    """A ready llama-server on the tiny qwen3moe with -c 512 (4 slots, unified KV)."""
    args = ["-m", str(tiny_models["qwen3moe"]), "-c", str(N_CTX)]
    log_dir = tmp_path_factory.mktemp("bench-logs")
    server = srv.launch(bin_path("llama-server"), args, log_dir=log_dir)
    with server, ServerClient(server.url, timeout=120) as client:
        waited = client.wait_ready(60, server.check_alive)
        assert 0 < waited < 60  # it polled until the model was loaded, within the timeout
        assert httpx.get(f"{server.url}/health", timeout=5).json() == {"status": "ok"}
        yield client


def test_props_and_n_ctx(live: ServerClient) -> None:
    assert live.n_ctx() == N_CTX  # unified cache: one request may use the whole -c
    assert live.props()["total_slots"] == 4


def test_tokenize_detokenize(live: ServerClient) -> None:
    tokens = live.tokenize("the cat sat")
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert live.detokenize(tokens) == "the cat sat"
    assert live.tokenize("") == []  # the tiny vocab adds no BOS


@pytest.mark.parametrize("n", [1, 2, 7, 64, 333, N_CTX - 17])
def test_prompt_of_tokens_is_exact(live: ServerClient, n: int) -> None:
    prompt = live.prompt_of_tokens(n)
    assert len(live.tokenize(prompt)) == n
    assert live.complete(prompt, 1).prompt_n == n  # /completion reads it the same way


@pytest.mark.parametrize("stream", [True, False])
def test_complete(live: ServerClient, stream: bool) -> None:
    result = live.complete(live.prompt_of_tokens(40), 16, stream=stream)
    assert (result.prompt_n, result.predicted_n, result.stop_type) == (40, 16, "limit")
    assert result.prompt_ms > 0 and result.predicted_ms > 0
    assert result.prompt_per_second > 0 and result.predicted_per_second > 0
    assert result.wall_s > 0
    if stream:
        assert result.ttft_s is not None and 0 < result.ttft_s < result.wall_s
        assert result.client_decode_tps is None or result.client_decode_tps > 0
    else:
        assert result.ttft_s is None and result.client_decode_tps is None


def test_complete_over_the_context_is_refused(live: ServerClient) -> None:
    with pytest.raises(ServerFailedError, match="exceeds the available context size"):
        live.complete(live.prompt_of_tokens(N_CTX), 4)


def test_fill_context(live: ServerClient) -> None:
    capped = fill_context(live, 100_000, n_predict=8)
    assert (capped.prompt_n, capped.predicted_n) == (N_CTX - 8 - 1, 8)
    small = fill_context(live, 100, n_predict=4)
    assert (small.prompt_n, small.predicted_n) == (100, 4)
    with pytest.raises(BadValueError):
        fill_context(live, 100, n_predict=N_CTX)
