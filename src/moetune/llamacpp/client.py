"""HTTP client for a running llama-server: readiness, tokens, timed completions (only httpx user).

Facts from llama.cpp build 11434 (tools/server):

- Every endpoint answers 503 ``{"error": {"message": "Loading model", ...}}`` while loading;
  ``/health`` answers 200 ``{"status": "ok"}`` once ready.
- ``/completion`` tokenizes a string prompt with ``add_special = true`` and ``parse_special =
  true``; ``/tokenize`` defaults to ``add_special = false``, so ``tokenize`` sends ``true``.
- A stream is ``data: {json}`` events separated by blank lines, ``:`` pings, no ``[DONE]`` for
  ``/completion``; the last chunk has ``"stop": true`` and ``timings``.  An error before the
  first chunk is an ordinary HTTP error; later it is a ``data: {"error": {...}}`` event.
- ``/props`` ``default_generation_settings.n_ctx`` is the context of one slot
  (``llama_n_ctx_seq`` capped by the training context).  With ``-np`` auto (4 slots, unified
  KV cache) one request may use all of ``-c``; with ``-np N`` and no ``--kv-unified``, ``-c / N``.
  A prompt of ``n_ctx`` tokens or more is refused; generation stops when
  ``prompt + generated + 1 >= n_ctx``, hence ``fill_context``'s cap of ``n_ctx - n_predict - 1``.
- ``/v1/chat/completions`` with ``"stream": true`` sends ``chat.completion.chunk`` events: first
  a ``delta`` with only ``"role": "assistant"``, then ``delta.content`` pieces, then a chunk
  with ``finish_reason`` (and ``timings``), then ``data: [DONE]``.  The templated prompt is
  tokenized with ``add_special`` and ``parse_special`` like ``/completion``'s; ``/apply-template``
  returns that templated prompt without generating.
- ``"id_slot": N`` puts a request on slot N (``% n_slots``; -1, the default: the slot whose
  cached prompt is most like it, else the least recently used, server-context.cpp
  ``get_available_slot``). With ``cache_prompt`` false a request clears its slot's cells from
  position 0, but the other slots keep theirs in the unified KV cache, and the attention of a
  later request on another slot spans them too (masked). Every request here goes to
  ``MEASURED_SLOT``, so the cache holds the request being timed and nothing else, after a fill
  as without one (on the rig's tiny model the cells of a 4000-token prompt left on another
  slot cost 3 % of decode, within the noise: 521 against 537 tok/s, medians of 12).
- ``"return_progress": true`` in a stream adds chunks with ``prompt_progress {total, cache,
  processed, time_ms}`` while the prompt is processed: one when it starts (0), one after each
  batch (``-b``, default 2048 tokens), the last with ``processed == total``; they carry
  ``content ""`` and a placeholder ``tokens [0]``, never a generated token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, cast

import httpx
from pydantic import BaseModel, ConfigDict

from moetune.errors import BadValueError, ServerFailedError

POLL_S = 0.1
MEASURED_SLOT = 0  # the one slot every request of moetune's goes to (see above)
Progress = Callable[[int, int], None]  # (prompt tokens processed, of total)
HEALTH_TIMEOUT_S = 2.0
# Filler words for prompts of an exact token count (each word is its own pre-token in BPE).
_FILLER_TEXT = (
    "the of and to in is was for on that with as by at from his her an were are which this "
    "be or has had not but first one their its new after who they have two been other when "
    "there all during into school time may years more most only over city some world would "
    "where later up such used many can state about national out known university united then "
    "made"
)
_WORDS: tuple[str, ...] = tuple(_FILLER_TEXT.split(" "))
# Appended one at a time to close the last few tokens of the gap; each try is verified.
_FILLERS: tuple[str, ...] = ("\n", " a", ".", " 7", ",", " x", "!", " ", "-", "?")


class CompletionResult(BaseModel):
    """One ``/completion``: the server's timings plus what the client measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_s: float | None  # client: request sent -> first chunk with a token (stream only)
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    prompt_per_second: float
    predicted_per_second: float
    client_decode_tps: float | None  # client: (predicted_n - 1) / (final chunk - first token)
    wall_s: float  # client: request sent -> answer complete
    stop_type: str | None  # "limit", "eos", "word", ...
    content: str


def _error_message(payload: Any) -> str:
    """The message inside a llama-server ``{"error": ...}`` payload."""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error)


def _dispatch(data: list[str]) -> dict[str, Any] | None:
    """One SSE event's joined data as a JSON object; None for ``[DONE]``."""
    payload = "\n".join(data)
    if payload.strip() == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ServerFailedError(f"llama-server stream cut mid-chunk: {payload[:120]!r}") from exc
    if not isinstance(event, dict):
        raise ServerFailedError(f"unexpected event in llama-server stream: {payload[:120]!r}")
    if "error" in event:
        raise ServerFailedError(f"llama-server error mid-stream: {_error_message(event)}")
    return cast(dict[str, Any], event)


def _sse_events(lines: Iterable[str]) -> Iterator[list[str]]:
    """Group SSE lines into events (their ``data:`` lines); comments and other fields dropped."""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield data
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:  # the stream ended without the closing blank line
        yield data


def parse_sse_lines(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """JSON chunks of a ``/completion`` stream.

    Raises ServerFailedError on an ``{"error": ...}`` event, a chunk cut mid-JSON, or a stream
    that ends before a chunk with ``"stop": true`` (or ``[DONE]``).
    """
    finished = False
    for data in _sse_events(lines):
        event = _dispatch(data)
        if event is None:
            return
        yield event
        finished = finished or event.get("stop") is True
    if not finished:
        raise ServerFailedError("llama-server stream ended before its final chunk")


def _num(timings: dict[str, Any], key: str) -> float:
    """A timing figure; llama.cpp may send null (e.g. a rate over zero tokens)."""
    value = timings.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _result(
    final: dict[str, Any],
    content: str,
    wall_s: float,
    ttft_s: float | None,
    decode_tps: float | None,
) -> CompletionResult:
    """A CompletionResult from the final chunk (or the whole non-streamed answer)."""
    timings = final.get("timings")
    if not isinstance(timings, dict):
        raise ServerFailedError("llama-server answer has no timings")
    return CompletionResult(
        ttft_s=ttft_s,
        prompt_n=int(_num(timings, "prompt_n")),
        prompt_ms=_num(timings, "prompt_ms"),
        predicted_n=int(_num(timings, "predicted_n")),
        predicted_ms=_num(timings, "predicted_ms"),
        prompt_per_second=_num(timings, "prompt_per_second"),
        predicted_per_second=_num(timings, "predicted_per_second"),
        client_decode_tps=decode_tps,
        wall_s=wall_s,
        stop_type=final.get("stop_type"),
        content=content,
    )


class _StreamClock:
    """Arrival times in a stream: the first chunk carrying a token, and the final chunk.

    llama-server holds back a token whose text ends in an incomplete UTF-8 sequence, so the
    first token's chunk can come late with byte-level vocabularies (real models are
    unaffected), as late as the final chunk: then that is when the first token arrived.
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.final: float | None = None

    def chunk(self, event: dict[str, Any]) -> None:
        """Record one chunk's arrival (call right as it arrives)."""
        now = time.perf_counter()
        if event.get("stop") is True:
            self.final = now
            predicted = (event.get("timings") or {}).get("predicted_n") or 0
            if self.first is None and predicted > 0:  # every token was held back until now
                self.first = now
        elif "prompt_progress" in event:  # its tokens [0] is a placeholder
            return
        elif self.first is None and (event.get("tokens") or event.get("content")):
            self.first = now

    def ttft_s(self) -> float | None:
        """Request sent -> first token chunk."""
        return None if self.first is None else self.first - self.start

    def decode_tps(self, predicted_n: int) -> float | None:
        """Tokens after the first over the time from the first token chunk to the final one."""
        if self.first is None or self.final is None or predicted_n < 2:
            return None
        span = self.final - self.first
        return (predicted_n - 1) / span if span > 0 else None


def _chat_delta(event: dict[str, Any]) -> dict[str, Any]:
    """The ``delta`` of a chat chunk's first choice (empty when there is none)."""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        if isinstance(delta, dict):
            return cast(dict[str, Any], delta)
    return {}


def _chat_finish(event: dict[str, Any]) -> str | None:
    """The ``finish_reason`` of a chat chunk's first choice, if set."""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return str(reason) if reason is not None else None
    return None


class _ChatClock(_StreamClock):
    """``_StreamClock`` for chat chunks: a token is a delta with text beyond the role."""

    def chunk(self, event: dict[str, Any]) -> None:
        now = time.perf_counter()
        if "timings" in event or _chat_finish(event) is not None:
            self.final = now if self.final is None else self.final
        elif self.first is None and any(
            value for key, value in _chat_delta(event).items() if key != "role"
        ):
            self.first = now


def _words(n: int) -> str:
    """The first ``n`` filler words, space-separated."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(n))


def build_prompt(n_tokens: int, count: Callable[[str], int]) -> str:
    """A text of exactly ``n_tokens`` tokens as ``count`` measures them (a tokenizer call).

    Finds the longest run of filler words that fits by bisection, then closes the gap of a few
    tokens with single verified additions.  ServerFailedError if that fails.
    """
    base = count("")
    if n_tokens < base:
        raise BadValueError(f"a prompt needs at least {base} tokens, asked for {n_tokens}")
    text = _words(_word_run(n_tokens, base, count))
    return _close_gap(text, count(text), n_tokens, count)


def _word_run(n_tokens: int, base: int, count: Callable[[str], int]) -> int:
    """The most filler words whose text counts at most ``n_tokens`` tokens."""
    per_word = max(count(_words(64)) - base, 1) / 64
    guess = int((n_tokens - base) / per_word)
    lo, hi = max(0, int(guess * 0.98) - 2), int(guess * 1.02) + 2
    if lo and count(_words(lo)) > n_tokens:
        lo = 0
    while count(_words(hi)) <= n_tokens:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # count(_words(lo)) <= n_tokens < count(_words(hi))
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(_words(mid)) <= n_tokens else (lo, mid)
    return lo


def _close_gap(text: str, have: int, want: int, count: Callable[[str], int]) -> str:
    """Append fillers, each checked to add exactly one token, until ``want`` tokens."""
    while have < want:
        for filler in _FILLERS:
            if count(text + filler) == have + 1:
                text, have = text + filler, have + 1
                break
        else:
            raise ServerFailedError(f"could not build a prompt of exactly {want} tokens")
    return text


class ServerClient:
    """A synchronous client for one llama-server (proxies from the environment are ignored)."""

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.url, timeout=httpx.Timeout(timeout, connect=5.0), trust_env=False
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, request: httpx.Request, stream: bool = False) -> httpx.Response:
        """Send; once more if the server had closed the pooled connection without answering.

        cpp-httplib closes a keep-alive connection after 100 requests or 5 s idle; a request
        sent on it just then gets no answer at all.
        """
        try:
            return self._http.send(request, stream=stream)
        except httpx.RemoteProtocolError:
            return self._http.send(request, stream=stream)

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """JSON answer of one request; ServerFailedError for transport or HTTP errors."""
        try:
            response = self._send(self._http.build_request(method, path, **kwargs))
        except httpx.HTTPError as exc:
            raise ServerFailedError(f"llama-server at {self.url} did not answer: {exc}") from exc
        if response.status_code != 200:
            raise ServerFailedError(
                f"llama-server {path} answered {response.status_code}: {_body_error(response)}"
            )
        return response.json()

    def _health(self) -> bool:
        """True when ``/health`` says ready (503 while loading, refused before binding)."""
        try:
            request = self._http.build_request("GET", "/health", timeout=HEALTH_TIMEOUT_S)
            response = self._send(request)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def reachable(self) -> bool:
        """True when something answers HTTP at the URL, whatever the status (503 included)."""
        try:
            request = self._http.build_request("GET", "/health", timeout=HEALTH_TIMEOUT_S)
            self._send(request)
        except httpx.HTTPError:
            return False
        return True

    def wait_ready(
        self,
        timeout_s: float,
        alive: Callable[[], bool],
        on_wait: Callable[[float], None] | None = None,
    ) -> float:
        """Poll ``/health`` until ready; the seconds waited.

        ServerFailedError when ``alive()`` turns False (``alive`` may raise its own, more
        precise error, see ``RunningServer.check_alive``) or after ``timeout_s``.
        ``on_wait(elapsed_s)`` is called on every poll.
        """
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < timeout_s:
            if not alive():
                raise ServerFailedError("llama-server exited while loading the model")
            if self._health():
                return elapsed
            if on_wait is not None:
                on_wait(elapsed)
            time.sleep(POLL_S)
        raise ServerFailedError(
            f"llama-server at {self.url} was not ready after {timeout_s:g} s",
            hint="a large model can take long to load: raise the timeout",
        )

    def props(self) -> dict[str, Any]:
        """``/props``."""
        return cast(dict[str, Any], self._request("GET", "/props"))

    def n_ctx(self) -> int:
        """Context size of one slot (``/props`` default_generation_settings.n_ctx)."""
        return int(self.props()["default_generation_settings"]["n_ctx"])

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special`` (BOS) as ``/completion`` does by default."""
        body = {"content": text, "add_special": add_special}
        return [int(t) for t in self._request("POST", "/tokenize", json=body)["tokens"]]

    def detokenize(self, tokens: list[int]) -> str:
        """Text of ``tokens``."""
        return str(self._request("POST", "/detokenize", json={"tokens": tokens})["content"])

    def prompt_of_tokens(self, n_tokens: int) -> str:
        """A prompt that ``/completion`` reads as exactly ``n_tokens`` tokens (BOS included)."""
        return build_prompt(n_tokens, lambda text: len(self.tokenize(text)))

    def apply_template(self, content: str) -> str:
        """The prompt ``/v1/chat/completions`` builds for one user message ``content``."""
        body = {"messages": [{"role": "user", "content": content}]}
        return str(self._request("POST", "/apply-template", json=body)["prompt"])

    def chat_tokens(self, content: str) -> int:
        """How many prompt tokens one user message ``content`` costs, chat template included."""
        return len(self.tokenize(self.apply_template(content)))

    def chat_prompt_of_tokens(self, n_tokens: int) -> str:
        """A user message whose chat prompt is exactly ``n_tokens`` tokens, template included.

        BadValueError when ``n_tokens`` is below the template's own (``chat_tokens("")``).
        """
        return build_prompt(n_tokens, self.chat_tokens)

    def chat(
        self,
        content: str,
        n_predict: int,
        *,
        ignore_eos: bool = True,
        image: str | None = None,
        slot: int = MEASURED_SLOT,
    ) -> CompletionResult:
        """One uncached, streamed ``/v1/chat/completions`` with one user message, timed;
        ``image`` (a ``data:`` URI) goes with it as an OpenAI ``image_url`` part; ``slot``:
        the slot it runs on (concurrent requests: one each)."""
        message: str | list[dict[str, Any]] = content
        if image is not None:
            message = [
                {"type": "text", "text": content},
                {"type": "image_url", "image_url": {"url": image}},
            ]
        body = {
            "messages": [{"role": "user", "content": message}],
            "max_tokens": n_predict,
            "stream": True,
            "cache_prompt": False,
            "id_slot": slot,
            "ignore_eos": ignore_eos,
        }
        try:
            return self._chat_stream(body)
        except httpx.HTTPError as exc:
            raise ServerFailedError(f"llama-server /v1/chat/completions failed: {exc!r}") from exc

    def _chat_stream(self, body: dict[str, Any]) -> CompletionResult:
        clock = _ChatClock()
        parts: list[str] = []
        final: dict[str, Any] | None = None
        finish: str | None = None
        path = "/v1/chat/completions"
        response = self._send(self._http.build_request("POST", path, json=body), True)
        try:
            _check_status(response, path)
            for event in parse_sse_lines(response.iter_lines()):
                clock.chunk(event)
                parts.append(str(_chat_delta(event).get("content") or ""))
                finish = _chat_finish(event) or finish
                final = event if "timings" in event else final
        finally:
            response.close()
        if final is None:
            raise ServerFailedError("llama-server chat stream had no timings")
        wall_s = time.perf_counter() - clock.start
        result = _result(
            {**final, "stop_type": finish}, "".join(parts), wall_s, clock.ttft_s(), None
        )
        return result.model_copy(update={"client_decode_tps": clock.decode_tps(result.predicted_n)})

    def complete(
        self,
        prompt: str | list[int],
        n_predict: int,
        stream: bool = True,
        *,
        ignore_eos: bool = True,
        on_progress: Progress | None = None,
        slot: int = MEASURED_SLOT,
    ) -> CompletionResult:
        """One uncached ``/completion``, timed; ``ignore_eos`` makes it generate ``n_predict``.
        ``on_progress(processed, total)``: the prompt's progress as the server reports it
        (streamed requests only); ``slot``: the slot it runs on."""
        body = {
            "prompt": prompt,
            "n_predict": n_predict,
            "cache_prompt": False,
            "id_slot": slot,
            "stream": stream,
            "ignore_eos": ignore_eos,
            "return_tokens": True,
        }
        if stream and on_progress is not None:
            body["return_progress"] = True
        try:
            return self._stream(body, on_progress) if stream else self._complete_once(body)
        except httpx.HTTPError as exc:
            raise ServerFailedError(f"llama-server /completion failed: {exc!r}") from exc

    def _complete_once(self, body: dict[str, Any]) -> CompletionResult:
        start = time.perf_counter()
        answer = self._request("POST", "/completion", json=body)
        wall_s = time.perf_counter() - start
        return _result(answer, str(answer.get("content", "")), wall_s, None, None)

    def _stream(self, body: dict[str, Any], on_progress: Progress | None) -> CompletionResult:
        clock = _StreamClock()
        parts: list[str] = []
        final: dict[str, Any] | None = None
        response = self._send(self._http.build_request("POST", "/completion", json=body), True)
        try:
            if response.status_code != 200:
                response.read()
                raise ServerFailedError(
                    f"llama-server /completion answered {response.status_code}: "
                    f"{_body_error(response)}"
                )
            for event in parse_sse_lines(response.iter_lines()):
                clock.chunk(event)
                if _report_progress(event, on_progress):
                    continue
                parts.append(str(event.get("content", "")))
                final = event if "timings" in event else final
        finally:
            response.close()
        if final is None:
            raise ServerFailedError("llama-server stream had no timings")
        wall_s = time.perf_counter() - clock.start
        result = _result(final, "".join(parts), wall_s, clock.ttft_s(), None)
        tps = clock.decode_tps(result.predicted_n)
        return result.model_copy(update={"client_decode_tps": tps})


def _report_progress(event: dict[str, Any], on_progress: Progress | None) -> bool:
    """True for a ``prompt_progress`` chunk (told to ``on_progress``), which has no token."""
    progress = event.get("prompt_progress")
    if not isinstance(progress, dict):
        return False
    if on_progress is not None:
        on_progress(int(progress.get("processed", 0)), int(progress.get("total", 0)))
    return True


def _check_status(response: httpx.Response, path: str) -> None:
    """ServerFailedError with the server's message unless a streamed answer is a 200."""
    if response.status_code != 200:
        response.read()
        raise ServerFailedError(
            f"llama-server {path} answered {response.status_code}: {_body_error(response)}"
        )


def _body_error(response: httpx.Response) -> str:
    """The error message of an HTTP error answer (JSON ``{"error": ...}`` or plain text)."""
    try:
        return _error_message(response.json())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:200]


def fill_context(
    client: ServerClient, n_tokens: int, n_predict: int = 16, on_progress: Progress | None = None
) -> CompletionResult:
    """Send one prompt of ``n_tokens`` (capped to fit one slot) so KV and compute peak;
    ``on_progress(processed, total)`` as the server processes it (after each batch).

    The cap is ``n_ctx - n_predict - 1`` with ``n_ctx`` the per-slot context from ``/props``:
    llama-server refuses a prompt of ``n_ctx`` tokens and stops generating at
    ``prompt + generated + 1 >= n_ctx``.
    """
    if n_predict < 1:
        raise BadValueError(f"n_predict must be at least 1, got {n_predict}")
    n = min(n_tokens, client.n_ctx() - n_predict - 1)
    if n < 1:
        raise BadValueError(f"no room for a prompt: n_ctx {client.n_ctx()}, n_predict {n_predict}")
    return client.complete(
        client.prompt_of_tokens(n), n_predict, stream=True, on_progress=on_progress
    )
