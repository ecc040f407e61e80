"""A repository's files and which of them make a quant: llama.cpp's own rules.

From common/download.cpp (build 11434): ``get_gguf_split_info`` (the tag is the last
``[-.]TAG`` of the name without ``.gguf`` and the ``-0000k-of-0000N`` suffix, upper-cased),
``gguf_filename_is_model`` (mmproj, imatrix, mtp-, eagle3-, dflash-, dspark- files are not
models), ``find_best_model`` (the tag asked for, else Q4_K_M, then Q8_0, matched by the
case-insensitive regex ``TAG[.-]`` in the path; the first model file only when no tag was
asked for), ``get_split_files`` (the shards of the same prefix and count) and
``find_best_mmproj`` (the mmproj in the model's folder or above, deepest first, then the
nearest bit width). Pure: no network, no files.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from moetune.errors import HubNotFoundError

DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
SHOWN_QUANTS = 20  # the quants an error names
NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_DIGITS = re.compile(r"[0-9]+")


class RepoFile(NamedTuple):
    """One file of a repository: its path, size, and the LFS sha256 when the hub gives it."""

    path: str
    size: int
    oid: str | None = None


class Quant(NamedTuple):
    """One model of a repository: its tag (upper case, "" when the name has none) and its
    files, the shards in order."""

    tag: str
    files: tuple[RepoFile, ...]

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def first(self) -> RepoFile:
        return self.files[0]


class RepoListing(NamedTuple):
    """A repository's files at one commit."""

    repo: str
    commit: str
    files: tuple[RepoFile, ...]

    def quants(self) -> list[Quant]:
        return quants(self)

    def model_quants(self) -> list[Quant]:
        return model_quants(self)

    def choose_quant(self, tag: str | None) -> Quant:
        return choose_quant(self, tag)

    def mmproj_for(self, quant: Quant) -> RepoFile | None:
        return mmproj_for(self, quant)


class SplitInfo(NamedTuple):
    prefix: str  # the name without .gguf and the split suffix, tag included
    tag: str
    shard: int  # 1-based (llama.cpp's index)
    shards: int


def split_info(path: str) -> SplitInfo | None:
    """llama.cpp's get_gguf_split_info; None for a name that does not end in ``.gguf``."""
    if not path.endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    if match := _SPLIT.match(prefix):
        prefix, index, count = match[1], int(match[2]), int(match[3])
    tag = _TAG.search(prefix)
    return SplitInfo(prefix, tag[1].upper() if tag else "", index, count)


def is_model_file(path: str) -> bool:
    """llama.cpp's gguf_filename_is_model."""
    name = path.rsplit("/", 1)[-1]
    return path.endswith(".gguf") and not any(word in name for word in NOT_MODELS)


def quant_bits(path_or_tag: str, *, is_tag: bool = False) -> int:
    """llama.cpp's extract_quant_bits: the first number in the tag (Q4_K_M 4, BF16 16)."""
    tag = path_or_tag if is_tag else (info.tag if (info := split_info(path_or_tag)) else "")
    digits = _DIGITS.search(tag)
    return int(digits[0]) if digits else 0


def _is_first_shard(path: str) -> bool:
    info = split_info(path)
    return info is not None and (info.shards <= 1 or info.shard == 1)


def quants(listing: RepoListing) -> list[Quant]:
    """Every model of the repository, in listing order, its shards grouped and ordered."""
    groups: dict[tuple[str, int], list[tuple[int, RepoFile]]] = {}
    for file in listing.files:
        info = split_info(file.path)
        if info is not None and is_model_file(file.path):
            groups.setdefault((info.prefix, info.shards), []).append((info.shard, file))
    found = []
    for members in groups.values():
        files = tuple(f for _, f in sorted(members, key=lambda m: m[0]))
        info = split_info(files[0].path)
        found.append(Quant(info.tag if info else "", files))
    return found


def _find_best_model(listing: RepoListing, tag: str | None) -> RepoFile | None:
    for wanted in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(wanted) + "[.-]", re.IGNORECASE)
        for file in listing.files:
            path = file.path
            if is_model_file(path) and pattern.search(path) and _is_first_shard(path):
                return file
    if not tag:
        return next(
            (f for f in listing.files if is_model_file(f.path) and _is_first_shard(f.path)), None
        )
    return None


def model_quants(listing: RepoListing) -> list[Quant]:
    """:func:`quants`, or HubNotFoundError when the repository holds no GGUF model."""
    found = quants(listing)
    if not found:
        raise HubNotFoundError(
            f"{listing.repo} has no GGUF model files ({len(listing.files)} file(s), none a "
            "model .gguf)",
            hint="moetune reads GGUF files: name a repository that has them (often *-GGUF)",
        )
    return found


def choose_quant(listing: RepoListing, tag: str | None) -> Quant:
    """The quant ``llama-server -hf repo[:tag]`` would load (find_best_model, then its
    shards); HubNotFoundError, listing the quants there are, when none matches."""
    every = model_quants(listing)
    primary = _find_best_model(listing, tag)
    if primary is not None:
        for quant in every:
            if primary in quant.files:
                return quant
    names = ", ".join(q.tag or q.first.path for q in every[:SHOWN_QUANTS])
    if len(every) > SHOWN_QUANTS:
        names += f", ... ({len(every)} in all)"
    raise HubNotFoundError(
        f"{listing.repo} has no {tag} quant; it has {names}",
        hint=f"name one of them: {listing.repo}:{every[0].tag or '?'}",
    )


def mmproj_for(listing: RepoListing, quant: Quant) -> RepoFile | None:
    """The projector llama-server -hf fetches beside ``quant`` (find_best_mmproj)."""
    return find_best_sibling(listing, quant.first.path, "mmproj")


def find_best_sibling(
    listing: RepoListing, model: str, keyword: str, tag: str = ""
) -> RepoFile | None:
    """llama.cpp's find_best_sibling: a ``.gguf`` whose path contains ``keyword``, in the
    model's folder or one above it (deepest wins), then the exact tag, then the nearest bits."""
    tag_upper = tag.upper()
    model_bits = quant_bits(tag_upper, is_tag=True) if tag_upper else quant_bits(model)
    model_dirs = model.split("/")[:-1]
    best: tuple[int, bool, int] | None = None
    best_file = None
    for file in listing.files:
        if not file.path.endswith(".gguf") or keyword not in file.path:
            continue
        dirs = file.path.split("/")[:-1]
        if len(dirs) > len(model_dirs) or model_dirs[: len(dirs)] != dirs:
            continue
        depth, diff = len(dirs), abs(quant_bits(file.path) - model_bits)
        exact = bool(tag_upper) and f"-{tag_upper}." in file.path.upper()
        if (
            best is None
            or depth > best[0]
            or (depth == best[0] and exact and not best[1])
            or (depth == best[0] and exact == best[1] and diff < best[2])
        ):
            best, best_file = (depth, exact, diff), file
    return best_file
