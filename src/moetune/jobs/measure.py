"""Timed requests against a running llama-server: exact-length prompts, streamed and uncached,
summarised as medians and ranges. What bench measures at each depth, and run at each launch
that fits.

One untimed request first (the first request of a server pays for first-call costs), then at
each depth at least ``repeats`` timed requests, more until they agree (the spread of their
decode and of their prefill tok/s at most ``max_spread``: settled), at most ``max_repeats`` or
until ``max_time_s`` has passed (not settled: the range is reported as it is).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field
from functools import partial
from pathlib import Path

from moetune.errors import BadValueError
from moetune.jobs.names import (
    DEFAULT_DEPTHS,
    DEFAULT_MAX_REPEATS,
    DEFAULT_MAX_SPREAD,
    DEFAULT_MAX_TIME_S,
    DEFAULT_N_PREDICT,
    DEFAULT_REPEATS,
)
from moetune.jobs.status import NO_STATUS, StatusSink
from moetune.llamacpp.client import MEASURED_SLOT, CompletionResult, ServerClient
from moetune.record import record
from moetune.records.results import (
    DepthResult,
    Sample,
    Stat,
    StreamsResult,
    capped_depths,
    steady,
    summarize,
)

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


@record(frozen=True)
class Repeats:
    """How often each depth is asked: at least ``least`` timed requests, more until they agree
    within ``max_spread``, at most ``most`` or until ``max_time_s`` has passed."""

    least: int = DEFAULT_REPEATS
    most: int = DEFAULT_MAX_REPEATS
    max_spread: float = DEFAULT_MAX_SPREAD
    max_time_s: float = DEFAULT_MAX_TIME_S

    @classmethod
    def asked(cls, least: int, most: int | None, max_spread: float, max_time_s: float) -> Repeats:
        """The options' repeats, checked: ``most`` None is the default, raised to ``least``."""
        top = max(DEFAULT_MAX_REPEATS, least) if most is None else most
        return cls(least, top, max_spread, max_time_s).check()

    def check(self) -> Repeats:
        """BadValueError for counts or bounds that cannot be kept; itself otherwise."""
        if self.least < 1:
            raise BadValueError(f"--repeats must be at least 1, got {self.least}")
        if self.most < self.least:
            raise BadValueError(
                f"--max-repeats ({self.most}) must be at least --repeats ({self.least})"
            )
        if not self.max_spread >= 0:
            raise BadValueError(f"--max-spread must be 0 or more, got {self.max_spread}")
        return self


@record(frozen=True)
class BenchRequests:
    """What is asked of every configuration."""

    depths: tuple[int, ...] = DEFAULT_DEPTHS
    repeats: Repeats = field(default_factory=Repeats)
    n_predict: int = DEFAULT_N_PREDICT
    endpoint: str = "chat"
    image: str | None = None  # a data: URI sent with every chat request (bench --image)
    image_name: str | None = None  # its file, for the result
    parallel: tuple[int, ...] = ()  # bench --parallel: each N, N requests at once


@record()
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
    client: ServerClient,
    endpoint: str,
    text: str,
    n_predict: int,
    image: str | None = None,
    *,
    slot: int = MEASURED_SLOT,
) -> CompletionResult:
    """One timed, streamed, uncached request on ``endpoint`` (chat: with ``image`` if given,
    so the time to first token includes encoding it), on ``slot``."""
    if endpoint == "chat":
        return client.chat(text, n_predict, image=image, slot=slot)
    return client.complete(text, n_predict, stream=True, slot=slot)


def concurrent_round(
    url: str, workload: BenchRequests, text: str, n: int, timeout: float
) -> list[Sample]:
    """``n`` requests of ``text`` sent at once (a thread and a connection each, released
    together), each on its own slot; their samples, in slot order."""
    barrier = threading.Barrier(n)

    def one(slot: int) -> Sample:
        with ServerClient(url, timeout) as client:
            barrier.wait()
            answer = request(
                client, workload.endpoint, text, workload.n_predict, workload.image, slot=slot
            )
        return sample_of(answer)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def measure_streams(
    client: ServerClient,
    workload: BenchRequests,
    prompts: Prompts,
    *,
    config: str,
    live: StatusSink = NO_STATUS,
) -> list[StreamsResult]:
    """Each N of ``workload.parallel``: rounds of N concurrent requests of the first depth's
    prompt (``concurrent_round``), repeated as a depth's requests are (``repeated_rounds``);
    the server has N slots or more."""
    found: list[StreamsResult] = []
    if not workload.parallel:
        return found
    shortest = prompts.minimum(client)
    n_ctx = client.n_ctx()
    (depth,) = capped_depths([workload.depths[0]], n_ctx, workload.n_predict, shortest)
    text = prompts.text(client, depth)
    for n in workload.parallel:
        live.phase("measuring", subject=f"{config}, {n} streams", depth=depth)
        rounds, settled = repeated_rounds(
            partial(concurrent_round, client.url, workload, text, n, client.timeout),
            workload.repeats,
            on_request=live.progress,
        )
        found.append(streams_result(config, n, rounds).model_copy(update={"settled": settled}))
    return found


def repeated_rounds(
    ask: Callable[[], list[Sample]],
    repeats: Repeats,
    *,
    on_request: Callable[[int, int], None] = lambda done, most: None,
    clock: Clock = time.monotonic,
) -> tuple[list[list[Sample]], bool]:
    """``ask`` for rounds until their aggregate decode tok/s (each round's streams summed)
    agree within ``repeats.max_spread`` (True), or ``repeats.most`` rounds or its time come
    first (False): ``repeated``'s rule, on the rounds' sums."""
    rounds: list[list[Sample]] = []
    start = clock()
    while True:
        on_request(len(rounds) + 1, repeats.most)
        rounds.append(ask())
        enough = len(rounds) >= max(repeats.least, 1)
        found = Stat.of([sum(s.decode_tps for s in r) for r in rounds])
        spread = found.spread if found is not None else None
        if enough and spread is not None and spread <= repeats.max_spread:
            return rounds, True
        if len(rounds) >= repeats.most or (enough and clock() - start >= repeats.max_time_s):
            return rounds, False


def streams_result(config: str, n: int, rounds: list[list[Sample]]) -> StreamsResult:
    """The rounds of ``n`` concurrent requests summed up: per round, the streams' decode tok/s
    summed (aggregate) and averaged (per stream), and their mean time to first token."""
    aggregate = Stat.of([sum(s.decode_tps for s in r) for r in rounds])
    per_stream = Stat.of([statistics.fmean(s.decode_tps for s in r) for r in rounds])
    ttfts = [[s.ttft_s for s in r if s.ttft_s is not None] for r in rounds]
    ttft = Stat.of([statistics.fmean(t) for t in ttfts if t])
    assert aggregate is not None and per_stream is not None
    return StreamsResult(
        config=config,
        streams=n,
        prompt_n=int(statistics.median(s.prompt_n for r in rounds for s in r)),
        predicted_n=int(statistics.median(s.predicted_n for r in rounds for s in r)),
        decode_tps_aggregate=aggregate,
        decode_tps_per_stream=per_stream,
        ttft_s=ttft,
        rounds=rounds,
    )


Clock = Callable[[], float]


def repeated(
    ask: Callable[[], Sample],
    repeats: Repeats,
    *,
    on_request: Callable[[int, int], None] = lambda done, most: None,
    clock: Clock = time.monotonic,
) -> tuple[list[Sample], bool]:
    """``ask`` until the samples agree (True) or a limit comes first (False); every sample, in
    order. ``on_request(n, most)`` before the n-th."""
    samples: list[Sample] = []
    start = clock()
    while True:
        on_request(len(samples) + 1, repeats.most)
        samples.append(ask())
        if steady(samples, repeats.least, repeats.max_spread):
            return samples, True
        enough = len(samples) >= repeats.least
        if len(samples) >= repeats.most or (enough and clock() - start >= repeats.max_time_s):
            return samples, False


def measure_depths(
    client: ServerClient,
    workload: BenchRequests,
    prompts: Prompts,
    *,
    config: str,
    probe: Callable[[], int | None],
    into: list[DepthResult],
    live: StatusSink = NO_STATUS,
    warm_tokens: int = 0,
) -> Sample:
    """An untimed request of the first depth's shape (its prompt at least ``warm_tokens``
    long, as far as the context holds it), then each depth repeated (``repeated``); a
    DepthResult per depth into ``into``, each phase and request told to ``live``; the
    untimed request's sample.

    A server decodes its first requests slower until a prompt longer than one ubatch has gone
    through (on the rig's RPC device, a fresh llama-server decoded 64 tokens at 170-250 tok/s
    until a 520-token prompt, 400-540 after it; a 256-token one changed nothing): bench warms
    each launch with ``warm_tokens`` past its ubatch, where run times after its fill.

    Depths are capped by the server's context and raised to the shortest prompt (the chat
    template's own tokens), so each prompt is exactly its depth.
    """
    shortest = prompts.minimum(client)
    n_ctx = client.n_ctx()
    depths = capped_depths(workload.depths, n_ctx, workload.n_predict, shortest)

    def ask(text: str) -> Sample:
        answer = request(client, workload.endpoint, text, workload.n_predict, workload.image)
        return sample_of(answer)

    live.phase("warming up")
    (warm,) = capped_depths([max(depths[0], warm_tokens)], n_ctx, workload.n_predict, shortest)
    warmup = ask(prompts.text(client, warm))
    for depth in depths:
        live.phase("measuring", depth=depth)
        text = prompts.text(client, depth)
        samples, settled = repeated(partial(ask, text), workload.repeats, on_request=live.progress)
        into.append(summarize(config, depth, samples, probe(), settled=settled))
    return warmup
