"""Where the hub is and who we are to it, from the environment as llama.cpp reads it
(common/common.cpp common_get_model_endpoint; common/arg.cpp ``-hft`` defaults to HF_TOKEN),
and how long moetune waits for it (``--timeout``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_endpoint() -> str:
    """``$MODEL_ENDPOINT``, else ``$HF_ENDPOINT``, else https://huggingface.co (no final /)."""
    endpoint = os.environ.get("MODEL_ENDPOINT") or os.environ.get("HF_ENDPOINT")
    return (endpoint or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """``$HF_TOKEN``; like llama.cpp, no token file is read (what llama-server can fetch is
    what moetune can plan)."""
    return os.environ.get("HF_TOKEN", "").strip() or None


DEFAULT_TIMEOUT_S = 60.0
_TIMEOUT_S: ContextVar[float] = ContextVar("moetune_hub_timeout_s", default=DEFAULT_TIMEOUT_S)


def hub_timeout() -> float:
    """How long one network step may take in all (seconds): a repository's listing (refs and
    every tree page), or one model's headers (every ranged read); each request within it."""
    return _TIMEOUT_S.get()


@contextmanager
def network_timeout(seconds: float) -> Iterator[None]:
    """:func:`hub_timeout` is ``seconds`` inside the block (a command's ``--timeout``)."""
    token = _TIMEOUT_S.set(seconds)
    try:
        yield
    finally:
        _TIMEOUT_S.reset(token)
