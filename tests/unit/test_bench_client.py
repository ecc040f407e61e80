"""llamacpp.client: SSE parsing, exact-length prompts, and its failures against a raw HTTP
server (server/test_bench_client.py runs it against a real tiny model)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from moetune.errors import BadValueError, ServerFailedError
from moetune.llamacpp import process as srv
from moetune.llamacpp.client import ServerClient, build_prompt, parse_sse_lines

from support.rawhttp import raw_http_server, sse_response

# --- recorded /completion stream chunks (llama.cpp build 11434, tiny qwen3moe) ------------------

PARTIAL = (
    'data: {"index":0,"content":"the","tokens":[174],"stop":false,"id_slot":-1,'
    '"tokens_predicted":1,"tokens_evaluated":3}'
)
FINAL = (
    'data: {"index":0,"content":"","tokens":[],"id_slot":3,"stop":true,"model":"q.gguf",'
    '"tokens_predicted":3,"tokens_evaluated":3,"stop_type":"limit","timings":{"cache_n":0,'
    '"prompt_n":3,"prompt_ms":1.2,"prompt_per_token_ms":0.4,"prompt_per_second":2500.0,'
    '"predicted_n":3,"predicted_ms":2.0,"predicted_per_token_ms":0.67,'
    '"predicted_per_second":1500.0}}'
)
ERROR = 'data: {"error":{"code":500,"message":"Compute error.","type":"server_error"}}'
STREAM = [PARTIAL, "", ":", "", FINAL, ""]  # with an SSE ping (":") in between


def test_parse_sse_recorded_stream() -> None:
    chunks = list(parse_sse_lines(STREAM))
    assert [c["stop"] for c in chunks] == [False, True]
    assert chunks[0]["tokens"] == [174]
    assert chunks[1]["timings"]["predicted_n"] == 3


def test_parse_sse_details() -> None:
    lines = ["event: message", "data:" + PARTIAL[6:], "", "id: 7", FINAL]  # no trailing blank
    assert len(list(parse_sse_lines(lines))) == 2
    assert [c["content"] for c in parse_sse_lines([PARTIAL, "", "data: [DONE]", ""])] == ["the"]
    split = ['data: {"stop": true,', 'data: "content": "x"}', ""]  # one event, two data lines
    assert list(parse_sse_lines(split)) == [{"stop": True, "content": "x"}]
    assert list(parse_sse_lines([s + "\r\n" for s in STREAM]))[1]["stop"] is True


def test_parse_sse_stream_cut_between_chunks() -> None:
    seen: list[dict[str, object]] = []
    with pytest.raises(ServerFailedError, match="ended before its final chunk"):
        seen.extend(parse_sse_lines([PARTIAL, "", PARTIAL, ""]))
    assert len(seen) == 2  # the chunks before the cut were delivered


def test_parse_sse_stream_cut_mid_chunk() -> None:
    with pytest.raises(ServerFailedError, match="cut mid-chunk"):
        list(parse_sse_lines([PARTIAL, "", FINAL[:60]]))


def test_parse_sse_error_event() -> None:
    with pytest.raises(ServerFailedError, match=r"Compute error\."):
        list(parse_sse_lines([PARTIAL, "", ERROR, ""]))


def test_parse_sse_not_an_object() -> None:
    with pytest.raises(ServerFailedError, match="unexpected event"):
        list(parse_sse_lines(["data: [1, 2]", ""]))


# --- build_prompt with fake tokenizers --------------------------------------------------------


def _chars_of_3(text: str) -> int:
    """A tokenizer of 3-character tokens per word (ceil), plus one per separator, plus a BOS."""
    words = text.split(" ") if text else []
    return 1 + sum(-(-len(w) // 3) for w in words) + max(len(words) - 1, 0)


def _newline_merging(text: str) -> int:
    """Like a real BPE, runs of newlines merge into one token."""
    return _chars_of_3(text.replace("\n\n", "\n"))


@pytest.mark.parametrize("count", [_chars_of_3, _newline_merging, len])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 100, 1000, 4093, 20_000])
def test_build_prompt_exact(count: Callable[[str], int], n: int) -> None:
    if n < count(""):
        with pytest.raises(BadValueError):
            build_prompt(n, count)
    else:
        assert count(build_prompt(n, count)) == n


def test_build_prompt_gives_up_when_no_filler_adds_one() -> None:
    def coarse(text: str) -> int:  # every token is 10 characters long
        return -(-len(text) // 10)

    with pytest.raises(ServerFailedError, match="exactly 7 tokens"):
        build_prompt(7, lambda t: coarse(t) * 2)


# --- stand-in HTTP servers for the client's error paths ------------------------------------------


CHUNKED_CUT = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + f"{len(PARTIAL) + 2:x}\r\n{PARTIAL}\n\n\r\n".encode()
)  # the connection closes without the terminating zero-length chunk


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (sse_response(PARTIAL), "ended before its final chunk"),
        (sse_response(PARTIAL, ERROR), r"Compute error\."),
        (sse_response(PARTIAL, FINAL[:50]), "cut mid-chunk"),
        (CHUNKED_CUT, "/completion failed"),
        (
            b"HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\n\r\n"
            b'{"error":{"code":400,"message":"request (600 tokens) exceeds the available '
            b'context size (512 tokens), try increasing it","type":"exceed_context_size_error"}}',
            "answered 400: request \\(600 tokens\\) exceeds",
        ),
    ],
    ids=["cut", "error-event", "cut-mid-json", "connection-lost", "http-400"],
)
def test_complete_stream_failures(response: bytes, message: str) -> None:
    with (
        raw_http_server(response) as url,
        ServerClient(url, timeout=10) as client,
        pytest.raises(ServerFailedError, match=message),
    ):
        client.complete("hello", 4, stream=True)


def test_complete_stream_from_recorded_chunks() -> None:
    with raw_http_server(sse_response(PARTIAL, FINAL)) as url, ServerClient(url) as client:
        result = client.complete("hello", 3)
    assert (result.prompt_n, result.predicted_n, result.stop_type) == (3, 3, "limit")
    assert result.predicted_per_second == 1500.0
    assert result.content == "the"
    assert result.ttft_s is not None and result.ttft_s > 0


def test_ttft_of_a_stream_whose_tokens_all_come_in_the_final_chunk() -> None:
    """Tokens whose text ends mid-UTF-8 are held back by llama-server, at worst until the final
    chunk: the first token arrived then (a TTFT, and no decode rate from one instant)."""
    with raw_http_server(sse_response(FINAL)) as url, ServerClient(url) as client:
        result = client.complete("hello", 3)
    assert result.predicted_n == 3 and result.content == ""
    assert result.ttft_s is not None and result.ttft_s > 0
    assert result.client_decode_tps is None


def test_wait_ready_times_out_and_reports_progress() -> None:
    waits: list[float] = []
    with ServerClient(f"http://127.0.0.1:{srv.free_port()}") as client:  # nothing listens
        with pytest.raises(ServerFailedError, match=r"not ready after 0\.3 s"):
            client.wait_ready(0.3, alive=lambda: True, on_wait=waits.append)
        with pytest.raises(ServerFailedError, match="exited while loading"):
            client.wait_ready(5, alive=lambda: False)
    assert len(waits) >= 2 and waits == sorted(waits)


def test_wait_ready_while_loading_503() -> None:
    loading = (
        b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n"
        b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
    )
    with (
        raw_http_server(loading) as url,
        ServerClient(url) as client,
        pytest.raises(ServerFailedError, match="not ready"),
    ):
        client.wait_ready(0.5, alive=lambda: True)


PROPS_OK = (
    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
    b'{"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}'
)


def test_connection_closed_without_answer_is_retried_once() -> None:
    # cpp-httplib closes keep-alive connections after 100 requests or 5 s idle
    with raw_http_server(b"", PROPS_OK) as url, ServerClient(url) as client:
        assert client.n_ctx() == 4096
    with (
        raw_http_server(b"", b"", PROPS_OK) as url,
        ServerClient(url) as client,
        pytest.raises(ServerFailedError, match="did not answer"),
    ):
        client.props()


def test_unreachable_server_is_server_failed() -> None:
    client = ServerClient(f"http://127.0.0.1:{srv.free_port()}")
    with client, pytest.raises(ServerFailedError, match="did not answer"):
        client.props()
