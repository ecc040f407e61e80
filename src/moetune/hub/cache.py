"""The two caches the hub layer reads: the Hugging Face cache llama.cpp downloads into, and
moetune's own cache of hub answers and fetched headers.

Hugging Face cache (common/hf-cache.cpp, read only here): the first of ``$LLAMA_CACHE``,
``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``,
``$XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``; one folder per repository,
``models--owner--name/`` with ``refs/main`` (the commit), ``blobs/<sha256>`` (the contents)
and ``snapshots/<commit>/<path>`` (links to the blobs).

moetune's cache (``$MOETUNE_HOME/hub``, else ``<user cache dir>/moetune/hub``):
- ``refs/<folder>.json``: the commit ``main`` resolved to, the refs answer's ETag and when
  it was checked. Trusted without a request for :data:`REFS_FRESH_S`; after that it is
  revalidated (If-None-Match), and kept when the hub cannot be reached.
- ``listings/<folder>/<commit>.json``: the tree at that commit (a commit never changes).
- ``headers/<key>.gguf`` + ``.json``: a file's header bytes (up to its data region) and its
  full size, keyed by the LFS sha256, else repo+commit+path, else the URL (with its ETag);
  the ``.json`` also keeps where the header's string arrays (the vocabulary) begin and end,
  so that reading it again jumps over them instead of walking every string.
Nothing here holds a token or a request header. Writes are atomic and best effort: a cache
that cannot be written only costs requests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moetune.hub.listing import Quant, RepoFile, RepoListing

if TYPE_CHECKING:
    from moetune.gguf.reader import Skip

REFS_FRESH_S = 3600.0
_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


# --- the Hugging Face cache ---------------------------------------------------------------


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache llama.cpp uses (hf_cache::get_cache_directory)."""
    for var, sub in (
        ("LLAMA_CACHE", ()),
        ("HF_HUB_CACHE", ()),
        ("HUGGINGFACE_HUB_CACHE", ()),
        ("HF_HOME", ("hub",)),
        ("XDG_CACHE_HOME", ("huggingface", "hub")),
    ):
        if base := os.environ.get(var):
            return Path(base).expanduser().joinpath(*sub)
    return Path.home() / ".cache" / "huggingface" / "hub"


def repo_folder(repo: str) -> str:
    """``owner/name`` -> ``models--owner--name``."""
    return "models--" + repo.replace("/", "--")


def _cached_commit(repo_dir: Path) -> str | None:
    """refs/main, else the first other ref holding a commit (get_cached_ref)."""
    refs = repo_dir / "refs"
    if not refs.is_dir():
        return None
    fallback = None
    for entry in sorted(refs.iterdir()):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            commit = entry.read_text(encoding="utf-8").strip() if entry.is_file() else ""
            if _HEX40.fullmatch(commit):
                if entry.name == "main":
                    return commit
                fallback = fallback or commit
    return fallback


def _blob_oid(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        if path.is_symlink() and _HEX64.fullmatch(name := path.readlink().name):
            return name.lower()
    return None


def hf_cached_listing(repo: str) -> RepoListing | None:
    """The repository as the Hugging Face cache holds it (its snapshot of refs/main), or
    None when it holds nothing of it (get_cached_files)."""
    repo_dir = hf_cache_dir() / repo_folder(repo)
    commit = _cached_commit(repo_dir)
    snapshot = repo_dir / "snapshots" / (commit or "")
    if commit is None or not snapshot.is_dir():
        return None
    files = []
    for path in sorted(snapshot.rglob("*")):
        with contextlib.suppress(OSError):
            if path.is_file():
                rel = path.relative_to(snapshot).as_posix()
                files.append(RepoFile(rel, path.stat().st_size, _blob_oid(path)))
    return RepoListing(repo, commit, tuple(files)) if files else None


def cached_paths(listing: RepoListing, quant: Quant) -> tuple[Path, ...] | None:
    """Every shard of ``quant`` in the Hugging Face cache (``snapshots/<commit>/<path>``,
    its blob present and of the listed size), or None if any is missing."""
    snapshot = hf_cache_dir() / repo_folder(listing.repo) / "snapshots" / listing.commit
    found = []
    for file in quant.files:
        path = snapshot / file.path
        try:
            if not path.is_file() or (file.size and path.stat().st_size != file.size):
                return None
        except OSError:
            return None
        found.append(path)
    return tuple(found)


# --- moetune's cache ------------------------------------------------------------------------


def hub_cache_dir() -> Path:
    """``$MOETUNE_HOME/hub``, else ``<user cache dir>/moetune/hub`` (store/paths.py)."""
    from moetune.store import paths

    return paths.hub_cache_dir()


def _write_atomic(path: Path, data: bytes) -> None:
    """Best effort: a cache entry that cannot be written only costs requests."""
    from moetune.store.files import write_atomic

    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)


def _read_json(path: Path) -> Any:
    from moetune.store.files import parse_json

    try:
        return parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class CachedRef:
    """What ``main`` resolved to, its ETag, and whether it is fresh enough to trust unasked."""

    def __init__(self, commit: str, etag: str | None, checked: float) -> None:
        self.commit, self.etag, self.checked = commit, etag, checked

    @property
    def fresh(self) -> bool:
        return 0 <= time.time() - self.checked < REFS_FRESH_S


def load_ref(repo: str) -> CachedRef | None:
    data = _read_json(hub_cache_dir() / "refs" / f"{repo_folder(repo)}.json")
    if not isinstance(data, dict) or not _HEX40.fullmatch(str(data.get("commit", ""))):
        return None
    etag, checked = data.get("etag"), data.get("checked", 0)
    if type(checked) not in (int, float) or not 0 <= checked < 1e12:
        checked = 0.0  # damaged: revalidate
    return CachedRef(data["commit"], etag if isinstance(etag, str) else None, float(checked))


def save_ref(repo: str, commit: str, etag: str | None) -> None:
    body = {"repo": repo, "commit": commit, "etag": etag, "checked": time.time()}
    _write_atomic(hub_cache_dir() / "refs" / f"{repo_folder(repo)}.json", json.dumps(body).encode())


def load_listing(repo: str, commit: str) -> RepoListing | None:
    data = _read_json(hub_cache_dir() / "listings" / repo_folder(repo) / f"{commit}.json")
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return None
    try:
        files = tuple(RepoFile(str(f[0]), int(f[1]), f[2]) for f in data["files"])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    if any(f.size < 0 or not (f.oid is None or isinstance(f.oid, str)) for f in files):
        return None  # damaged: list again
    return RepoListing(repo, commit, files)


def save_listing(listing: RepoListing) -> None:
    body = {
        "repo": listing.repo,
        "commit": listing.commit,
        "files": [list(f) for f in listing.files],
    }
    path = hub_cache_dir() / "listings" / repo_folder(listing.repo) / f"{listing.commit}.json"
    _write_atomic(path, json.dumps(body).encode())


class CachedHeader:
    """A file's header bytes, its full size and the ETag it was fetched under; ``skips``:
    the string arrays its parse walked past (``GGUFHeader.skips``), so that the next parse
    jumps over them."""

    def __init__(
        self, data: bytes, file_bytes: int, etag: str | None, skips: tuple[Skip, ...] = ()
    ) -> None:
        self.data, self.file_bytes, self.etag, self.skips = data, file_bytes, etag, skips


def _header_path(key: str) -> Path:
    return hub_cache_dir() / "headers" / hashlib.sha256(key.encode()).hexdigest()[:40]


def load_header(key: str) -> CachedHeader | None:
    base = _header_path(key)
    meta = _read_json(base.with_suffix(".json"))
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    try:
        data = base.with_suffix(".gguf").read_bytes()
        etag = meta.get("etag")
        skips = tuple(_skip(item) for item in meta.get("skips", ()))
        return CachedHeader(
            data, int(meta["file_bytes"]), etag if isinstance(etag, str) else None, skips
        )
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _skip(item: object) -> Skip:
    if not isinstance(item, list) or len(item) != 3 or not all(type(v) is int for v in item):
        raise ValueError(f"not a skipped array: {item!r}")
    return (item[0], item[1], item[2])


def save_header(key: str, header: CachedHeader) -> None:
    base = _header_path(key)
    _write_atomic(base.with_suffix(".gguf"), header.data)
    meta = {
        "key": key,
        "file_bytes": header.file_bytes,
        "etag": header.etag,
        "skips": [list(skip) for skip in header.skips],
    }
    _write_atomic(base.with_suffix(".json"), json.dumps(meta).encode())
