"""The chat stream client of moetune bench on recorded chunks, against a raw HTTP server."""

from __future__ import annotations

import pytest

from moetune.errors import ServerFailedError
from moetune.llamacpp.client import ServerClient, parse_sse_lines

from support.rawhttp import raw_http_server, sse_response

# --- recorded /v1/chat/completions stream (llama.cpp build 11434, tiny qwen3moe) -------------

_HEAD = '"created":1796033977,"id":"chatcmpl-c4pU","model":"q.gguf","system_fingerprint":"b0"'
ROLE = (
    'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant",'
    f'"content":null}}}}],{_HEAD},"object":"chat.completion.chunk"}}'
)
TOKEN = (
    'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"+"}}],'
    f'{_HEAD},"object":"chat.completion.chunk"}}'
)
FINISH = (
    'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],'
    f'{_HEAD},"object":"chat.completion.chunk","timings":{{"cache_n":0,"prompt_n":47,'
    '"prompt_ms":95.534,"prompt_per_token_ms":2.03,"prompt_per_second":491.97,'
    '"predicted_n":4,"predicted_ms":4.004,"predicted_per_token_ms":1.33,'
    '"predicted_per_second":749.25}}'
)
DONE = "data: [DONE]"
ERROR = 'data: {"error":{"code":500,"message":"Compute error.","type":"server_error"}}'


def test_parse_recorded_chat_stream() -> None:
    lines = [ROLE, "", TOKEN, "", ":", "", TOKEN, "", FINISH, "", DONE, ""]
    chunks = list(parse_sse_lines(lines))
    assert len(chunks) == 4  # [DONE] ends the stream and is not a chunk
    assert chunks[-1]["timings"]["prompt_n"] == 47


def test_chat_from_recorded_chunks() -> None:
    recorded = sse_response(ROLE, TOKEN, TOKEN, TOKEN, TOKEN, FINISH, DONE)
    with raw_http_server(recorded) as url, ServerClient(url) as client:
        result = client.chat("hello", 4)
    assert (result.prompt_n, result.predicted_n, result.stop_type) == (47, 4, "length")
    assert result.content == "++++" and result.predicted_per_second == 749.25
    assert result.ttft_s is not None and 0 < result.ttft_s <= result.wall_s
    assert result.client_decode_tps is None or result.client_decode_tps > 0


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (sse_response(ROLE, TOKEN, TOKEN), "ended before its final chunk"),  # cut mid-way
        (sse_response(ROLE, TOKEN, FINISH), "ended before its final chunk"),  # no [DONE]
        (sse_response(ROLE, TOKEN, ERROR), r"error mid-stream: Compute error\."),
        (sse_response(ROLE, TOKEN[:70]), "cut mid-chunk"),
        (sse_response(ROLE, TOKEN, DONE), "had no timings"),
        (
            b"HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\n\r\n"
            b'{"error":{"code":400,"message":"request (2741 tokens) exceeds the available '
            b'context size (1024 tokens), try increasing it"}}',
            r"/v1/chat/completions answered 400: request \(2741 tokens\) exceeds",
        ),
    ],
    ids=["cut", "no-done", "error-event", "cut-mid-json", "no-timings", "http-400"],
)
def test_chat_stream_failures(response: bytes, message: str) -> None:
    with (
        raw_http_server(response) as url,
        ServerClient(url, timeout=10) as client,
        pytest.raises(ServerFailedError, match=message),
    ):
        client.chat("hello", 4)


def test_the_fit_configuration_gives_its_margins_a_unit() -> None:
    from moetune.jobs.bench import fit_description

    assert fit_description(None) == "--fit on"
    assert fit_description((24075,)) == "--fit on -fitt 24075 (MiB kept free)"
    assert "MiB" in fit_description((1024, 2048)) and "-fitt 1024,2048" in fit_description(
        (1024, 2048)
    )
