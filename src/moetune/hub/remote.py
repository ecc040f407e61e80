"""Listings and headers from the hub: the refs and tree API calls llama.cpp makes, and GGUF
headers read with HTTP ranges that grow as the parse needs them.

A header is fetched in at most a few ranged GETs: the first :data:`FIRST_BYTES`, then (when
the reader says the header continues, with an estimate of where it ends) up to that
estimate and half the step again, asking only for the bytes not yet held. The ``resolve``
URL's redirect is followed once per file; later ranges go straight to the CDN URL it gave.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlsplit

from moetune.errors import (
    GGUFFormatError,
    HubError,
    HubNotFoundError,
    NetworkError,
    TruncatedHeaderError,
)
from moetune.gguf.reader import GGUFHeader, read_header, read_header_prefix
from moetune.gguf.split import GGUFModel, model_from_shards, split_count
from moetune.hub import cache
from moetune.hub.http import Http, host_of, shown
from moetune.hub.listing import Quant, RepoFile, RepoListing, split_info
from moetune.hub.names import ModelName, ModelUrl, is_repo_id

FIRST_BYTES = 512 << 10
MAX_HEADER_BYTES = 256 << 20
MAX_ROUNDS = 12
MAX_PAGES = 100
MAX_FILES = 100_000
_COMMIT = re.compile(r"[0-9a-f]{40}")
_IMMUTABLE = re.compile(r"/resolve/[0-9a-f]{40}/")


# --- listings -------------------------------------------------------------------------------


def list_repo(name: ModelName) -> RepoListing:
    """The repository's files at the commit ``main`` points to (refs, then the recursive
    tree, as llama.cpp asks); the Hugging Face cache's snapshot when the hub fails.

    Warm, it makes no request: the refs answer is trusted for an hour (then revalidated by
    ETag, and kept when the hub cannot be reached) and a commit's tree never changes.
    """
    if not is_repo_id(name.repo):
        raise HubNotFoundError(f"{name.repo!r} is not a repository id (owner/name)")
    try:
        with Http(name.repo) as http:
            commit = _resolve_commit(http, name.repo)
            listing = cache.load_listing(name.repo, commit)
            if listing is None:
                listing = _fetch_tree(http, name.repo, commit)
                cache.save_listing(listing)
            return listing
    except HubError:
        local = cache.hf_cached_listing(name.repo)
        if local is None:
            raise
        return local


def _resolve_commit(http: Http, repo: str) -> str:
    known = cache.load_ref(repo)
    if known is not None and known.fresh:
        return known.commit
    url = f"{http.endpoint}/api/models/{repo}/refs"
    try:
        answer = http.get_json(url, f"repository {repo}", etag=known.etag if known else None)
    except NetworkError:
        if known is None:
            raise
        return known.commit  # stale but the hub is unreachable: what llama.cpp's cache does
    if answer.status == 304 and known is not None:
        cache.save_ref(repo, known.commit, answer.etag)
        return known.commit
    commit = _main_commit(answer.data, repo, host_of(url))
    cache.save_ref(repo, commit, answer.etag)
    return commit


def _main_commit(data: Any, repo: str, host: str) -> str:
    """``main``'s targetCommit, else the first branch's (get_repo_commit)."""
    branches = data.get("branches") if isinstance(data, dict) else None
    found = [
        (b["name"], b["targetCommit"])
        for b in (branches if isinstance(branches, list) else [])
        if isinstance(b, dict)
        and isinstance(b.get("name"), str)
        and isinstance(b.get("targetCommit"), str)
        and _COMMIT.fullmatch(b["targetCommit"])
    ]
    for branch, commit in found:
        if branch == "main":
            return str(commit)
    if not found:
        raise HubNotFoundError(f"{repo} on {host} has no branch with a commit")
    return str(found[0][1])


def _fetch_tree(http: Http, repo: str, commit: str) -> RepoListing:
    """Every page of the recursive tree (the ``Link: rel="next"`` chain): at most
    :data:`MAX_PAGES` pages and :data:`MAX_FILES` entries; a page seen twice is a loop."""
    url: str | None = f"{http.endpoint}/api/models/{repo}/tree/{commit}?recursive=true"
    what = f"the tree of {repo}"
    files: list[RepoFile] = []
    seen: set[str] = set()
    entries = 0
    while url is not None:
        if url in seen:
            raise NetworkError(
                f"{host_of(url)} lists {what} in a loop: page {len(seen)} links back to "
                f"{shown(url)}"
            )
        if len(seen) == MAX_PAGES:
            raise NetworkError(f"{host_of(url)} lists {what} in more than {MAX_PAGES} pages")
        seen.add(url)
        answer = http.get_json(url, f"repository {repo}")
        if not isinstance(answer.data, list):
            raise NetworkError(f"{host_of(url)} answered {what} with a non-list")
        entries += len(answer.data)
        if entries > MAX_FILES:
            raise NetworkError(f"{host_of(url)} lists more than {MAX_FILES} entries in {what}")
        files += [f for item in answer.data if (f := _tree_file(item)) is not None]
        url = answer.next_url
    return RepoListing(repo, commit, tuple(files))


def _size(value: Any) -> int | None:
    """A size from a JSON answer: a non-negative integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _tree_file(item: Any) -> RepoFile | None:
    if not isinstance(item, dict) or item.get("type") != "file":
        return None
    path, lfs = item.get("path"), item.get("lfs")
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        return None
    oid = lfs.get("oid") if isinstance(lfs, dict) else None
    size = (_size(lfs.get("size")) if isinstance(lfs, dict) else None) or _size(item.get("size"))
    return RepoFile(path, size or 0, oid if isinstance(oid, str) else None)


# --- headers --------------------------------------------------------------------------------


def read_remote_header(
    http: Http, url: str, name: str, what: str, size: int | None = None
) -> tuple[GGUFHeader, cache.CachedHeader]:
    """Fetch and parse one file's header with growing ranged GETs."""
    if size == 0:
        raise GGUFFormatError(f"{name} is empty, not a GGUF file")
    buf = bytearray()
    end = FIRST_BYTES if size is None else min(FIRST_BYTES, size)
    etag = None
    for _ in range(MAX_ROUNDS):
        part = http.get_range(url, len(buf), end - 1, what)
        url, size, etag = part.url, part.total, etag or part.etag
        buf += part.data
        if len(buf) >= 4 and bytes(buf[:4]) != b"GGUF":
            raise GGUFFormatError(
                f"{name} is not a GGUF file ({host_of(url)} sent {bytes(buf[:16])!r}...)"
            )
        try:
            header = read_header_prefix(bytes(buf), size, name)
        except TruncatedHeaderError as exc:
            if len(buf) >= size or not part.data:
                raise GGUFFormatError(f"truncated GGUF header in {name}") from None
            end = min(size, _next_end(len(buf), exc.needed_bytes))
            if end > MAX_HEADER_BYTES:
                raise GGUFFormatError(
                    f"{name}: header larger than {MAX_HEADER_BYTES >> 20} MiB, not read"
                ) from None
            continue
        held = bytes(buf[: min(len(buf), header.data_offset)])
        return header, cache.CachedHeader(held, size, etag, header.skips)
    raise GGUFFormatError(f"{name}: header not complete after {MAX_ROUNDS} ranged reads")


def _next_end(have: int, needed: int) -> int:
    """How far to read next: the reader's estimate plus half the step again (more arrays
    usually follow the one it ended in) plus 64 KiB, and at least a quarter more than now.
    On a 151936-token header (6.1 MiB) from 512 KiB: 3 ranged reads, 7.1 MiB in all."""
    return max(needed + (needed - have) // 2 + (64 << 10), have * 5 // 4)


def _from_cache(key: str, name: str) -> GGUFHeader | None:
    held = cache.load_header(key)
    if held is None:
        return None
    try:
        return read_header_prefix(held.data, held.file_bytes, name, held.skips)
    except GGUFFormatError:
        return None  # stale or damaged: fetch again


def _repo_shard(http: Http, listing: RepoListing, file: RepoFile) -> GGUFHeader:
    name = f"{listing.repo}/{file.path}"
    key = f"oid:{file.oid}" if file.oid else f"rev:{listing.repo}@{listing.commit}:{file.path}"
    header = _from_cache(key, name)
    if header is None:
        url = f"{http.endpoint}/{listing.repo}/resolve/{listing.commit}/{quote(file.path)}"
        what = f"file {file.path} of {listing.repo}"
        header, held = read_remote_header(http, url, name, what, file.size or None)
        cache.save_header(key, held)
    return header


def remote_model(listing: RepoListing, quant: Quant) -> GGUFModel:
    """The headers of every shard of ``quant``: read from the Hugging Face cache when a
    shard is there (its real path), else over HTTP ranges (cached in moetune's cache; the
    header's ``path`` is then ``Path("owner/name/<file path>")`` and ``file_bytes`` the
    remote file's full size)."""
    with Http(listing.repo) as http:
        headers = []
        for file in quant.files:
            local = cache.cached_paths(listing, Quant(quant.tag, (file,)))
            headers.append(read_header(local[0]) if local else _repo_shard(http, listing, file))
    _check_count(headers[0], len(quant.files), f"{listing.repo}/{quant.first.path}")
    return model_from_shards(headers)


def _check_count(first: GGUFHeader, have: int, name: str) -> None:
    count = split_count(first)
    if count != have:
        raise HubNotFoundError(f"{name} is shard 1 of {count}, but {have} shard(s) were found")


def _shard_urls(url: str) -> list[str]:
    """Every shard's URL, from any one's (common_download_get_all_parts)."""
    parts = urlsplit(url)
    info = split_info(parts.path)
    if info is None or info.shards <= 1:
        return [url]
    return [
        parts._replace(path=f"{info.prefix}-{i:05d}-of-{info.shards:05d}.gguf").geturl()
        for i in range(1, info.shards + 1)
    ]


def _url_shard(http: Http, url: str) -> GGUFHeader:
    parts = urlsplit(url)
    name = f"{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"
    key, what = f"url:{shown(url)}", f"file {shown(url)}"
    held = cache.load_header(key)
    if held is not None and not _IMMUTABLE.search(parts.path):
        try:  # a URL that can change: reuse the header while its ETag holds
            if http.head_etag(url, what) not in (None, held.etag):
                held = None
        except NetworkError:
            pass  # unreachable: the cached header is all there is
    if held is not None and (header := _from_cache(key, name)) is not None:
        return header
    header, fresh = read_remote_header(http, url, name, what)
    cache.save_header(key, fresh)
    return header


def url_model(url: ModelUrl) -> GGUFModel:
    """The headers of the GGUF file at ``url`` (and of its other shards, by name); the
    header's ``path`` is ``Path("host/url/path")``. A hub ``resolve/<commit>/`` URL's header
    is reused from the cache with no request; another URL's while its ETag holds."""
    if not url.url.lower().startswith(("http://", "https://")):
        raise HubNotFoundError(f"{url.url!r} is not an http(s) URL")
    with Http() as http:
        headers = [_url_shard(http, shard) for shard in _shard_urls(url.url)]
    _check_count(headers[0], len(headers), headers[0].path.as_posix())
    return model_from_shards(headers)
