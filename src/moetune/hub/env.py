"""Where the hub is and who we are to it, from the environment as llama.cpp reads it
(common/common.cpp common_get_model_endpoint; common/arg.cpp ``-hft`` defaults to HF_TOKEN)."""

from __future__ import annotations

import os

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_endpoint() -> str:
    """``$MODEL_ENDPOINT``, else ``$HF_ENDPOINT``, else https://huggingface.co (no final /)."""
    endpoint = os.environ.get("MODEL_ENDPOINT") or os.environ.get("HF_ENDPOINT")
    return (endpoint or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """``$HF_TOKEN``; like llama.cpp, no token file is read (what llama-server can fetch is
    what moetune can plan)."""
    return os.environ.get("HF_TOKEN", "").strip() or None
