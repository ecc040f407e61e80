"""Timed requests against a running llama-server: exact-length prompts, streamed and uncached,
summarised as medians and ranges. What bench measures at each depth, and run on its best
configuration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from moetune.errors import BadValueError
from moetune.jobs.names import DEFAULT_DEPTHS, DEFAULT_N_PREDICT, DEFAULT_REPEATS
from moetune.jobs.status import NO_STATUS, StatusSink
from moetune.llamacpp.client import CompletionResult, ServerClient
from moetune.records.results import DepthResult, Sample, capped_depths, summarize

WARM_UP_TOKENS = 4


_IMAGE_TYPES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF8": "image/gif",
    b"BM": "image/bmp",
}


def image_data_uri(path: Path) -> str:
    """``data:image/png;base64,...`` for an image file (PNG, JPEG, GIF, BMP: what llama.cpp's
    stb_image decodes); BadValueError for anything else."""
    import base64

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadValueError(f"--image {path}: {exc.strerror or exc}") from None
    mime = next((m for magic, m in _IMAGE_TYPES.items() if data.startswith(magic)), None)
    if mime is None:
        raise BadValueError(f"--image {path}: not a PNG, JPEG, GIF or BMP image")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def sample_of(result: CompletionResult) -> Sample:
    """The raw sample of one timed request."""
    ttft = result.ttft_s
    return Sample(
        prompt_n=result.prompt_n,
        predicted_n=result.predicted_n,
        ttft_s=ttft,
        prompt_ms=result.prompt_ms,
        predicted_ms=result.predicted_ms,
        prefill_tps=result.prompt_per_second,
        decode_tps=result.predicted_per_second,
        client_prefill_tps=result.prompt_n / ttft if ttft else None,
        client_decode_tps=result.client_decode_tps,
        wall_s=result.wall_s,
        stop_type=result.stop_type,
    )


@dataclass(frozen=True)
class Workload:
    """What is asked of every configuration."""

    depths: tuple[int, ...] = DEFAULT_DEPTHS
    repeats: int = DEFAULT_REPEATS
    n_predict: int = DEFAULT_N_PREDICT
    endpoint: str = "chat"
    image: str | None = None  # a data: URI sent with every chat request (bench --image)
    image_name: str | None = None  # its file, for the result


@dataclass
class Prompts:
    """Prompt texts by depth, built once with the server's tokenizer (same model: reused)."""

    endpoint: str
    texts: dict[int, str] = field(default_factory=dict)
    shortest: int | None = None

    def minimum(self, client: ServerClient) -> int:
        """The shortest prompt: the chat template's own tokens, or one token."""
        if self.shortest is None:
            chat = self.endpoint == "chat"
            self.shortest = max(client.chat_tokens(""), 1) if chat else 1
        return self.shortest

    def text(self, client: ServerClient, depth: int) -> str:
        if depth not in self.texts:
            build = (
                client.chat_prompt_of_tokens if self.endpoint == "chat" else client.prompt_of_tokens
            )
            self.texts[depth] = build(depth)
        return self.texts[depth]


def request(
    client: ServerClient, endpoint: str, text: str, n_predict: int, image: str | None = None
) -> CompletionResult:
    """One timed, streamed, uncached request on ``endpoint`` (chat: with ``image`` if given,
    so the time to first token includes encoding it)."""
    if endpoint == "chat":
        return client.chat(text, n_predict, image=image)
    return client.complete(text, n_predict, stream=True)


def measure_depths(
    client: ServerClient,
    workload: Workload,
    prompts: Prompts,
    *,
    config: str,
    probe: Callable[[], int | None],
    into: list[DepthResult],
    live: StatusSink = NO_STATUS,
) -> None:
    """A warm-up, then ``repeats`` requests per depth; a DepthResult per depth into ``into``;
    each phase and request told to ``live``.

    Depths are capped by the server's context and raised to the shortest prompt (the chat
    template's own tokens), so each prompt is exactly its depth.
    """
    shortest = prompts.minimum(client)
    depths = capped_depths(workload.depths, client.n_ctx(), workload.n_predict, shortest)
    live.phase("warming up")
    request(
        client, workload.endpoint, prompts.text(client, shortest), WARM_UP_TOKENS, workload.image
    )
    for depth in depths:
        samples: list[Sample] = []
        live.phase("measuring", depth=depth)
        text = prompts.text(client, depth)
        for index in range(workload.repeats):
            live.progress(index + 1, workload.repeats)
            samples.append(
                sample_of(
                    request(client, workload.endpoint, text, workload.n_predict, workload.image)
                )
            )
        into.append(summarize(config, depth, samples, probe()))
