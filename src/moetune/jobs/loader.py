"""Opening a model and what runs beside it: the files are read here, and the core is handed
plain facts (core/ opens no file).

A model's GGUF header(s) become ``ModelFacts``; ``--mmproj``'s header becomes
``ProjectorFacts``; a draft model (``-md``) is read like the model, and both vocabularies
are read for llama.cpp's compatibility check. What the flags after ``--`` load travels as
``Extras`` beside the ``Settings`` (``Settings.n_draft`` takes the tokens speculation drafts).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.core.extras import (
    TOKENS_KEY,
    VOCABULARY_KEYS,
    Extras,
    ExtrasFlags,
    Vocabulary,
    check_projector,
    check_vocabulary,
    companions,
    parse_extras_flags,
)
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.settings import Settings
from moetune.gguf.reader import read_header, read_string_array
from moetune.gguf.split import read_model

if TYPE_CHECKING:  # the projector's module brings clip's compute replay: only for an mmproj
    from moetune.core.projector import ProjectorFacts

__all__ = ["load_extras", "load_model_facts", "load_projector", "with_extras"]


def load_model_facts(path: str | os.PathLike[str]) -> ModelFacts:
    """Read a model's header(s) (every shard of a split model) and summarise them."""
    return facts_from_gguf(read_model(path))


def load_projector(path: str | os.PathLike[str]) -> ProjectorFacts:
    """Read an mmproj GGUF's header; ProjectorError if llama.cpp's clip would refuse it."""
    from moetune.core.projector import projector_from_header

    return projector_from_header(read_header(Path(path)))


def read_vocabulary(facts: ModelFacts) -> Vocabulary:
    """The tokenizer keys and token texts of a model's first file."""
    path = facts.paths[0]
    metadata = read_header(path).metadata
    model, bos, eos = (metadata.get(key) for key in VOCABULARY_KEYS)
    tokens = read_string_array(path, TOKENS_KEY)
    return Vocabulary(Path(path).name, model, bos, eos, tokens)


def load_extras(
    args: ExtrasFlags, target: ModelFacts, *, sibling: ProjectorFacts | None = None
) -> Extras | None:
    """Read the projector's and the draft's headers and check them against the target as
    llama.cpp would: the projector's embedding width (mtmd.cpp), the draft's vocabulary
    (common_speculative_are_compatible). ``sibling``: the mmproj a model named on the hub
    brings along (``-hf``), unless ``--no-mmproj`` or an ``--mmproj`` of its own. None when
    there is nothing beside the model."""
    sibling = sibling if args.mmproj_auto and args.mmproj is None else None
    if not args.any and sibling is None:
        return None
    projector = None
    if args.mmproj is not None or sibling is not None:
        projector = sibling if sibling is not None else load_projector(str(args.mmproj))
        check_projector(projector, target)
    draft = None
    if args.draft is not None:
        draft = load_model_facts(args.draft)
        check_vocabulary(read_vocabulary(draft), read_vocabulary(target))
    return companions(args, target, projector=projector, draft=draft)


def with_extras(
    settings: Settings,
    target: ModelFacts,
    pass_through: Sequence[str],
    *,
    sibling: ProjectorFacts | None = None,
) -> tuple[Settings, Extras | None]:
    """``settings`` with the tokens speculation drafts, and what ``pass_through`` loads beside
    ``target`` (its files read and checked; ``sibling``: the mmproj ``-hf`` brings)."""
    args = parse_extras_flags(pass_through)
    extras = load_extras(args, target, sibling=sibling)
    if args.n_draft:
        settings = replace(settings, n_draft=args.n_draft)
    return settings, extras
