"""What a model argument names: a local path, a hub name ``user/model[:quant]``, or a URL.

The repository id follows llama.cpp's ``is_valid_repo_id`` (common/hf-cache.cpp): letters,
digits and ``_``; ``/``, ``.`` and ``-`` only between them; exactly one ``/``; at most 256
characters. The quant tag is what follows the last ``:``, matched case-insensitively.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

_REPO_ID = re.compile(r"[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*/[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*")
_TAG = re.compile(r"[A-Za-z0-9_.-]*")
MAX_REPO_ID = 256


class ModelName(NamedTuple):
    """A model on the hub, as ``llama-server -hf user/model[:quant]`` takes it."""

    repo: str
    quant: str | None = None

    @property
    def spec(self) -> str:
        """``user/model:QUANT`` (the tag upper-cased, as llama.cpp lists them) or ``user/model``."""
        return f"{self.repo}:{self.quant.upper()}" if self.quant else self.repo


class ModelUrl(NamedTuple):
    """An http(s) URL of a GGUF file (a hub ``…/resolve/REV/FILE.gguf`` or any server's)."""

    url: str


def is_repo_id(text: str) -> bool:
    """True for a repository id llama.cpp accepts (``owner/name``)."""
    return len(text) <= MAX_REPO_ID and _REPO_ID.fullmatch(text) is not None


def parse_model_name(text: str) -> ModelName | None:
    """``owner/name[:quant]`` as a :class:`ModelName`, or None when it is not one (a name
    ending in ``.gguf`` is a file, not a repository)."""
    repo, colon, tag = text.partition(":")
    if not is_repo_id(repo) or repo.lower().endswith(".gguf"):
        return None
    if colon and (":" in tag or _TAG.fullmatch(tag) is None):
        return None
    return ModelName(repo, tag or None)


def parse_model_arg(text: str) -> Path | ModelName | ModelUrl:
    """What the model argument of a command names. An existing local path wins; then an
    ``http(s)://`` URL; then ``owner/name[:quant]``; anything else is a path (so a missing
    file still gets the usual "no such file" error)."""
    path = Path(text).expanduser()
    if os.path.lexists(path):
        return path
    if text[:8].lower().startswith(("http://", "https://")):
        return ModelUrl(text)
    name = parse_model_name(text)
    return path if name is None else name
