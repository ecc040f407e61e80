"""Models by name or URL: ``user/model[:quant]`` as llama.cpp's ``-hf`` resolves it, and GGUF
headers read from the hub with HTTP ranges, never the weights.

A layer of its own: it uses httpx (in hub/http.py only), moetune.gguf, errors, units and
store.paths, and nothing above it. Importing this package loads neither httpx nor the store:
the network functions import them when called, so ``moetune inspect FILE`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from moetune.hub.env import hub_endpoint
from moetune.hub.listing import (
    Quant,
    RepoFile,
    RepoListing,
    choose_quant,
    mmproj_for,
    quants,
)
from moetune.hub.names import ModelName, ModelUrl, parse_model_arg

if TYPE_CHECKING:
    from moetune.gguf.split import GGUFModel


def list_repo(name: ModelName) -> RepoListing:
    """The repository's files at ``main``'s commit (cached; see hub/remote.py)."""
    from moetune.hub.remote import list_repo as impl

    return impl(name)


def cached_paths(listing: RepoListing, quant: Quant) -> tuple[Path, ...] | None:
    """Every shard of ``quant`` in the local Hugging Face cache, or None if any is missing."""
    from moetune.hub.cache import cached_paths as impl

    return impl(listing, quant)


def remote_model(listing: RepoListing, quant: Quant) -> GGUFModel:
    """All shards' headers of ``quant`` (from the Hugging Face cache, else HTTP ranges)."""
    from moetune.hub.remote import remote_model as impl

    return impl(listing, quant)


def url_model(url: ModelUrl) -> GGUFModel:
    """All shards' headers of the GGUF file at ``url``, read with HTTP ranges."""
    from moetune.hub.remote import url_model as impl

    return impl(url)


__all__ = [
    "ModelName",
    "ModelUrl",
    "Quant",
    "RepoFile",
    "RepoListing",
    "cached_paths",
    "choose_quant",
    "hub_endpoint",
    "list_repo",
    "mmproj_for",
    "parse_model_arg",
    "quants",
    "remote_model",
    "url_model",
]
