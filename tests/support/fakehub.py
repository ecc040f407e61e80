"""A local stand-in for the Hugging Face hub on 127.0.0.1, for the calls llama.cpp (build
11434, common/hf-cache.cpp and download.cpp) and moetune make:

- ``GET /api/models/{repo}/refs`` -> ``{"branches": [{"name": "main", "targetCommit": …}]}``
  with an ETag (If-None-Match -> 304);
- ``GET /api/models/{repo}/tree/{rev}?recursive=true`` -> entries with ``type``, ``oid``,
  ``size``, ``path`` and, for ``.gguf`` files, ``lfs`` (sha256 oid, size), like the real one;
- ``GET|HEAD /{repo}/resolve/{rev}/{path}`` -> 302 to a pretend CDN: a second server on
  another port (another origin, so tests can tell where a token went), which answers Range
  with 206, ``Content-Range``, ``Accept-Ranges`` and an ETag.

A gated repository answers 401 (``X-Error-Code: GatedRepo``) without its token. Misbehaviour
on demand: ``ignore_range`` (200 with the whole body), ``redirect_loop``, ``not_gguf`` (an
HTML page instead of the bytes), and per kind of answer (``refs``, ``tree``, ``resolve``,
``file``) a :class:`Misbehave` in ``hub.misbehave``: another status, body or headers, a drip
(some bytes, then one byte every ``drip_s``), a cut (the connection closed mid-body), a
``Link: rel="next"`` loop, a delay before answering. The most requests answered at once is
counted (``most_in_flight``). A repository's tree comes in pages of ``page_size`` entries (the
``cursor`` query, as the real hub's ``Link`` header chain). Every request is recorded
(:class:`Seen`), and the body bytes served per path are counted.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
HTML = b"<!doctype html><html><body>Sign in to continue</body></html>" * 40


class Seen(NamedTuple):
    """One request as a server saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class Misbehave:
    """How one kind of answer goes wrong (every field optional)."""

    status: int | None = None  # answer this status instead (a JSON error body)
    body: bytes | None = None  # this body instead (bad JSON, HTML, ...)
    headers: dict[str, str] = field(default_factory=dict)  # added or replacing
    drip: int | None = None  # body bytes sent at once, then one byte every drip_s
    drip_head: bool = False  # drip the status line and headers too
    cut: int | None = None  # body bytes sent before the connection is closed
    link: str | None = None  # tree pages: "self" (next is the same page), "cycle" (last -> first)
    mutate: Callable[[bytes], bytes] | None = None  # the body, rewritten (a fuzz's mutation)
    delay_s: float = 0.0  # wait this long before answering


@dataclass
class FakeRepo:
    name: str
    files: dict[str, Path]  # repo path -> file on disk
    commit: str
    token: str | None = None  # a gated repository's token
    page_size: int | None = None  # tree entries per page (None: one page)

    def oid(self, path: str) -> str:
        size = self.files[path].stat().st_size
        return hashlib.sha256(f"{self.name}/{path}/{size}".encode()).hexdigest()


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    bytes_served: Counter[str] = field(default_factory=Counter)
    ignore_range: bool = False
    redirect_loop: bool = False
    not_gguf: bool = False
    misbehave: dict[str, Misbehave] = field(default_factory=dict)  # by kind of answer
    drip_s: float = 1.0
    hub_port: int = 0
    cdn_port: int = 0
    in_flight: int = 0  # requests being answered now
    most_in_flight: int = 0  # the most at once since the last reset
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub_port}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self.cdn_port}"

    def add_repo(
        self,
        name: str,
        files: dict[str, Path],
        token: str | None = None,
        page_size: int | None = None,
    ) -> FakeRepo:
        commit = hashlib.sha1(name.encode()).hexdigest()
        self.repos[name] = FakeRepo(name, dict(files), commit, token, page_size)
        return self.repos[name]

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()
            self.bytes_served.clear()
            self.most_in_flight = self.in_flight
        self.ignore_range = self.redirect_loop = self.not_gguf = False
        self.misbehave = {}
        self.drip_s = 1.0

    def requests(self, server: str | None = None, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if (server is None or s.server == server) and (method is None or s.method == method)
            ]

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def answering(self, change: int) -> None:
        with self._lock:
            self.in_flight += change
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def count_bytes(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_served[path] += n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def _route(self, method: str) -> None:
        seen = Seen(
            self.role,
            method,
            self.path,
            self.headers.get("Range"),
            self.headers.get("Authorization"),
        )
        self.hub.record(seen)
        path = unquote(urlsplit(self.path).path)
        self.hub.answering(+1)
        try:
            if self.role == "cdn":
                self._cdn(method, path)
            else:
                self._api(method, path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub.answering(-1)

    # --- answers ------------------------------------------------------------------------

    def _send(
        self,
        status: int,
        body: bytes | Iterable[bytes] = b"",
        kind: str = "",
        length: int | None = None,
        **headers: str,
    ) -> None:
        """Write the whole answer by hand (status line, headers, body), misbehaving as
        ``hub.misbehave[kind]`` says."""
        bad = self.hub.misbehave.get(kind, Misbehave())
        if bad.delay_s:
            time.sleep(bad.delay_s)
        if bad.status is not None:
            status, body, length = bad.status, json.dumps({"error": "misbehaving"}).encode(), None
            headers = {"Content_Type": "application/json"}
        if bad.body is not None:
            body, length = bad.body, None
        chunks = [body] if isinstance(body, bytes) else body
        if bad.mutate is not None:
            chunks, length = [bad.mutate(b"".join(chunks))], None
        if length is None:
            chunks = [b"".join(chunks)]
            length = len(chunks[0])
        fields = {k.replace("_", "-"): v for k, v in headers.items()}
        fields.setdefault("Content-Length", str(length))
        fields.update(bad.headers)
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in fields.items()
        )
        self._write((head + "\r\n").encode("latin-1"), 0 if bad.drip_head else None)
        if self.command == "HEAD":
            return
        sent = 0
        for chunk in chunks:
            if bad.cut is not None and sent + len(chunk) >= bad.cut:
                self._write(chunk[: max(bad.cut - sent, 0)], None)
                self.close_connection = True
                self.connection.shutdown(2)  # the rest never comes
                return
            drip = None if bad.drip is None else max(bad.drip - sent, 0)
            self._write(chunk, drip)
            if kind == "file":
                self.hub.count_bytes(unquote(urlsplit(self.path).path), len(chunk))
            sent += len(chunk)

    def _write(self, data: bytes, drip: int | None) -> None:
        """``data``, its first ``drip`` bytes at once and the rest one byte every drip_s."""
        if drip is None or drip >= len(data):
            self.wfile.write(data)
            return
        self.wfile.write(data[:drip])
        for i in range(drip, len(data)):
            self.wfile.flush()
            time.sleep(self.hub.drip_s)
            self.wfile.write(data[i : i + 1])

    def _json(self, data: Any, status: int = 200, kind: str = "", **headers: str) -> None:
        body = json.dumps(data).encode()
        self._send(status, body, kind, None, Content_Type="application/json", **headers)

    def _repo(self, name: str, kind: str) -> FakeRepo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._json({"error": "Repository not found"}, 404, kind, X_Error_Code="RepoNotFound")
            return None
        if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
            status = 403 if self.headers.get("Authorization") else 401
            self._json(
                {"error": f"Access to model {name} is restricted."},
                status,
                kind,
                X_Error_Code="GatedRepo",
            )
            return None
        return repo

    def _api(self, method: str, path: str) -> None:
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/refs", path):
            if repo := self._repo(m[1], "refs"):
                etag = f'W/"{repo.commit[:12]}"'
                if self.headers.get("If-None-Match") == etag:
                    self._send(304, b"", "refs", ETag=etag)
                    return
                branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit}
                self._json(
                    {"branches": [branch], "converts": [], "tags": []}, 200, "refs", ETag=etag
                )
        elif m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path):
            if repo := self._repo(m[1], "tree"):
                self._tree_page(repo)
        elif m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            if repo := self._repo(m[1], "resolve"):
                self._resolve(repo, m[2], m[3])
        else:
            self._json({"error": "not found"}, 404)

    def _tree_page(self, repo: FakeRepo) -> None:
        entries = _tree(repo)
        size = repo.page_size or max(len(entries), 1)
        query = parse_qs(urlsplit(self.path).query)
        cursor = int(query.get("cursor", ["0"])[0])
        page, after = entries[cursor : cursor + size], cursor + size
        base = f"{self.hub.endpoint}{urlsplit(self.path).path}?recursive=true"
        link = self.hub.misbehave.get("tree", Misbehave()).link
        target = None
        if link == "self":
            target = f"{self.hub.endpoint}{self.path}"
        elif after < len(entries):
            target = f"{base}&cursor={after}"
        elif link == "cycle":
            target = f"{base}&cursor=0"
        headers = {"Link": f'<{target}>; rel="next"'} if target else {}
        self._json(page, 200, "tree", **headers)

    def _resolve(self, repo: FakeRepo, rev: str, file: str) -> None:
        if file not in repo.files or rev not in (repo.commit, "main"):
            self._json({"error": "Entry not found"}, 404, "resolve", X_Error_Code="EntryNotFound")
            return
        if self.hub.redirect_loop:
            self._send(302, b"", "resolve", Location=self.path)
            return
        size = str(repo.files[file].stat().st_size)
        target = f"{self.hub.cdn}/cdn/{repo.name}/{file}?sig=pretend-signature"
        self._send(
            302,
            b"",
            "resolve",
            Location=target,
            X_Linked_Size=size,
            X_Repo_Commit=repo.commit,
            X_Linked_Etag=f'"{repo.oid(file)}"',
        )

    def _cdn(self, method: str, path: str) -> None:
        m = re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path)
        repo = self.hub.repos.get(m[1]) if m else None
        if m is None or repo is None or m[2] not in repo.files:
            self._send(404, b"NoSuchKey", "file")
            return
        if self.hub.not_gguf:
            self._send(200, HTML, "file", Content_Type="text/html")
            return
        self._serve_file(repo.files[m[2]], f'"{repo.oid(m[2])}"')

    def _serve_file(self, file: Path, etag: str) -> None:
        size = file.stat().st_size
        wanted = _RANGE.fullmatch(self.headers.get("Range", ""))
        headers = {
            "Accept_Ranges": "bytes",
            "ETag": etag,
            "Content_Type": "application/octet-stream",
        }
        if wanted is None or self.hub.ignore_range:
            start, end, status = 0, size - 1, 200
        else:
            start = int(wanted[1])
            end = min(int(wanted[2]) if wanted[2] else size - 1, size - 1)
            status = 206
            if start >= size:
                self._send(416, b"", "file", Content_Range=f"bytes */{size}")
                return
            headers["Content_Range"] = f"bytes {start}-{end}/{size}"
        self._send(status, _chunks(file, start, end), "file", end - start + 1, **headers)


def _chunks(file: Path, start: int, end: int) -> Iterator[bytes]:
    """The bytes ``start..end`` of ``file``, 64 KiB at a time."""
    with file.open("rb") as handle:
        handle.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = handle.read(min(left, 1 << 16))
            if not chunk:
                return
            yield chunk
            left -= len(chunk)


def _tree(repo: FakeRepo) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    dirs = sorted(
        {"/".join(p.split("/")[:i]) for p in repo.files for i in range(1, p.count("/") + 1)}
    )
    entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs]
    for path in sorted(repo.files):
        size = repo.files[path].stat().st_size
        entry: dict[str, Any] = {
            "type": "file",
            "oid": hashlib.sha1(path.encode()).hexdigest(),
            "size": size,
            "path": path,
        }
        if path.endswith(".gguf"):
            entry["lfs"] = {"oid": repo.oid(path), "size": size, "pointerSize": 134}
        entries.append(entry)
    return entries


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a deadline, a refused answer) is no error of the hub's."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _server(hub: FakeHub, role: str) -> ThreadingHTTPServer:
    handler = type(f"{role}Handler", (_Handler,), {"hub": hub, "role": role})
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    """A running fake hub and its pretend CDN; add repositories with ``add_repo``."""
    hub = FakeHub()
    servers = [_server(hub, "hub"), _server(hub, "cdn")]
    hub.hub_port, hub.cdn_port = (s.server_address[1] for s in servers)
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
